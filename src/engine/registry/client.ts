// A distribution-spec (OCI / Docker Registry HTTP API v2) pull client.
//
// resolveManifest(): ping /v2/ (HTTPS first; plain HTTP also for loopback and
// insecure-registries, as dockerd), answer the auth challenge, GET the
// manifest, pick the host platform from a list/index. fetchConfig(): GET and
// verify the image config (resolve() does both). fetchBlob(): stream one
// blob; the caller verifies it (see content/store.ts verifyingStream).
//
// Every request takes the caller's AbortSignal. Where a request goes and with
// which credentials is session.ts's: the ping and token fetches are shared by
// concurrent pulls (engine/shared.ts), one caller hanging up does not fail the
// others, and the request stops once nobody waits for it.
//
// Trust rules:
//   * every manifest's digest is checked (against the reference or the index
//     entry that named it, else against Docker-Content-Digest when sent), and
//     reads of manifests and configs are capped before JSON.parse;
//   * credentials go only to the registry that challenged for them (Basic) or
//     to the token realm it named (Bearer); redirects to another origin lose
//     Authorization (transport.ts); mirrors are always asked anonymously, so
//     Docker Hub credentials never reach a mirror's operator.
import type { Readable } from 'node:stream';
import { EngineError, invalidParameter, messageOf, notFound, unauthorized, unavailable } from '../../errors.js';
import { ContentVerificationError, computeDigest } from '../content/store.js';
import { DEFAULT_DOMAIN, manifestReference, parseReference, type Reference } from '../reference.js';
import { isDigest, parseDigest } from '../digest.js';
import type { AuthConfig } from './auth.js';
import { searchIndex, type IndexQuery, type SearchResult } from './search.js';
import { pullError, type RegistryError, registryErrorFrom, statusError, type RequestContext } from './errors.js';
import {
  MANIFEST_ACCEPT,
  MediaTypes,
  hostPlatform,
  parseManifest,
  selectManifest,
  type Descriptor,
  type ImageManifest,
  type ManifestDocument,
  type Platform,
} from './manifest.js';
import { type Endpoint, type RegistryClientOptions, type Session, Sessions } from './session.js';
import {
  BodyTooLargeError,
  discard,
  goOp,
  readBody,
  type HttpRequest,
  type HttpResponse,
  type Method,
} from './transport.js';

export type { Descriptor, ImageManifest, ManifestDocument, Platform } from './manifest.js';
export type { RegistryClientOptions } from './session.js';

/** Caps on documents read whole before JSON.parse (OCI asks registries for ≥4 MiB manifests). */
const MANIFEST_LIMIT = 8 * 1024 * 1024;
const CONFIG_LIMIT = 8 * 1024 * 1024;
const MAX_INDEX_DEPTH = 2;
const MAX_REMEMBERED_SOURCES = 1024;

export interface ResolveOptions {
  /** Platform to pick from a list/index (default: the host's). */
  platform?: Platform;
  signal?: AbortSignal;
}

export interface ResolvedManifest {
  /** The reference that was resolved, normalised. */
  ref: Reference;
  /** Bytes of the document the reference names: a manifest list/index or an image manifest. */
  manifest: Buffer;
  /** Its digest: what dockerd prints as `Digest:` and records in RepoDigests. */
  manifestDigest: string;
  /** Its media type. */
  mediaType: string;
  /** The image manifest for the chosen platform (the same document when the reference names one). */
  image: { digest: string; mediaType: string; bytes: Buffer; manifest: ImageManifest; platform?: Platform };
  /** The image config's descriptor. */
  configDescriptor: Descriptor;
  configDigest: string;
  configMediaType: string;
  layers: Descriptor[];
  /** The base URL that served it: a mirror or the registry. */
  source: string;
}

export interface ResolvedImage extends ResolvedManifest {
  /** The image config, verified against configDigest. */
  config: Buffer;
}

export interface FetchOptions {
  signal?: AbortSignal | undefined;
}

/** Authorised requests to one repository's registry, for the push protocol (push.ts in images/ drives it). */
export interface RepositoryWriter {
  /** The base URL that answered the ping (its scheme is the one to use). */
  base: string;
  /** One request; `target` is a path or an upload's Location (resolved against `base`). */
  send(
    method: Method,
    target: string,
    opts?: Pick<HttpRequest, 'headers' | 'body'> & { accept?: string },
  ): Promise<HttpResponse>;
}

interface FetchedManifest {
  bytes: Buffer;
  digest: string;
  doc: ManifestDocument;
}

const CONFIG_TYPES = new Set<string>([MediaTypes.dockerConfig, MediaTypes.ociConfig]);

