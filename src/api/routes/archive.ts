// HEAD, GET and PUT /containers/{id}/archive (`docker cp`): thin translations
// between Docker's wire shapes and the archive service.
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { Readable } from 'node:stream';
import { type Engine, type PathStat, setSendBuffer } from '../../engine/index.js';
import { invalidParameter } from '../../errors.js';
import { boolValue, query } from '../wire/forms.js';

type IdParams = { Params: { id: string } };

/** dockerd's stat header: base64 of the PathStat's JSON. */
const STAT_HEADER = 'X-Docker-Container-Path-Stat';
const statHeader = (stat: PathStat) => Buffer.from(JSON.stringify(stat)).toString('base64');
/**
 * A copy out's socket may hold this much the client has not read: the CLI,
 * extracting, then finds bytes waiting rather than waiting for the daemon to
 * be scheduled again on a loaded machine (the default holds ~200 KiB).
 */
const SEND_BUFFER = 4 << 20;

/** The `path` query parameter, required as dockerd's ArchiveFormValues requires it. */
function pathOf(req: FastifyRequest): string {
  const path = query(req).path ?? '';
  if (path === '') throw invalidParameter('bad parameter: path cannot be empty');
  return path;
}

export function archiveRoutes(app: FastifyInstance, engine: Engine): void {
  const archives = engine.archives;

  app.head<IdParams>('/containers/:id/archive', async (req, reply) => {
    const stat = await archives.stat(req.params.id, pathOf(req));
    return reply.header(STAT_HEADER, statHeader(stat)).send();
  });

  app.get<IdParams>('/containers/:id/archive', async (req, reply) => {
    const { stat, tar } = await archives.get(req.params.id, pathOf(req));
    const fd = (req.raw.socket as unknown as { _handle?: { fd?: number } })._handle?.fd;
    if (fd !== undefined && fd >= 0) setSendBuffer(fd, SEND_BUFFER);
    return reply.header(STAT_HEADER, statHeader(stat)).type('application/x-tar').send(tar);
  });

  app.put<IdParams>('/containers/:id/archive', async (req, reply) => {
    const q = query(req);
    const path = pathOf(req);
    const streamed = req.body as Readable | undefined;
    const body = streamed && typeof streamed.on === 'function' ? streamed : req.raw;
    await archives.put(req.params.id, path, body, {
      noOverwriteDirNonDir: boolValue(q.noOverwriteDirNonDir),
      copyUIDGID: boolValue(q.copyUIDGID),
    });
    return reply.code(200).send();
  });
}
