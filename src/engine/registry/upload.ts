// The write half of the distribution protocol, for a push: does the
// repository have a blob (HEAD), mount one from another repository of the same
// registry, upload one (one PUT when small, PATCH chunks when large), put a
// manifest. The requests go through the client's RepositoryWriter, which
// carries the auth (a token scoped push,pull; Basic) and TLS rules of pulls.
import type { Readable } from 'node:stream';
import { type EngineError, forbidden, notFound, unauthorized, unavailable } from '../../errors.js';
import type { Reference } from '../reference.js';
import type { RepositoryWriter } from './client.js';
import { RegistryError, registryErrorFrom } from './errors.js';
import { discard, goOp, TransportError, type HttpResponse, type Method } from './transport.js';

/** Blobs up to this size go in one PUT; larger ones in PATCH chunks of CHUNK_SIZE. */
export const MONOLITHIC_MAX = 32 << 20;
export const CHUNK_SIZE = 32 << 20;

/** Opens bytes [start, end) of the blob being uploaded. */
export type OpenRange = (start: number, end: number) => Readable;

const uploadsPath = (ref: Reference) => `/v2/${ref.path}/blobs/uploads/`;

/**
 * A refusal during a push, in the registry's own words as dockerd shows them
 * (`denied: requested access to the resource is denied`), kept with its cause so
 * that a retry can tell a 5xx from a refusal.
 */
function refusal(err: RegistryError, method: Method, url: string): EngineError {
  const text = err.errors.length ? err.message : `${goOp(method)} "${url}": ${err.message}`;
  if (err.code === 'UNAUTHORIZED' || err.status === 401) return unauthorized(text);
  if (err.code === 'DENIED' || err.status === 403) return forbidden(text);
  if (err.status === 404) return notFound(text);
  return unavailable(text, err);
}

async function fail(res: HttpResponse, method: Method, url: string): Promise<never> {
  throw refusal(await registryErrorFrom(res), method, url);
}

/** Worth trying again: the registry failed (5xx, 429) or the connection did. */
export function retryable(e: unknown): boolean {
  const cause = (e as { cause?: unknown } | null)?.cause;
  if (cause instanceof TransportError) return !cause.certificate;
  if (cause instanceof RegistryError) return cause.status >= 500 || cause.status === 429;
  return false;
}

/** HEAD the blob in the repository: true when the registry has it. */
export async function blobExists(w: RepositoryWriter, ref: Reference, digest: string): Promise<boolean> {
  const path = `/v2/${ref.path}/blobs/${digest}`;
  const res = await w.send('HEAD', path);
  if (res.status === 200 || res.status === 404) {
    discard(res);
    return res.status === 200;
  }
  return fail(res, 'HEAD', new URL(path, w.base).href);
}

/**
 * Asks the registry to mount the blob from repository `from` (a path on the
 * same registry). 'mounted', or the upload session it opened instead (202:
 * it could not mount, the upload goes there), or undefined when it refused.
 */
export async function mountBlob(
  w: RepositoryWriter,
  ref: Reference,
  digest: string,
  from: string,
): Promise<'mounted' | { location: string } | undefined> {
  const query = new URLSearchParams({ mount: digest, from });
  const res = await w.send('POST', `${uploadsPath(ref)}?${query}`, { body: '' });
  discard(res);
  if (res.status === 201) return 'mounted';
  const location = res.headers.location;
  if (res.status === 202 && location) return { location };
  return undefined;
}

async function startUpload(w: RepositoryWriter, ref: Reference): Promise<string> {
  const res = await w.send('POST', uploadsPath(ref), { body: '' });
  const location = res.headers.location;
  if (res.status === 202 && location) {
    discard(res);
    return location;
  }
  return fail(res, 'POST', new URL(uploadsPath(ref), w.base).href);
}

const withDigest = (location: string, base: string, digest: string) => {
  const url = new URL(location, `${base}/`);
  url.searchParams.set('digest', digest);
  return url.href;
};

/**
 * Uploads a blob into a session (`location`, else a new one): one PUT with the
 * whole blob when it is small, otherwise PATCH chunks then a PUT that closes
 * the upload with its digest.
 */
export async function uploadBlob(
  w: RepositoryWriter,
  ref: Reference,
  blob: { digest: string; size: number },
  open: OpenRange,
  location?: string,
): Promise<void> {
  let at = location ?? (await startUpload(w, ref));
  const octets = { 'Content-Type': 'application/octet-stream' };
  if (blob.size <= MONOLITHIC_MAX) {
    const url = withDigest(at, w.base, blob.digest);
    const body = { length: blob.size, open: () => open(0, blob.size) };
    const res = await w.send('PUT', url, { headers: octets, body });
    if (res.status !== 201) return fail(res, 'PUT', url);
    discard(res);
    return;
  }
  for (let start = 0; start < blob.size; start += CHUNK_SIZE) {
    const end = Math.min(blob.size, start + CHUNK_SIZE);
    const url = new URL(at, `${w.base}/`).href;
    const headers = { ...octets, 'Content-Range': `${start}-${end - 1}` };
    const res = await w.send('PATCH', url, { headers, body: { length: end - start, open: () => open(start, end) } });
    const next = res.headers.location;
    if (res.status !== 202 || !next) return fail(res, 'PATCH', url);
    discard(res);
    at = next;
  }
  const url = withDigest(at, w.base, blob.digest);
  const res = await w.send('PUT', url, { body: '' });
  if (res.status !== 201) return fail(res, 'PUT', url);
  discard(res);
}

/** PUTs a manifest under a tag; resolves with the digest the registry gives it (or ours when it sends none). */
export async function putManifest(
  w: RepositoryWriter,
  ref: Reference,
  tag: string,
  manifest: { mediaType: string; bytes: Buffer; digest: string },
): Promise<string> {
  const path = `/v2/${ref.path}/manifests/${tag}`;
  const res = await w.send('PUT', path, { headers: { 'Content-Type': manifest.mediaType }, body: manifest.bytes });
  if (res.status !== 201) return fail(res, 'PUT', new URL(path, w.base).href);
  discard(res);
  const header = res.headers['docker-content-digest'];
  return typeof header === 'string' && header ? header : manifest.digest;
}
