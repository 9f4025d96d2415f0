// BuildKit's exporters that hand a build's files to the client instead of
// making an image (docs/buildkit/protocol.md §3.2, recordings 05 and 06), over
// the session's FileSend/DiffCopy: `local` sends the tree as fsutil packets
// (berthd the sender; the client writes the files under its `dest`), `tar`
// sends one tar stream as BytesMessages and half-closes. Both export the
// result's filesystem, the last stage's (or --target's), as the client's
// "exporting to client" vertex shows.
import tar from 'tar-stream';
import type { Engine, ImageTree, TreeEntry } from '../../engine/index.js';
import { messageOf } from '../../errors.js';
import { sendTree } from './fsutil.js';
import type { ClientCall } from './grpc-client.js';
import { GrpcCode, GrpcError } from './grpc.js';
import type { StatusFeed } from './progress.js';
import { Vertex } from './progress.js';
import * as m from './proto/messages.js';
import { type ClientSession, callSession } from './session.js';

const FILESEND = '/moby.filesync.v1.FileSend/DiffCopy';

/** The exporters that send files; each one's row on the "exporting to client" vertex. */
export const FILE_EXPORTERS: Record<string, string> = { local: 'copying files', tar: 'sending tarball' };

/**
 * Exporter attributes of the file exporters: `platform-split` only changes the
 * layout of a multi-platform result, and berthd builds one platform.
 */
export const FILE_EXPORTER_ATTRS = new Set(['platform-split']);

type EntryHeader = Parameters<ReturnType<typeof tar.pack>['entry']>[0];

/** A tree entry's tar header, as BuildKit's tar exporter writes it (a directory's name ends with a slash, recording 06). */
function tarHeader(e: TreeEntry): EntryHeader {
  const base = { name: e.rel, mode: e.mode, uid: e.uid, gid: e.gid, mtime: new Date(Number(e.mtimeNs / 1_000_000n)) };
  switch (e.kind) {
    case 'dir':
      return { ...base, name: `${e.rel}/`, type: 'directory' };
    case 'symlink':
      return { ...base, type: 'symlink', linkname: e.linkname ?? '' };
    case 'link':
      return { ...base, type: 'link', linkname: e.linkname ?? '' };
    case 'fifo':
      return { ...base, type: 'fifo' };
    case 'char':
    case 'block':
      return {
        ...base,
        type: e.kind === 'char' ? 'character-device' : 'block-device',
        devmajor: e.devMajor ?? 0,
        devminor: e.devMinor ?? 0,
      };
    case 'file':
      return { ...base, type: 'file', size: e.size };
  }
}

/**
 * The tar of a tree, in walk order, as BytesMessages on the call; then the
 * half-close and the client's status. The client's end of the call (it went,
 * or refused) stops the writing at once: no file is read for nobody.
 */
async function sendTar(call: ClientCall, tree: ImageTree): Promise<void> {
  const pack = tar.pack();
  const stop = new AbortController();
  const stopped = new Promise<void>((resolve) =>
    stop.signal.addEventListener('abort', () => resolve(), { once: true }),
  );
  void call.status.then(() => stop.abort());
  // Stopped, the pack ends the loop below (a premature close, not an error: the status says what happened).
  stop.signal.addEventListener('abort', () => pack.destroy(), { once: true });
  const writing = (async () => {
    for (const e of tree.entries) {
      if (stop.signal.aborted) return;
      const header = tarHeader(e);
      if (e.kind !== 'file') {
        pack.entry(header);
        continue;
      }
      const entry = pack.entry(header);
      entry.on('error', () => undefined); // a stopped pack destroys its open entry
      for await (const chunk of await tree.read(e)) {
        if (stop.signal.aborted) return;
        if (!entry.write(chunk as Buffer))
          await Promise.race([new Promise<void>((resolve) => entry.once('drain', () => resolve())), stopped]);
      }
      await Promise.race([new Promise<void>((resolve) => entry.end(resolve)), stopped]);
    }
    pack.finalize();
  })();
  writing.catch((e: unknown) => pack.destroy(e as Error));
  try {
    for await (const chunk of pack) {
      call.send({ data: chunk as Buffer });
      await call.drained();
    }
  } catch (e) {
    if (!stop.signal.aborted) throw e;
  } finally {
    stop.abort();
    pack.destroy();
    await writing.catch(() => undefined);
  }
  await writing;
  call.end();
  const s = await call.status;
  if (s.code === GrpcCode.CANCELLED || s.code === GrpcCode.UNAVAILABLE)
    throw new GrpcError(GrpcCode.CANCELLED, `the client went away during the export: ${s.message}`);
  if (s.code !== 0)
    throw new GrpcError(GrpcCode.UNKNOWN, s.message || `the client ended the tar with status ${s.code}`);
}

/**
 * Exports the image's files to the client by `exporter` (`local` or `tar`),
 * with BuildKit's "exporting to client" vertex; the tree is released after.
 */
export async function exportFiles(
  engine: Engine,
  session: ClientSession,
  exporter: string,
  imageId: string,
  feed: StatusFeed,
  signal: AbortSignal,
): Promise<void> {
  const row = FILE_EXPORTERS[exporter]!;
  const vertex = new Vertex(feed, 'exporting to client').start();
  let call: ClientCall | undefined;
  const cancel = () => call?.cancel();
  signal.addEventListener('abort', cancel, { once: true });
  let tree: ImageTree | undefined;
  try {
    tree = await engine.builds.files(imageId);
    const read = tree.read;
    if (exporter === 'local') {
      call = callSession(session, FILESEND, m.Packet, m.Packet);
      const counter = vertex.counter(row);
      await sendTree(call, tree.entries, (e) => read(e as TreeEntry), counter.bytes);
      signal.throwIfAborted();
      counter.done();
    } else {
      call = callSession(session, FILESEND, m.BytesMessage, m.BytesMessage);
      vertex.status(row);
      await sendTar(call, tree);
      signal.throwIfAborted();
      vertex.status(row, undefined, true);
    }
    vertex.complete();
  } catch (e) {
    call?.cancel();
    vertex.complete(messageOf(e));
    // A client gone is a cancelled build; the rest fails as dockerd fails an export: Unknown, with the words.
    if (signal.aborted) throw signal.reason;
    if (e instanceof GrpcError && e.code === GrpcCode.CANCELLED) throw e;
    throw new GrpcError(GrpcCode.UNKNOWN, messageOf(e));
  } finally {
    signal.removeEventListener('abort', cancel);
    await tree?.release();
  }
}
