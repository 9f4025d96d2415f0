// Receiving a build's context: the request body (a tar, plain or gzip, bzip2,
// xz) or an http(s) URL (`remote`: a tarball the same way, or a Dockerfile
// alone), read into an index of its entries (context-index.ts), then its
// Dockerfile and .dockerignore read, as dockerd's remotecontext.Detect does.
//
// The body is hostile input and may be larger than memory. No file of it is
// created: its bodies are held in memory up to a bound and in one spool file
// beyond it, and the index is the tree dockerd's untar chrooted into a
// directory would make: a name or hard link target that climbs out of it, or
// is absolute, is taken as if the context were `/` (so `../x` and `/x` are
// both its `x`); symlinks are kept as written (whatever they point at is only
// ever resolved inside the context, see sources.ts); device nodes and fifos
// are skipped.
import { mkdirSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import path from 'node:path';
import { Readable, Transform, type TransformCallback } from 'node:stream';
import {
  EngineError,
  forbidden,
  invalidParameter,
  isEngineError,
  messageOf,
  notFound,
  payloadTooLarge,
  systemError,
  unauthorized,
} from '../../errors.js';
import { ContextIndex, LookupError } from './context-index.js';
import { decompress, peekBytes, SNIFF_BYTES, sniffCompression } from '../layers/compression.js';
import { ignoreMatcher, readIgnoreFile } from './dockerignore.js';

export interface BuildContext {
  /** The context's entries. */
  index: ContextIndex;
  /** The Dockerfile's text. */
  dockerfile: string;
  /** The Dockerfile's path in the context, as given. */
  dockerfilePath: string;
  /** Whether .dockerignore leaves `rel` (a path in the context) out: COPY and ADD do not see it. */
  excluded(rel: string): boolean;
  /** Closes the index and removes the directory (its spool file). */
  dispose(): Promise<void>;
}

export interface ReceiveOptions {
  /** The request body (ignored when `remote` is given). */
  body: Readable;
  /** An empty directory of the build's own (the spool file goes there); removed again if receiving fails. */
  dir: string;
  /** The query's `dockerfile`: a path in the context, default "Dockerfile". */
  dockerfile?: string;
  /** The query's `remote`: an http(s) URL of a tarball or of a Dockerfile. */
  remote?: string;
  signal?: AbortSignal;
  /** Bytes of context (as received, before decompression) beyond which it is refused. */
  maxBytes?: number;
  /** Told the bytes of a `remote` downloaded so far, and its Content-Length when known (dockerd's progress bar). */
  progress?: Progress;
  /** The Dockerfile and the ignore patterns given apart from the context (BuildRequest.separateDockerfile). */
  separateDockerfile?: { name: string; text: string; ignore: string[] };
}

export const DEFAULT_DOCKERFILE = 'Dockerfile';
/** A Dockerfile is read whole into memory; larger ones are refused. */
const MAX_DOCKERFILE = 16 << 20;
/** Likewise a .dockerignore. */
const MAX_IGNORE_FILE = 4 << 20;
/** dockerd looks at this many bytes of a remote context to tell a Dockerfile from an archive. */
const PREAMBLE = 100;
/** dockerd's acceptable remote context types (remotecontext's acceptableRemoteMIME). */
const ACCEPTABLE_MIME = /application\/(?:(?:x-)?tar|octet-stream|((?:x-)?(?:gzip|bzip2?|xz)))|text\/plain/;

export async function receiveContext(o: ReceiveOptions): Promise<BuildContext> {
  const dockerfilePath = o.dockerfile || DEFAULT_DOCKERFILE;
  const index = new ContextIndex(path.join(o.dir, 'context.spool'));
  try {
    o.signal?.throwIfAborted();
    mkdirSync(o.dir, { recursive: true });
    if (o.remote !== undefined && o.remote !== '') {
      o.body.resume(); // dockerd reads no body with a remote context
      const remote = await openRemote(o.remote, o.signal, o.progress);
      if (remote.kind === 'dockerfile') {
        const text = await readWhole(remote.body, MAX_DOCKERFILE, 'Dockerfile');
        if (text.length === 0) throw invalidParameter(`the Dockerfile (${dockerfilePath}) cannot be empty`);
        return context(o.dir, index, text.toString('utf8'), dockerfilePath, () => false);
      }
      await ingestContext(index, remote.body, o);
    } else {
      await ingestContext(index, o.body, o);
    }
    o.signal?.throwIfAborted();
    if (o.separateDockerfile) {
      const { name, text, ignore } = o.separateDockerfile;
      if (text.length === 0) throw invalidParameter(`the Dockerfile (${name}) cannot be empty`);
      return context(o.dir, index, stripBom(text), name, matcherOf(ignore));
    }
    return await readContext(o.dir, index, dockerfilePath);
  } catch (e) {
    o.body.destroy();
    await index.close().catch(() => undefined);
    await rm(o.dir, { recursive: true, force: true }).catch(() => undefined);
    if (o.signal?.aborted) throw o.signal.reason ?? e;
    throw e;
  }
}

function context(
  dir: string,
  index: ContextIndex,
  dockerfile: string,
  dockerfilePath: string,
  excluded: (rel: string) => boolean,
): BuildContext {
  return {
    index,
    dockerfile,
    dockerfilePath,
    excluded,
    dispose: async () => {
      await index.close();
      await rm(dir, { recursive: true, force: true });
    },
  };
}

// ---- reading the tar ------------------------------------------------------------

async function ingestContext(index: ContextIndex, received: Readable, o: ReceiveOptions): Promise<void> {
  let body = received;
  const abort = () => body.destroy(o.signal?.reason instanceof Error ? o.signal.reason : new Error('aborted'));
  o.signal?.addEventListener('abort', abort, { once: true });
  try {
    const peeked = await peekBytes(body, SNIFF_BYTES);
    body = peeked.stream;
    const compression = sniffCompression(peeked.head);
    const counted = o.maxBytes !== undefined ? body.pipe(new Limit(o.maxBytes, body)) : body;
    await index.ingest(decompress(counted, compression));
  } finally {
    o.signal?.removeEventListener('abort', abort);
  }
}

/** Counts the bytes going by and fails the stream beyond `max`. */
class Limit extends Transform {
  private seen = 0;
  constructor(
    private readonly max: number,
    source: Readable,
  ) {
    super({ highWaterMark: 1 << 20 });
    source.on('error', (e) => this.destroy(e));
  }
  override _transform(chunk: Buffer, _enc: BufferEncoding, cb: TransformCallback): void {
    this.seen += chunk.length;
    if (this.seen > this.max) cb(payloadTooLarge(`build context is larger than the limit of ${this.max} bytes`));
    else cb(null, chunk);
  }
}

// ---- the Dockerfile and .dockerignore ------------------------------------------

async function readContext(dir: string, index: ContextIndex, dockerfilePath: string): Promise<BuildContext> {
  const excluded = matcherOf(
    readIgnoreFile(
      (await readInContext(index, '.dockerignore', MAX_IGNORE_FILE, '.dockerignore'))?.toString('utf8') ?? '',
    ),
  );
  let name = dockerfilePath;
  let text = await readInContext(index, name, MAX_DOCKERFILE, 'Dockerfile');
  // dockerd's fallback: the default name also finds a lower-case "dockerfile".
  if (text === null && name === DEFAULT_DOCKERFILE) {
    name = name.toLowerCase();
    text = await readInContext(index, name, MAX_DOCKERFILE, 'Dockerfile');
  }
  // dockerd answers this one with a 500 (a plain error), and clients print its text either way.
  if (text === null) throw systemError(`Cannot locate specified Dockerfile: ${dockerfilePath}`);
  if (text.length === 0) throw invalidParameter(`the Dockerfile (${name}) cannot be empty`);
  return context(dir, index, stripBom(text.toString('utf8')), name, excluded);
}

function matcherOf(patterns: string[]): (rel: string) => boolean {
  try {
    return ignoreMatcher(patterns);
  } catch (e) {
    throw invalidParameter(`error checking context: '${messageOf(e)}'.`, e);
  }
}

const stripBom = (s: string) => (s.startsWith('\uFEFF') ? s.slice(1) : s);

/**
 * A file of the context, resolved inside it (a symlink that points out is
 * followed as if the context were `/`); null when it is not there.
 */
async function readInContext(index: ContextIndex, rel: string, max: number, what: string): Promise<Buffer | null> {
  let node: ContextIndex['root'];
  try {
    node = index.resolve(rel).node;
  } catch (e) {
    if (e instanceof LookupError) return null;
    throw e;
  }
  if (node.kind === 'dir') throw systemError(`unexpected error reading ${what}: read ${rel}: is a directory`);
  if (node.kind !== 'file') return null;
  if (node.size > max) throw invalidParameter(`${rel} is larger than ${max} bytes`);
  return index.readAll(node);
}

// ---- remote contexts -------------------------------------------------------------

type Remote = { kind: 'archive'; body: Readable } | { kind: 'dockerfile'; body: Readable };

/** pkg/urlutil's IsGitURL. */
export function isGitUrl(s: string): boolean {
  if (/^https?:\/\//.test(s) && /\.git(?:#.+)?$/.test(s)) return true;
  return s.startsWith('git://') || s.startsWith('github.com/') || s.startsWith('git@');
}

async function openRemote(url: string, signal?: AbortSignal, progress?: Progress): Promise<Remote> {
  if (isGitUrl(url))
    throw invalidParameter(
      `git build contexts are not supported by berth (remote ${url}): send the context as a tar, or an http(s) URL of a tarball`,
    );
  if (!/^https?:\/\//.test(url)) throw invalidParameter(`remoteURL (${url}) could not be recognized as URL`);
  let res: Response;
  try {
    res = await getWithStatusError(url, signal);
  } catch (e) {
    throw wrapped(e, `error downloading remote context ${url}`);
  }
  const fetched = responseBody(res, progress);
  const ct = res.headers.get('content-type') ?? '';
  const { head: preamble, stream: body } = await peekBytes(fetched, PREAMBLE);
  if (preamble.length === 0) {
    body.destroy();
    throw systemError(`error detecting content type for remote ${url}: empty response`);
  }
  let contentType = ct;
  // Servers often call a file with no extension (a Dockerfile) application/octet-stream.
  if (ct === '' || ct === 'application/octet-stream')
    contentType = looksBinary(preamble) ? 'application/octet-stream' : 'text/plain';
  const acceptable = ACCEPTABLE_MIME.exec(contentType)?.[0];
  if (!acceptable) {
    body.destroy();
    throw systemError(`error detecting content type for remote ${url}: unsupported Content-Type ${JSON.stringify(ct)}`);
  }
  return { kind: acceptable === 'text/plain' ? 'dockerfile' : 'archive', body };
}

export type Progress = (current: number, total: number | null) => void;

/** A response's body as a stream, telling `progress` of the bytes as they come. */
export function responseBody(res: Response, progress?: Progress): Readable {
  const body = Readable.fromWeb(res.body as import('node:stream/web').ReadableStream<Uint8Array>);
  if (!progress) return body;
  const length = Number(res.headers.get('content-length') ?? Number.NaN);
  const total = Number.isSafeInteger(length) && length >= 0 ? length : null;
  let current = 0;
  const counted = new Transform({
    transform(chunk: Buffer, _enc, cb) {
      current += chunk.length;
      progress(current, total);
      cb(null, chunk);
    },
  });
  body.on('error', (e) => counted.destroy(e));
  counted.on('close', () => body.destroy());
  return body.pipe(counted);
}

/** Go's http.DetectContentType's test for text: no byte that only binary data has. */
function looksBinary(b: Buffer): boolean {
  for (const c of b) if (c <= 0x08 || c === 0x0b || (c >= 0x0e && c <= 0x1a) || (c >= 0x1c && c <= 0x1f)) return true;
  return false;
}

/** An http(s) GET that fails on a 4xx or 5xx status, as dockerd's GetWithStatusError, with its kinds of error. */
export async function getWithStatusError(url: string, signal?: AbortSignal): Promise<Response> {
  let res: Response;
  try {
    res = await fetch(url, { redirect: 'follow', ...(signal ? { signal } : {}) });
  } catch (e) {
    if (signal?.aborted) throw e;
    const cause = (e as { cause?: { code?: string; message?: string } }).cause;
    const why = `Get ${JSON.stringify(url)}: ${cause?.message ?? messageOf(e)}`;
    if (cause?.code === 'ENOTFOUND') throw notFound(why);
    throw systemError(why, e);
  }
  if (res.status < 400) {
    if (!res.body) throw systemError(`Get ${JSON.stringify(url)}: no body`);
    return res;
  }
  const text = await res.text().catch(() => null);
  let msg = `failed to GET ${url} with status ${res.status} ${res.statusText}`.trimEnd();
  if (text === null) throw systemError(`${msg}: error reading body`);
  msg += `: ${text.trim()}`;
  if (res.status === 404) throw notFound(msg);
  if (res.status === 400) throw invalidParameter(msg);
  if (res.status === 401) throw unauthorized(msg);
  if (res.status === 403) throw forbidden(msg);
  throw systemError(msg);
}

function wrapped(e: unknown, prefix: string): unknown {
  if (!isEngineError(e)) return e;
  return new EngineError(e.kind, `${prefix}: ${e.message}`, { cause: e });
}

async function readWhole(body: Readable, max: number, what: string): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let n = 0;
  for await (const c of body) {
    n += (c as Buffer).length;
    if (n > max) {
      body.destroy();
      throw invalidParameter(`${what} is larger than ${max} bytes`);
    }
    chunks.push(c as Buffer);
  }
  return Buffer.concat(chunks, n);
}
