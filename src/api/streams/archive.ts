// Sends an archive the engine writes itself (docker save) straight to the
// connection: no stream in between, so each byte is copied once.
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { SavedArchive } from '../../engine/index.js';
import { COMMON_HEADERS } from '../headers.js';

/** A failure part way cannot become an HTTP error any more: the connection is cut, so the client sees a broken archive. */
export async function sendArchive(req: FastifyRequest, reply: FastifyReply, archive: SavedArchive): Promise<void> {
  reply.hijack();
  reply.raw.writeHead(200, { ...COMMON_HEADERS, 'Content-Type': 'application/x-tar' });
  try {
    await archive.writeTo(reply.raw);
    reply.raw.end();
  } catch (e) {
    req.log.warn({ url: req.url, err: (e as Error).message }, 'save stopped part way');
    reply.raw.destroy();
  }
}