/** docker login's server address (`https://index.docker.io/v1/`, `host:port`, a URL) → a registry host. */
function loginHost(address: string): string {
  const raw = address.trim() || DEFAULT_DOMAIN;
  const host = raw.includes('://') ? new URL(raw).host : raw.replace(/\/.*$/, '');
  return host === 'index.docker.io' || host === 'registry-1.docker.io' ? DEFAULT_DOMAIN : host;
}

const blobPath = (ref: Reference, digest: string) => `/v2/${ref.path}/blobs/${digest}`;
const manifestPath = (ref: Reference, reference: string) => `/v2/${ref.path}/manifests/${reference}`;
export class RegistryClient {
  private readonly sessions: Sessions;
  /** Which endpoint served each repository's manifest, so its blobs are asked there first. */
  private readonly servedBy = new Map<string, string>();

  constructor(opts: RegistryClientOptions = {}) {
    this.sessions = new Sessions(opts);
  }

  /** Ends idle keep-alive connections. */
  close(): void {
    this.sessions.http.close();
  }

  /** Resolves a reference to its manifest, platform image manifest and verified config. */
  async resolve(reference: Reference | string, auth?: AuthConfig, opts: ResolveOptions = {}): Promise<ResolvedImage> {
    const resolved = await this.resolveManifest(reference, auth, opts);
    return { ...resolved, config: await this.fetchConfig(resolved.ref, resolved.configDescriptor, auth, opts) };
  }

  /** Resolves a reference to its manifest and the image manifest for the platform. */
  async resolveManifest(
    reference: Reference | string,
    auth?: AuthConfig,
    opts: ResolveOptions = {},
  ): Promise<ResolvedManifest> {
    const ref = typeof reference === 'string' ? parseReference(reference) : reference;
    return this.sessions.acrossEndpoints(ref, this.sessions.endpoints(ref), async (endpoint) => {
      const resolved = await this.resolveAt(endpoint, ref, auth, opts);
      if (this.servedBy.size >= MAX_REMEMBERED_SOURCES) this.servedBy.clear();
      this.servedBy.set(ref.name, resolved.source);
      return resolved;
    });
  }

  /**
   * `POST /auth` (docker login): checks credentials against the registry's
   * `/v2/` with the auth it asks for (Basic, or a token with no scope), never
   * a mirror. Resolves when the registry accepts them.
   */
  async login(serverAddress: string, auth: AuthConfig): Promise<void> {
    const host = loginHost(serverAddress);
    const ref = parseReference(`${host}/login`);
    const endpoint = this.sessions.endpoints(ref).at(-1)!;
    const s = { ...(await this.sessions.open(endpoint, ref, auth, undefined)), scope: '' };
    const ctx = this.sessions.context(s, 'GET', '/v2/');
    const res = await this.sessions.request(s, ctx);
    await discard(res);
    if (res.status !== 200) throw unauthorized(`login attempt to ${ctx.url.href} failed with status: ${res.status}`);
  }

  /**
   * A session for writing to one repository (a push): the registry itself,
   * never a mirror, with a token scoped `push,pull` on it and `pull` on each
   * repository of `mountFrom` (the sources of cross-repository mounts).
   */
  async writer(
    reference: Reference,
    auth: AuthConfig | undefined,
    opts: FetchOptions & { mountFrom?: readonly string[] } = {},
  ): Promise<RepositoryWriter> {
    const endpoint = this.sessions.endpoints(reference).at(-1)!;
    const scopes = [
      `repository:${reference.path}:push,pull`,
      ...(opts.mountFrom ?? []).map((p) => `repository:${p}:pull`),
    ];
    const s = await this.sessions.open(endpoint, reference, auth, opts.signal, scopes.join(' '));
    return {
      base: s.probe.base,
      send: async (method, target, send = {}) => {
        const url = new URL(target, `${s.probe.base}/`);
        return this.sessions.request(s, { method, url }, send.accept, send);
      },
    };
  }

  /** `GET /v1/search` on a registry's index (docker.io: Docker Hub's); never a mirror, as dockerd. */
  search(query: IndexQuery): Promise<SearchResult[]> {
    const access = {
      http: this.sessions.http,
      isInsecure: (h: string) => this.sessions.insecure.isInsecure(h),
      certsDir: this.sessions.certsDirs[0] ?? '/etc/docker/certs.d',
    };
    return searchIndex(access, query);
  }

  /**
   * The document a reference names, verified, as `GET /distribution/{name}/json`
   * describes it: the registry itself (mirrors first for docker.io, as for a pull).
   */
  async fetchDocument(
    reference: Reference,
    auth: AuthConfig | undefined,
    opts: FetchOptions = {},
  ): Promise<{ bytes: Buffer; digest: string; doc: ManifestDocument }> {
    return this.sessions.acrossEndpoints(reference, this.sessions.endpoints(reference), async (endpoint) => {
      const s = await this.sessions.open(endpoint, reference, auth, opts.signal);
      return this.fetchManifest(s, manifestReference(reference), reference.digest, undefined, inspectError);
    });
  }

