// A distribution-spec (OCI / Docker Registry HTTP API v2) pull client.
//
// resolveManifest(): ping /v2/ (HTTPS first; plain HTTP also for loopback and
// insecure-registries, as dockerd), answer the auth challenge, GET the
// manifest, pick the host platform from a list/index. fetchConfig(): GET and
// verify the image config (resolve() does both). fetchBlob(): stream one
// blob; the caller verifies it (see content/store.ts verifyingStream).
//
// Every request takes the caller's AbortSignal. The ping and token fetches
// are shared by concurrent pulls (engine/shared.ts): one caller hanging up
// does not fail the others, and the request stops once nobody waits for it.
//
// Trust rules:
//   * every manifest's digest is checked (against the reference or the index
//     entry that named it, else against Docker-Content-Digest when sent), and
//     reads of manifests and configs are capped before JSON.parse;
//   * credentials go only to the registry that challenged for them (Basic) or
//     to the token realm it named (Bearer); redirects to another origin lose
//     Authorization (transport.ts); mirrors are always asked anonymously, so
//     Docker Hub credentials never reach a mirror's operator.
import { lookup } from 'node:dns/promises';
import { BlockList, isIP } from 'node:net';
import type { Readable } from 'node:stream';
import {
  EngineError,
  invalidParameter,
  messageOf,
  notFound,
  systemError,
  unauthorized,
  unavailable,
} from '../../errors.js';
import type { Logger } from '../../log.js';
import { ContentVerificationError, computeDigest } from '../content/store.js';
import { DEFAULT_DOMAIN, manifestReference, parseReference, type Reference } from '../reference.js';
import { isDigest, parseDigest } from '../digest.js';
import { SharedWork } from '../shared.js';
import { basicCredentials, basicHeader, parseChallenges, TokenCache, type AuthConfig, type Challenge } from './auth.js';
import { readHostCerts } from './certs.js';
import { searchIndex, type IndexQuery, type SearchResult } from './search.js';
import { pullError, RegistryError, registryErrorFrom, statusError, type RequestContext } from './errors.js';
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
import {
  BodyTooLargeError,
  discard,
  goOp,
  HttpTransport,
  readBody,
  TransportError,
  type HttpRequest,
  type HttpResponse,
  type Method,
  type TlsSettings,
} from './transport.js';

export type { Descriptor, ImageManifest, ManifestDocument, Platform } from './manifest.js';

/** Caps on documents read whole before JSON.parse (OCI asks registries for ≥4 MiB manifests). */
const MANIFEST_LIMIT = 8 * 1024 * 1024;
const CONFIG_LIMIT = 8 * 1024 * 1024;
/** Docker Hub's API host, for references on docker.io. */
const HUB_REGISTRY = 'https://registry-1.docker.io';
const PROBE_TTL_MS = 60_000;
const INSECURE_TTL_MS = 60_000;
const MAX_INDEX_DEPTH = 2;
const MAX_REMEMBERED_SOURCES = 1024;

export interface RegistryClientOptions {
  /** dockerd's insecure-registries: `host[:port]` entries or CIDRs. Loopback is always insecure. */
  insecureRegistries?: string[];
  /** registry-mirrors for docker.io, tried in order before Docker Hub. */
  mirrors?: string[];
  /** Roots of `<host:port>/{ca.crt,client.cert,client.key}` (default /etc/docker/certs.d, /etc/berth/certs.d). */
  certsDirs?: string[];
  logger?: Logger;
  userAgent?: string;
  headerTimeoutMs?: number;
  idleTimeoutMs?: number;
}

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

interface Endpoint {
  /** Base URLs to try in order, without trailing slash (https before http for insecure registries). */
  candidates: string[];
  mirror: boolean;
}

interface Probe {
  /** The base URL that answered (its scheme is the one to use). */
  base: string;
  /** What /v2/ asked for; empty when it answered without a 401. */
  challenges: Challenge[];
}

interface Session {
  endpoint: Endpoint;
  probe: Probe;
  ref: Reference;
  scope: string;
  /** undefined on mirrors: they are always asked anonymously. */
  auth: AuthConfig | undefined;
  signal: AbortSignal | undefined;
}

interface FetchedManifest {
  bytes: Buffer;
  digest: string;
  doc: ManifestDocument;
}

