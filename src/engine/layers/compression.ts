// The compressions an archive may come in (a build context, an ADD source,
// docker load's and docker import's uploads), as dockerd's
// archive.DecompressStream knows them: gzip (zlib), bzip2 and xz (their own
// programs, as dockerd runs xz; Node has neither), or none.
import { existsSync } from 'node:fs';
import path from 'node:path';
import { PassThrough, Readable } from 'node:stream';
import { systemError, unavailable } from '../../errors.js';
import { spawnDetached } from '../os/spawn.js';
import { zlib } from '../os/zlib.js';

export type Compression = 'none' | 'gzip' | 'bzip2' | 'xz';

/** Bytes enough to tell every compression apart. */
export const SNIFF_BYTES = 6;

/** The compression the first bytes of a stream show (DecompressStream's magic numbers). */
export function sniffCompression(head: Buffer): Compression {
  if (head.length >= 3 && head[0] === 0x1f && head[1] === 0x8b && head[2] === 0x08) return 'gzip';
  if (head.length >= 3 && head.toString('latin1', 0, 3) === 'BZh') return 'bzip2';
  if (head.length >= 6 && head.subarray(0, 6).equals(Buffer.from([0xfd, 0x37, 0x7a, 0x58, 0x5a, 0x00]))) return 'xz';
  return 'none';
}

/**
 * The stream's first `n` bytes (fewer if it ends first), and the stream to
 * read on from: `body` itself, with the bytes put back, or, when it has
 * already ended, a stream of them.
 */
export function peekBytes(body: Readable, n: number): Promise<{ head: Buffer; stream: Readable }> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let got = 0;
    const settle = (ended: boolean) => {
      body.off('readable', onReadable);
      body.off('end', onEnd);
      body.off('error', fail);
      const all = Buffer.concat(chunks, got);
      if (!ended && got > 0) body.unshift(all);
      resolve({ head: all.subarray(0, n), stream: ended ? Readable.from(got > 0 ? [all] : []) : body });
    };
    const onEnd = () => settle(true);
    const fail = (e: unknown) => {
      body.off('readable', onReadable);
      body.off('end', onEnd);
      reject(e);
    };
    const onReadable = () => {
      for (let c = body.read() as Buffer | null; c !== null; c = body.read() as Buffer | null) {
        chunks.push(c);
        got += c.length;
        if (got >= n) return settle(false);
      }
    };
    body.on('readable', onReadable);
    body.once('end', onEnd);
    body.once('error', fail);
  });
}

/** An upload, readable decompressed; see decompressUpload. */
export interface Upload {
  compression: Compression;
  /** The bytes to read: uncompressed, unless the upload's compression is one the caller keeps. */
  plain: Readable;
  /** Stops decompressing (its program killed) and reads the rest of the upload, dropping it. */
  discard(): Promise<void>;
}

/**
 * An upload (a request body), decompressed as its first bytes say, unless its
 * compression is one of `keep`. The body feeds the decompressor through a
 * stream of its own, so that stopping it (a corrupt archive, a refused one)
 * does not close the body: `discard` drains what is left, and the client,
 * still sending, reads the answer.
 */
export async function decompressUpload(received: Readable, keep: readonly Compression[] = []): Promise<Upload> {
  const { head, stream: body } = await peekBytes(received, SNIFF_BYTES);
  const compression = sniffCompression(head);
  if (compression === 'none' || keep.includes(compression))
    return { compression, plain: body, discard: () => drain(body) };
  const feed = new PassThrough({ highWaterMark: 1 << 20 });
  body.pipe(feed);
  body.once('error', (e) => feed.destroy(e));
  const plain = decompress(feed, compression);
  return {
    compression,
    plain,
    discard: () => {
      body.unpipe(feed);
      plain.destroy();
      return drain(body);
    },
  };
}

/** Reads the rest of `input`, dropping it. */
function drain(input: Readable): Promise<void> {
  return new Promise((resolve) => {
    if (input.readableEnded || input.destroyed) return resolve();
    input.once('end', resolve);
    input.once('close', resolve);
    input.once('error', () => resolve());
    input.resume();
  });
}

const SYSTEM_DIRS = ['/usr/bin', '/bin', '/usr/sbin', '/sbin'];
const found = new Map<string, string>();

/** The absolute path of a program (the native spawn does not search PATH), looked up once. */
function findProgram(name: string): string {
  const known = found.get(name);
  if (known) return known;
  const dirs = [...(process.env.PATH ?? '').split(':').filter((d) => d.startsWith('/')), ...SYSTEM_DIRS];
  const file = dirs.map((d) => path.join(d, name)).find((p) => existsSync(p));
  if (!file) throw unavailable(`${name} not found: it is needed to read ${name}-compressed archives`);
  found.set(name, file);
  return file;
}

/**
 * The uncompressed bytes of `input`. Failures (a corrupt stream, the program
 * dying) come out as an error of the returned stream; destroying the returned
 * stream stops the program and `input`.
 */
export function decompress(input: Readable, compression: Compression): Readable {
  if (compression === 'none') return input;
  if (compression === 'gzip') {
    const gunzip = zlib().createGunzip({ chunkSize: 1 << 20 });
    input.on('error', (e) => gunzip.destroy(e));
    gunzip.on('close', () => input.destroy());
    return input.pipe(gunzip);
  }
  return throughProgram(input, compression);
}

function throughProgram(input: Readable, program: 'bzip2' | 'xz'): Readable {
  const out = new PassThrough({ highWaterMark: 1 << 20 });
  // The program may fail (a corrupt archive) before its reader has attached (the content store
  // opens its file first): the error stays on the stream (readable.errored), where pipeline()
  // finds it, instead of being an uncaught 'error' that would end berthd.
  out.on('error', () => undefined);
  const child = spawnDetached(findProgram(program), ['-dc'], {
    cwd: '/',
    env: { PATH: SYSTEM_DIRS.join(':'), LC_ALL: 'C' },
    pipes: [
      { fd: 0, direction: 'to-child' },
      { fd: 1, direction: 'from-child' },
      { fd: 2, direction: 'from-child' },
    ],
  });
  const stdin = child.pipes.get(0)!;
  const stdout = child.pipes.get(1)!;
  const stderr = child.pipes.get(2)!;
  const said: Buffer[] = [];
  let saidBytes = 0;
  stderr.on('data', (c: Buffer) => {
    if (saidBytes < 4096) {
      said.push(c);
      saidBytes += c.length;
    }
  });
  let stopped = false;
  const stop = () => {
    if (stopped) return;
    stopped = true;
    if (child.exit === null) {
      try {
        process.kill(child.pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
    stdin.destroy();
    stdout.destroy();
    input.destroy();
  };
  // The program dying closes stdin: the EPIPE is not ours to report, its exit status is.
  input.on('error', (e) => {
    out.destroy(e);
    stop();
  });
  input.pipe(stdin);
  stdout.pipe(out, { end: false });
  const ended = new Promise<void>((resolve) => stdout.once('end', resolve));
  Promise.all([ended, child.exited]).then(([, exit]) => {
    if (out.destroyed) return;
    if (exit.code === 0) out.end();
    else {
      const why = Buffer.concat(said).toString('utf8').trim() || `exit status ${exit.code ?? `signal ${exit.signal}`}`;
      out.destroy(systemError(`${program}: ${why}`));
    }
  }, stop);
  out.on('close', stop);
  return out;
}