  /**
   * Streams a blob (following redirects; Authorization never leaves the
   * registry's origin). The caller verifies digest and size while reading;
   * a response that declares another length than `desc.size` is refused
   * before its body is read.
   */
  async fetchBlob(
    reference: Reference | string,
    desc: Pick<Descriptor, 'digest'> & { size?: number },
    auth?: AuthConfig,
    opts: FetchOptions = {},
  ): Promise<Readable> {
    return this.blob(reference, desc.digest, auth, opts, async (res, ctx) => {
      const declared = Number(res.headers['content-length']);
      if (desc.size !== undefined && res.headers['content-length'] !== undefined && declared !== desc.size) {
        res.body.destroy();
        throw new ContentVerificationError(
          `filesystem layer verification failed for digest ${desc.digest}: size mismatch: ${goOp(ctx.method)} "${ctx.url.href}" declared ${declared} bytes, expected ${desc.size}`,
          desc.digest,
        );
      }
      return res.body;
    });
  }

  /** GETs the image config blob and verifies it; dockerd's wording when it fails. */
  async fetchConfig(
    reference: Reference | string,
    desc: Descriptor,
    auth?: AuthConfig,
    opts: FetchOptions = {},
  ): Promise<Buffer> {
    const prefix = 'error pulling image configuration: ';
    if (!CONFIG_TYPES.has(desc.mediaType)) {
      throw invalidParameter(
        `${prefix}unsupported media type ${desc.mediaType} for an image config (not a container image?)`,
      );
    }
    if (desc.size > CONFIG_LIMIT)
      throw invalidParameter(`${prefix}image config is ${desc.size} bytes, over the ${CONFIG_LIMIT}-byte limit`);
    const fail = (why?: string) =>
      new ContentVerificationError(
        `${prefix}image config verification failed for digest ${desc.digest}${why ? `: ${why}` : ''}`,
        desc.digest,
      );
    try {
      return await this.blob(reference, desc.digest, auth, opts, async (res, ctx) => {
        // Never more than the descriptor says: a longer body is refused as soon as it is.
        let bytes: Buffer;
        try {
          bytes = await readBody(res, desc.size, 'image config');
        } catch (e) {
          if (e instanceof BodyTooLargeError) throw fail(`size mismatch: expected ${desc.size} bytes, got more`);
          throw unavailable(`${goOp(ctx.method)} "${ctx.url.href}": reading image config: ${messageOf(e)}`, e);
        }
        if (bytes.length !== desc.size) throw fail(`size mismatch: expected ${desc.size} bytes, got ${bytes.length}`);
        if (computeDigest(bytes, parseDigest(desc.digest).algorithm) !== desc.digest) throw fail();
        return bytes;
      });
    } catch (e) {
      if (e instanceof EngineError && !e.message.startsWith(prefix))
        throw new EngineError(e.kind, prefix + e.message, { cause: e });
      throw e;
    }
  }

  /** GETs a blob across the endpoints (the one that served the manifest first) and hands a 200 to `use`. */
  private blob<T>(
    reference: Reference | string,
    digest: string,
    auth: AuthConfig | undefined,
    opts: FetchOptions,
    use: (res: HttpResponse, ctx: RequestContext) => Promise<T>,
  ): Promise<T> {
    const ref = typeof reference === 'string' ? parseReference(reference) : reference;
    parseDigest(digest);
    const preferred = this.servedBy.get(ref.name);
    const rank = (e: Endpoint) => (preferred !== undefined && e.candidates.includes(preferred) ? 0 : 1);
    const ordered = this.sessions.endpoints(ref).sort((a, b) => rank(a) - rank(b)); // stable: otherwise the usual order
    return this.sessions.acrossEndpoints(ref, ordered, async (endpoint) => {
      const s = await this.sessions.open(endpoint, ref, auth, opts.signal);
      const ctx = this.sessions.context(s, 'GET', blobPath(ref, digest));
      const res = await this.sessions.request(s, ctx);
      if (res.status === 200) return use(res, ctx);
      throw blobError(await registryErrorFrom(res), ctx);
    });
  }

  // ---- manifests and config -------------------------------------------------------------