const CONFIG_TYPES = new Set<string>([MediaTypes.dockerConfig, MediaTypes.ociConfig]);

/** dockerd's "insecure" rule: listed names, listed CIDRs, and loopback (127.0.0.0/8, ::1, localhost). */
class InsecurePolicy {
  private readonly names = new Set<string>();
  private readonly nets = new BlockList();
  private readonly cache = new Map<string, { value: boolean; expiresAt: number }>();

  constructor(entries: readonly string[]) {
    this.nets.addSubnet('127.0.0.0', 8, 'ipv4');
    this.nets.addAddress('::1', 'ipv6');
    for (const raw of entries) {
      const entry = raw
        .trim()
        .replace(/^[a-z]+:\/\//i, '')
        .replace(/\/+$/, '')
        .toLowerCase();
      const cidr = /^(.+)\/(\d{1,3})$/.exec(entry);
      const family = cidr ? isIP(cidr[1]!) : 0;
      if (cidr && family) this.nets.addSubnet(cidr[1]!, Number(cidr[2]), family === 6 ? 'ipv6' : 'ipv4');
      else if (entry) this.names.add(entry);
    }
  }

  async isInsecure(host: string): Promise<boolean> {
    const key = host.toLowerCase();
    const hit = this.cache.get(key);
    if (hit && hit.expiresAt > Date.now()) return hit.value;
    const value = await this.decide(key);
    this.cache.set(key, { value, expiresAt: Date.now() + INSECURE_TTL_MS });
    return value;
  }

  private async decide(host: string): Promise<boolean> {
    if (this.names.has(host)) return true;
    let hostname: string;
    try {
      hostname = new URL(`http://${host}`).hostname.replace(/^\[|\]$/g, '');
    } catch {
      return false;
    }
    if (hostname === 'localhost') return true;
    // As dockerd: the host's addresses decide; an unresolvable host is secure.
    const addresses = isIP(hostname)
      ? [{ address: hostname, family: isIP(hostname) }]
      : await lookup(hostname, { all: true }).catch(() => []);
    return addresses.some((a) => this.nets.check(a.address, a.family === 6 ? 'ipv6' : 'ipv4'));
  }
}

/** docker login's server address (`https://index.docker.io/v1/`, `host:port`, a URL) → a registry host. */
function loginHost(address: string): string {
  const raw = address.trim() || DEFAULT_DOMAIN;
  const host = raw.includes('://') ? new URL(raw).host : raw.replace(/\/.*$/, '');
  return host === 'index.docker.io' || host === 'registry-1.docker.io' ? DEFAULT_DOMAIN : host;
}

const blobPath = (ref: Reference, digest: string) => `/v2/${ref.path}/blobs/${digest}`;
const manifestPath = (ref: Reference, reference: string) => `/v2/${ref.path}/manifests/${reference}`;
const sameChallenge = (a: Challenge, b: Challenge) =>
  a.scheme === b.scheme && a.params.realm === b.params.realm && a.params.service === b.params.service;
const sameChallenges = (a: Challenge[], b: Challenge[]) =>
  a.length === b.length && a.every((c, i) => sameChallenge(c, b[i]!));

export class RegistryClient {
  private readonly http: HttpTransport;
  private readonly tokens: TokenCache;
  private readonly insecure: InsecurePolicy;
  private readonly mirrors: string[];
  private readonly certsDirs: string[];
  private readonly logger: Logger | undefined;
  private readonly probes = new Map<string, { probe: Probe; expiresAt: number }>();
  private readonly pings = new SharedWork<Probe>();
  /** Which endpoint served each repository's manifest, so its blobs are asked there first. */
  private readonly servedBy = new Map<string, string>();

  constructor(opts: RegistryClientOptions = {}) {
    this.logger = opts.logger;
    this.insecure = new InsecurePolicy(opts.insecureRegistries ?? []);
    this.certsDirs = opts.certsDirs ?? ['/etc/docker/certs.d', '/etc/berth/certs.d'];
    this.mirrors = (opts.mirrors ?? []).flatMap((m) => this.mirrorBase(m));
    this.http = new HttpTransport({
      userAgent: opts.userAgent ?? 'berth',
      tlsFor: (url) => this.tlsFor(url),
      ...(opts.headerTimeoutMs ? { headerTimeoutMs: opts.headerTimeoutMs } : {}),
      ...(opts.idleTimeoutMs ? { idleTimeoutMs: opts.idleTimeoutMs } : {}),
    });
    this.tokens = new TokenCache((req) => this.http.follow(req));
  }

