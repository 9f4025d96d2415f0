// How a request reaches a registry: its endpoints (mirrors, then the registry
// itself; HTTPS, then plain HTTP where allowed), the ping of each, shared by
// concurrent pulls and kept a while, and the credentials it asks for
// (Basic, or a Bearer token for the session's scope), sent only to it.
// client.ts says what to ask for; this says where and with which credentials.
import { EngineError, messageOf, systemError, unauthorized, unavailable } from '../../errors.js';
import type { Logger } from '../../log.js';
import { DEFAULT_DOMAIN, type Reference } from '../reference.js';
import { SharedWork } from '../shared.js';
import { basicCredentials, basicHeader, parseChallenges, TokenCache, type AuthConfig, type Challenge } from './auth.js';
import { readHostCerts } from './certs.js';
import { RegistryError, type RequestContext } from './errors.js';
import { InsecurePolicy } from './insecure.js';
import {
  discard,
  goOp,
  HttpTransport,
  TransportError,
  type HttpRequest,
  type HttpResponse,
  type Method,
  type TlsSettings,
} from './transport.js';

/** Docker Hub's API host, for references on docker.io. */
const HUB_REGISTRY = 'https://registry-1.docker.io';
const PROBE_TTL_MS = 60_000;

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

export interface Endpoint {
  /** Base URLs to try in order, without trailing slash (https before http for insecure registries). */
  candidates: string[];
  mirror: boolean;
}

export interface Probe {
  /** The base URL that answered (its scheme is the one to use). */
  base: string;
  /** What /v2/ asked for; empty when it answered without a 401. */
  challenges: Challenge[];
}

export interface Session {
  endpoint: Endpoint;
  probe: Probe;
  ref: Reference;
  scope: string;
  /** undefined on mirrors: they are always asked anonymously. */
  auth: AuthConfig | undefined;
  signal: AbortSignal | undefined;
}

const sameChallenge = (a: Challenge, b: Challenge) =>
  a.scheme === b.scheme && a.params.realm === b.params.realm && a.params.service === b.params.service;
const sameChallenges = (a: Challenge[], b: Challenge[]) =>
  a.length === b.length && a.every((c, i) => sameChallenge(c, b[i]!));

/** The endpoints, pings and credentials of a client's requests (see the top of this file). */
export class Sessions {
  readonly http: HttpTransport;
  readonly insecure: InsecurePolicy;
  readonly certsDirs: string[];
  private readonly tokens: TokenCache;
  private readonly mirrors: string[];
  private readonly logger: Logger | undefined;
  private readonly probes = new Map<string, { probe: Probe; expiresAt: number }>();
  private readonly pings = new SharedWork<Probe>();

  constructor(opts: RegistryClientOptions) {
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
  endpoints(ref: Reference): Endpoint[] {
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
  async acrossEndpoints<T>(ref: Reference, endpoints: Endpoint[], fn: (e: Endpoint) => Promise<T>): Promise<T> {
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

  async open(
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

  context(s: Session, method: Method, path: string): RequestContext & { method: Method } {
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
  async request(
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