  private async resolveAt(
    endpoint: Endpoint,
    ref: Reference,
    auth: AuthConfig | undefined,
    opts: ResolveOptions,
  ): Promise<ResolvedManifest> {
    const s = await this.sessions.open(endpoint, ref, auth, opts.signal);
    const want = opts.platform ?? hostPlatform();
    const top = await this.fetchManifest(s, manifestReference(ref), ref.digest);
    let current = top;
    let platform: Platform | undefined;
    for (let depth = 0; current.doc.kind === 'index'; depth++) {
      if (depth >= MAX_INDEX_DEPTH) throw invalidParameter('invalid manifest: image indexes nested too deeply');
      const entry = selectManifest(current.doc.index, want);
      platform = entry.platform;
      current = await this.fetchManifest(s, entry.digest, entry.digest, entry.size);
    }
    const doc = current.doc;
    if (doc.kind !== 'manifest') throw invalidParameter('invalid manifest: no image manifest found'); // narrows the type
    return {
      ref,
      manifest: top.bytes,
      manifestDigest: top.digest,
      mediaType: top.doc.mediaType,
      image: {
        digest: current.digest,
        mediaType: doc.mediaType,
        bytes: current.bytes,
        manifest: doc.manifest,
        ...(platform ? { platform } : {}),
      },
      configDescriptor: doc.manifest.config,
      configDigest: doc.manifest.config.digest,
      configMediaType: doc.manifest.config.mediaType,
      layers: doc.manifest.layers,
      source: s.probe.base,
    };
  }

  /**
   * GETs a manifest by tag or digest and checks its bytes: against `expected`
   * (the digest in the reference or the index entry), else against the
   * registry's Docker-Content-Digest when it sends one.
   */
  private async fetchManifest(
    s: Session,
    reference: string,
    expected?: string,
    expectedSize?: number,
    refused: (err: RegistryError, ref: Reference, ctx: RequestContext) => EngineError = pullError,
  ): Promise<FetchedManifest> {
    const ctx = this.sessions.context(s, 'GET', manifestPath(s.ref, reference));
    const res = await this.sessions.request(s, ctx, MANIFEST_ACCEPT);
    if (res.status !== 200) throw refused(await registryErrorFrom(res), s.ref, ctx);
    const header = res.headers['docker-content-digest'];
    const claimed = expected ?? (typeof header === 'string' && isDigest(header) ? header : undefined);
    const failFor = (digest: string) => (why?: string) =>
      new ContentVerificationError(`manifest verification failed for digest ${digest}${why ? `: ${why}` : ''}`, digest);
    // A manifest an index names is read no further than its descriptor's size.
    const sized = expectedSize !== undefined && expectedSize < MANIFEST_LIMIT;
    let bytes: Buffer;
    try {
      bytes = await readCapped(res, sized ? expectedSize : MANIFEST_LIMIT, 'manifest', ctx);
    } catch (e) {
      if (sized && claimed && e instanceof EngineError && e.cause instanceof BodyTooLargeError) {
        throw failFor(claimed)(`size mismatch: expected ${expectedSize} bytes, got more`);
      }
      throw e;
    }
    const digest = claimed ?? computeDigest(bytes);
    const fail = failFor(digest);
    if (claimed && computeDigest(bytes, parseDigest(claimed).algorithm) !== claimed) throw fail();
    if (expectedSize !== undefined && bytes.length !== expectedSize) {
      throw fail(`size mismatch: expected ${expectedSize} bytes, got ${bytes.length}`);
    }
    return { bytes, digest, doc: parseManifest(bytes, headerString(res.headers['content-type'])) };
  }
}

const headerString = (v: string | string[] | undefined) => (Array.isArray(v) ? v[0] : v);

/** readBody with its failures worded for the API. */
async function readCapped(res: HttpResponse, limit: number, what: string, ctx: RequestContext): Promise<Buffer> {
  try {
    return await readBody(res, limit, what);
  } catch (e) {
    if (e instanceof BodyTooLargeError)
      throw invalidParameter(`${goOp(ctx.method)} "${ctx.url.href}": ${e.message}`, e);
    throw unavailable(`${goOp(ctx.method)} "${ctx.url.href}": reading ${what}: ${(e as Error).message}`, e);
  }
}

/**
 * A manifest GET refused, for `GET /distribution/{name}/json`: the registry's
 * words with the status they mean (distribution's errcode statuses: a 401,
 * even one saying `denied`, asks for credentials).
 */
function inspectError(err: RegistryError, _ref: Reference, ctx: RequestContext): EngineError {
  if (err.status === 401) return unauthorized(err.message);
  if (err.status === 404 || err.code === 'MANIFEST_UNKNOWN' || err.code === 'NAME_UNKNOWN')
    return notFound(err.message);
  return statusError(err, ctx);
}

/** A blob GET refused: a missing blob is dockerd's "unknown blob". */
function blobError(err: RegistryError, ctx: RequestContext): EngineError {
  if (err.code === 'BLOB_UNKNOWN' || (err.status === 404 && !err.code)) return notFound('unknown blob');
  if (err.status === 404 && (err.code === 'NAME_UNKNOWN' || err.code === 'MANIFEST_UNKNOWN'))
    return notFound(`unknown blob (${err.message})`);
  return statusError(err, ctx);
}