  /** Ends idle keep-alive connections. */
  close(): void {
    this.http.close();
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
    return this.acrossEndpoints(ref, this.endpoints(ref), async (endpoint) => {
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
    const endpoint = this.endpoints(ref).at(-1)!;
    const s = { ...(await this.session(endpoint, ref, auth, undefined)), scope: '' };
    const ctx = this.context(s, 'GET', '/v2/');
    const res = await this.request(s, ctx);
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
    const endpoint = this.endpoints(reference).at(-1)!;
    const scopes = [
      `repository:${reference.path}:push,pull`,
      ...(opts.mountFrom ?? []).map((p) => `repository:${p}:pull`),
    ];
    const s = await this.session(endpoint, reference, auth, opts.signal, scopes.join(' '));
    return {
      base: s.probe.base,
      send: async (method, target, send = {}) => {
        const url = new URL(target, `${s.probe.base}/`);
        return this.request(s, { method, url }, send.accept, send);
      },
    };
  }

  /** `GET /v1/search` on a registry's index (docker.io: Docker Hub's); never a mirror, as dockerd. */
  search(query: IndexQuery): Promise<SearchResult[]> {
    const access = {
      http: this.http,
      isInsecure: (h: string) => this.insecure.isInsecure(h),
      certsDir: this.certsDirs[0] ?? '/etc/docker/certs.d',
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
    return this.acrossEndpoints(reference, this.endpoints(reference), async (endpoint) => {
      const s = await this.session(endpoint, reference, auth, opts.signal);
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
    const ordered = this.endpoints(ref).sort((a, b) => rank(a) - rank(b)); // stable: otherwise the usual order
    return this.acrossEndpoints(ref, ordered, async (endpoint) => {
      const s = await this.session(endpoint, ref, auth, opts.signal);
      const ctx = this.context(s, 'GET', blobPath(ref, digest));
      const res = await this.request(s, ctx);
      if (res.status === 200) return use(res, ctx);
      throw blobError(await registryErrorFrom(res), ctx);
    });
  }

  // ---- endpoints ---------------------------------------------------------------

  private mirrorBase(raw: string): string[] {
    try {
      const url = new URL(raw.includes('://') ? raw : `https://${raw}`);
      if (url.protocol !== 'https:' && url.protocol !== 'http:') throw new Error('not http(s)');
      return [`${url.origin}${url.pathname.replace(/\/+$/, '')}`];
    } catch (e) {
      this.logger?.warn({ mirror: raw, err: (e as Error).message }, 'ignoring invalid registry mirror');
      return [];
    }
  }

  /** Mirrors then Docker Hub for docker.io; otherwise the registry itself. */
  private endpoints(ref: Reference): Endpoint[] {
    if (ref.domain === DEFAULT_DOMAIN) {
      return [
        ...this.mirrors.map((m) => ({ candidates: [m], mirror: true })),
        { candidates: [HUB_REGISTRY], mirror: false },
      ];
    }
    // Whether plain HTTP is allowed is decided when probing (it may need a DNS lookup).
    return [{ candidates: [`https://${ref.domain}`, `http://${ref.domain}`], mirror: false }];
  }

  /** Runs `fn` on each endpoint in turn; a failing mirror falls back to the next, as dockerd does. */
  private async acrossEndpoints<T>(ref: Reference, endpoints: Endpoint[], fn: (e: Endpoint) => Promise<T>): Promise<T> {
    let last: unknown = unavailable(`no registry endpoint for ${ref.name}`);
    for (const endpoint of endpoints) {
      try {
        return await fn(endpoint);
      } catch (e) {
        if (!endpoint.mirror) throw e;
        last = e;
        this.logger?.info(
          { mirror: endpoint.candidates[0], ref: ref.name, err: (e as Error).message },
          'registry mirror failed, falling back',
        );
      }
    }
    throw last;
  }

  private async tlsFor(url: URL): Promise<TlsSettings> {
    const certs = await readHostCerts(this.certsDirs, url.host);
    // dockerd skips verification for insecure registries; berth still verifies
    // when the operator put a CA in certs.d for the host, since that is what it asked for.
    const verify = certs.ca.length > 0 || !(await this.insecure.isInsecure(url.host));
    return { verify, ca: certs.ca, ...(certs.cert && certs.key ? { cert: certs.cert, key: certs.key } : {}) };
  }

  // ---- ping and sessions ------------------------------------------------------------

  /**
   * The endpoint's ping result, cached for a minute. A ping under way is
   * shared by concurrent pulls, and stops only when all of them have given up.
   */
  private async probe(endpoint: Endpoint, signal: AbortSignal | undefined): Promise<Probe> {
    const key = endpoint.candidates.join(' ');
    const hit = this.probes.get(key);
    if (hit && hit.expiresAt > Date.now()) return hit.probe;
    const probe = await this.pings.run(key, (shared) => this.ping(endpoint, shared), { signal });
    this.rememberProbe(endpoint, probe);
    return probe;
  }

  private rememberProbe(endpoint: Endpoint, probe: Probe): void {
    this.probes.set(endpoint.candidates.join(' '), { probe, expiresAt: Date.now() + PROBE_TTL_MS });
  }

  private forgetProbe(endpoint: Endpoint): void {
    this.probes.delete(endpoint.candidates.join(' '));
  }

  /** GET /v2/ on each candidate until one speaks HTTP; a 401 brings the challenges. */
  private async ping(endpoint: Endpoint, signal: AbortSignal): Promise<Probe> {
    let last: TransportError | undefined;
    for (const base of endpoint.candidates) {
      const url = new URL(`${base}/v2/`);
      if (url.protocol === 'http:' && !endpoint.mirror && !(await this.insecure.isInsecure(url.host))) continue;
      try {
        const res = await this.http.follow({ method: 'GET', url, signal });
        discard(res);
        return { base, challenges: res.status === 401 ? parseChallenges(res.authenticate) : [] };
      } catch (e) {
        // A certificate that fails verification is an answer: never retry it over HTTP.
        if (!(e instanceof TransportError) || e.certificate) throw this.transportFailure(e);
        last = e;
      }
    }
    throw this.transportFailure(last ?? new Error(`no usable endpoint for ${endpoint.candidates.join(', ')}`));
  }

  private async session(
    endpoint: Endpoint,
    ref: Reference,
    auth: AuthConfig | undefined,
    signal: AbortSignal | undefined,
    scope = `repository:${ref.path}:pull`,
  ): Promise<Session> {
    const probe = await this.probe(endpoint, signal);
    return {
      endpoint,
      probe,
      ref,
      scope,
      auth: endpoint.mirror ? undefined : auth,
      signal,
    };
  }

  private context(s: Session, method: Method, path: string): RequestContext & { method: Method } {
    return { method, url: new URL(`${s.probe.base}${path}`) };
  }

  // ---- authenticated requests ---------------------------------------------------------

  /** The Authorization header this request needs, from the challenge the registry sent. */
  private async authorization(s: Session, ctx: RequestContext, renew: boolean): Promise<string | undefined> {
    const bearer = s.probe.challenges.find((c) => c.scheme === 'bearer');
    if (bearer) {
      if (s.auth?.registrytoken) return `Bearer ${s.auth.registrytoken}`;
      return `Bearer ${await this.bearerToken(s, bearer, ctx, renew)}`;
    }
    if (s.probe.challenges.some((c) => c.scheme === 'basic')) {
      const creds = basicCredentials(s.auth);
      // Not 'unauthorized': the docker CLI answers a 401 by prompting for a login, even with no
      // terminal, and never returns. dockerd answers this case with an unclassified error (500).
      if (!creds) throw systemError(`${goOp(ctx.method)} "${ctx.url.href}": no basic auth credentials`);
      return basicHeader(creds);
    }
    return undefined;
  }

  private async bearerToken(s: Session, challenge: Challenge, ctx: RequestContext, renew: boolean): Promise<string> {
    const realm = challenge.params.realm;
    if (!realm)
      throw unavailable(`${goOp(ctx.method)} "${ctx.url.href}": registry sent a Bearer challenge without a realm`);
    let realmHost = '';
    try {
      realmHost = new URL(realm).host;
    } catch {
      // fetchToken reports the bad realm
    }
    const req = {
      realm,
      scope: s.scope,
      ...(challenge.params.service !== undefined ? { service: challenge.params.service } : {}),
      ...(s.auth ? { auth: s.auth } : {}),
      plainHttpAllowed: realmHost !== '' && (await this.insecure.isInsecure(realmHost)),
      ...(s.signal ? { signal: s.signal } : {}),
    };
    if (renew) this.tokens.invalidate(req);
    try {
      return await this.tokens.get(req);
    } catch (e) {
      throw tokenFailure(e, ctx);
    }
  }

  /**
   * Sends an authorised request. One retry after a 401 when retrying can help:
   * the registry's challenge changed since the ping, or our cached token was
   * refused (expired or revoked early).
   */
  private async request(
    s: Session,
    ctx: RequestContext & { method: Method },
    accept?: string,
    send: Pick<HttpRequest, 'headers' | 'body'> = {},
  ): Promise<HttpResponse> {
    // An upload's Location may name another host: credentials stay with the registry.
    const ours = ctx.url.origin === new URL(s.probe.base).origin;
    for (let attempt = 0; ; attempt++) {
      const authz = ours ? await this.authorization(s, ctx, attempt > 0) : undefined;
      const headers: Record<string, string> = {
        ...send.headers,
        ...(accept ? { Accept: accept } : {}),
        ...(authz ? { Authorization: authz } : {}),
      };
      let res: HttpResponse;
      try {
        res = await this.http.follow({
          method: ctx.method,
          url: ctx.url,
          headers,
          ...(send.body !== undefined ? { body: send.body } : {}),
          ...(s.signal ? { signal: s.signal } : {}),
        });
      } catch (e) {
        this.forgetProbe(s.endpoint);
        throw this.transportFailure(e);
      }
      if (res.status !== 401 || attempt > 0) return res;
      // Only the registry itself may ask for credentials: a 401 from a host it
      // redirected us to must not make us send them to a realm that host names.
      if (res.url.origin !== ctx.url.origin) return res;
      const challenges = parseChallenges(res.authenticate);
      const changed = challenges.length > 0 && !sameChallenges(challenges, s.probe.challenges);
      const usedToken = Boolean(authz?.startsWith('Bearer ') && !s.auth?.registrytoken);
      if (!changed && !usedToken) return res;
      if (changed) {
        s.probe = { ...s.probe, challenges };
        this.rememberProbe(s.endpoint, s.probe);
      }
      discard(res);
    }
  }

  private transportFailure(e: unknown): EngineError {
    if (e instanceof EngineError) return e;
    if (e instanceof TransportError && e.certificate) {
      const hint = `; to trust it, put its CA certificate in ${this.certsDirs[0] ?? '/etc/docker/certs.d'}/${e.url.host}/ca.crt`;
      return unavailable(e.message + hint, e);
    }
    return unavailable((e as Error).message, e);
  }

  // ---- manifests and config -------------------------------------------------------------

  private async resolveAt(
    endpoint: Endpoint,
    ref: Reference,
    auth: AuthConfig | undefined,
    opts: ResolveOptions,
  ): Promise<ResolvedManifest> {
    const s = await this.session(endpoint, ref, auth, opts.signal);
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
    const ctx = this.context(s, 'GET', manifestPath(s.ref, reference));
    const res = await this.request(s, ctx, MANIFEST_ACCEPT);
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

/** A token request that failed, reported against the request that needed it (as Go's url.Error nests). */
function tokenFailure(e: unknown, ctx: RequestContext): EngineError {
  const where = `${goOp(ctx.method)} "${ctx.url.href}"`;
  if (e instanceof RegistryError) {
    const refused = e.status === 401 || e.status === 403 || e.code === 'UNAUTHORIZED' || e.code === 'DENIED';
    return refused ? unauthorized(`${where}: ${e.message}`) : unavailable(`${where}: ${e.message}`, e);
  }
  if (e instanceof TransportError) return unavailable(`${where}: ${e.message}`, e);
  if (e instanceof EngineError) return e;
  // An answer that is no token (cut short, not JSON, no token in it): the token server is at
  // fault, not the credentials (a 401 would send the docker CLI to a login prompt).
  return unavailable(`${where}: ${messageOf(e)}`, e);
}
