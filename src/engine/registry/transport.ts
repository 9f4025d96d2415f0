// The registry client's HTTP transport, on node:http/node:https.
//
// Why not Node's fetch: it takes TLS settings (extra CAs, client certificates,
// skipping verification for insecure registries) only through an undici
// `Agent` passed as `dispatcher`, and Node (22, 24) does not export undici's
// Agent (the `undici` package is not a dependency). node:https takes `ca`,
// `cert`, `key` and `rejectUnauthorized` per request, gives a Node Readable for
// streaming blobs with backpressure, and lets us own the redirect loop, which
// is where credentials leak (CVE-2021-41092): `follow` drops Authorization
// whenever a redirect leaves the origin that was authorised.
import http from 'node:http';
import type { IncomingHttpHeaders, IncomingMessage } from 'node:http';
import type * as Https from 'node:https';
import type { Readable } from 'node:stream';
import { createHash } from 'node:crypto';
import type * as Tls from 'node:tls';

// Loaded at the first https request, not at start (~2 ms before a first answer).
const https = (): typeof Https => process.getBuiltinModule('node:https');
const tls = (): typeof Tls => process.getBuiltinModule('node:tls');

export type Method = 'GET' | 'HEAD' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';

/**
 * A request body streamed from somewhere it can be read again (a stored blob):
 * a redirect or a retry after a 401 opens it afresh.
 */
export interface BodySource {
  length: number;
  open(): Readable;
}

export interface TlsSettings {
  /** Extra PEM CAs, trusted in addition to Node's bundled roots (Docker adds certs.d CAs to the system pool). */
  ca?: string[];
  /** PEM client certificate and key (certs.d `*.cert` / `*.key`). */
  cert?: string;
  key?: string;
  /** false only for insecure registries without a configured CA, as dockerd does. */
  verify: boolean;
}

export interface HttpRequest {
  method: Method;
  url: URL;
  headers?: Record<string, string>;
  body?: string | Buffer | BodySource;
  signal?: AbortSignal;
}

const bodyLength = (body: string | Buffer | BodySource) =>
  typeof body === 'string' ? Buffer.byteLength(body) : body.length;
const isStreamed = (body: HttpRequest['body']): body is BodySource =>
  body !== undefined && typeof body !== 'string' && !Buffer.isBuffer(body);

export interface HttpResponse {
  status: number;
  statusText: string;
  headers: IncomingHttpHeaders;
  /** Every WWW-Authenticate header, each as sent (Node would join them with ", "). */
  authenticate: string[];
  /** The URL that answered (after redirects). */
  url: URL;
  body: IncomingMessage;
}

export interface TransportOptions {
  userAgent: string;
  /** TLS settings for a URL's host (certs.d lookup, insecure registries). */
  tlsFor: (url: URL) => Promise<TlsSettings>;
  /** Connect + TLS + waiting for response headers. */
  headerTimeoutMs?: number;
  /** A response body that delivers nothing for this long while we want data is a stalled registry. */
  idleTimeoutMs?: number;
}

const MAX_REDIRECTS = 10;
const REDIRECT_STATUSES = new Set([301, 302, 303, 307, 308]);

/** Go's spelling of a method in url.Error ("Get", "Head"), which dockerd's messages carry. */
export const goOp = (method: string) => method.charAt(0) + method.slice(1).toLowerCase();

/** Node/OpenSSL codes that mean "the certificate was not trusted". */
const UNKNOWN_AUTHORITY = new Set([
  'UNABLE_TO_GET_ISSUER_CERT',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'CERT_UNTRUSTED',
  'CERT_SIGNATURE_FAILURE',
  'INVALID_CA',
]);
const CERT_EXPIRY = new Set(['CERT_HAS_EXPIRED', 'CERT_NOT_YET_VALID']);

/** A request that got no HTTP answer: refused, unresolvable, TLS failure, timeout. */
export class TransportError extends Error {
  constructor(
    readonly method: string,
    readonly url: URL,
    readonly code: string | undefined,
    readonly detail: string,
    /** The TLS handshake failed on certificate verification (never worth retrying over HTTP). */
    readonly certificate: boolean,
    cause?: unknown,
  ) {
    super(`${goOp(method)} "${url.href}": ${detail}`, { cause });
    this.name = 'TransportError';
  }
}

const hostPort = (url: URL) => `${url.hostname}:${url.port || (url.protocol === 'https:' ? '443' : '80')}`;

/** Words for a failed request, close to Go's net/http texts that dockerd shows. */
function describe(url: URL, e: NodeJS.ErrnoException): { detail: string; certificate: boolean } {
  const code = e.code ?? '';
  const dial = `dial tcp ${hostPort(url)}`;
  if (UNKNOWN_AUTHORITY.has(code)) {
    return {
      detail: `tls: failed to verify certificate: x509: certificate signed by unknown authority (${e.message})`,
      certificate: true,
    };
  }
  if (CERT_EXPIRY.has(code))
    return { detail: `tls: failed to verify certificate: x509: ${e.message}`, certificate: true };
  if (code === 'ERR_TLS_CERT_ALTNAME_INVALID') {
    return {
      detail: `tls: failed to verify certificate: x509: certificate is not valid for ${url.hostname}: ${e.message}`,
      certificate: true,
    };
  }
  if (code === 'EPROTO' && /wrong version number|packet length too long|http request/i.test(e.message)) {
    return { detail: 'http: server gave HTTP response to HTTPS client', certificate: false };
  }
  const words: Record<string, string> = {
    ECONNREFUSED: `${dial}: connect: connection refused`,
    EHOSTUNREACH: `${dial}: connect: no route to host`,
    ENETUNREACH: `${dial}: connect: network is unreachable`,
    ETIMEDOUT: `${dial}: i/o timeout`,
    ECONNRESET: `read tcp ${hostPort(url)}: connection reset by peer`,
    ENOTFOUND: `dial tcp: lookup ${url.hostname}: no such host`,
    EAI_AGAIN: `dial tcp: lookup ${url.hostname}: temporary failure in name resolution`,
  };
  return { detail: words[code] ?? (e.message || String(e)), certificate: false };
}

function transportError(method: string, url: URL, e: unknown): TransportError {
  if (e instanceof TransportError) return e;
  const err = e as NodeJS.ErrnoException;
  const { detail, certificate } = describe(url, err);
  return new TransportError(method, url, err.code, detail, certificate, e);
}

export class HttpTransport {
  // Our own keep-alive agents, so close() can end their sockets. TLS settings
  // go per request; the agents key their socket pools by them.
  private readonly agents: { http: http.Agent; https?: Https.Agent } = { http: new http.Agent({ keepAlive: true }) };
  private readonly headerTimeoutMs: number;
  private readonly idleTimeoutMs: number;

  constructor(private readonly opts: TransportOptions) {
    this.headerTimeoutMs = opts.headerTimeoutMs ?? 30_000;
    this.idleTimeoutMs = opts.idleTimeoutMs ?? 60_000;
  }

  /** One request, no redirects. Rejects only when no HTTP answer came (TransportError). */
  async send(req: HttpRequest): Promise<HttpResponse> {
    const secure = req.url.protocol === 'https:';
    const settings = secure ? await this.opts.tlsFor(req.url) : undefined;
    let secureOptions: TlsRequestOptions = {};
    try {
      if (settings) secureOptions = tlsOptions(settings);
    } catch (e) {
      throw transportError(
        req.method,
        req.url,
        new Error(`tls: bad certificate configuration for ${req.url.host}: ${(e as Error).message}`),
      );
    }
    const headers: Record<string, string> = { 'User-Agent': this.opts.userAgent, ...req.headers };
    if (req.body !== undefined) headers['Content-Length'] = String(bodyLength(req.body));
    const options: TlsRequestOptions = {
      method: req.method,
      headers,
      agent: secure ? this.httpsAgent() : this.agents.http,
      ...(req.signal ? { signal: req.signal } : {}),
      ...secureOptions,
    };
    return new Promise<HttpResponse>((resolve, reject) => {
      const r = (secure ? https() : http).request(req.url, options);
      const headerTimer = () =>
        setTimeout(() => {
          r.destroy(
            Object.assign(new Error(`timeout awaiting response headers after ${this.headerTimeoutMs / 1000}s`), {
              code: 'ETIMEDOUT_HEADERS',
            }),
          );
        }, this.headerTimeoutMs);
      let timer = headerTimer();
      // An upload takes as long as it takes: the wait for headers begins once its body is sent.
      // Until then, a socket that moves no bytes for the idle timeout is a stalled registry.
      const uploadStalled = () =>
        r.destroy(
          Object.assign(new Error(`registry stalled: took no data for ${this.idleTimeoutMs / 1000}s`), {
            code: 'ETIMEDOUT',
          }),
        );
      if (isStreamed(req.body)) {
        clearTimeout(timer);
        r.setTimeout(this.idleTimeoutMs, uploadStalled);
        r.once('finish', () => {
          if (!response) timer = headerTimer();
        });
      }
      let response: IncomingMessage | undefined;
      r.once('response', (res) => {
        clearTimeout(timer);
        r.off('timeout', uploadStalled);
        response = res;
        this.watchStall(req, res);
        resolve(wrap(req.url, res));
      });
      // `on`, not `once`: an error after the response must not go unhandled; it ends the body instead.
      r.on('error', (e) => {
        clearTimeout(timer);
        const err = transportError(req.method, req.url, e);
        if (response) response.destroy(err);
        else reject(err);
      });
      sendBody(r, req.body);
    });
  }

  /**
   * Follows redirects (registries send blobs to S3-style storage). Authorization
   * is sent only while the request stays on the origin it was meant for: any
   * change of scheme, host or port drops it, and it is never restored.
   */
  async follow(req: HttpRequest): Promise<HttpResponse> {
    let current = req;
    for (let hops = 0; ; hops++) {
      const res = await this.send(current);
      const location = res.headers.location;
      if (!REDIRECT_STATUSES.has(res.status) || !location) return res;
      discard(res);
      if (hops >= MAX_REDIRECTS)
        throw transportError(req.method, req.url, new Error(`stopped after ${MAX_REDIRECTS} redirects`));
      const next = new URL(location, current.url);
      if (next.protocol !== 'http:' && next.protocol !== 'https:') {
        throw transportError(req.method, req.url, new Error(`refusing redirect to ${next.protocol} URL`));
      }
      const keepsBody = res.status === 307 || res.status === 308;
      if (keepsBody && current.body !== undefined && next.origin !== current.url.origin) {
        // A 307/308 would resend the body (an OAuth form holds the refresh token) to another host.
        throw transportError(
          req.method,
          req.url,
          new Error(`refusing to resend a request body to ${next.origin} after a ${res.status} redirect`),
        );
      }
      current = redirected(current, next, res.status);
    }
  }

  /** Made at the first https request: node:https is loaded only when a registry needs it. */
  private httpsAgent(): Https.Agent {
    this.agents.https ??= new (https().Agent)({ keepAlive: true });
    return this.agents.https;
  }

  close(): void {
    this.agents.http.destroy();
    this.agents.https?.destroy();
  }

  /**
   * A socket timeout alone cannot tell a stalled registry from a slow consumer:
   * when our reader applies backpressure the socket goes quiet too. So a quiet
   * socket counts as stalled only while the body's buffer has room.
   */
  private watchStall(req: HttpRequest, res: IncomingMessage): void {
    const socket = res.socket;
    if (!socket) return;
    const onTimeout = () => {
      if (res.readableLength >= res.readableHighWaterMark) {
        socket.setTimeout(this.idleTimeoutMs); // re-arm: the consumer is busy, not the registry
        return;
      }
      res.destroy(
        new TransportError(
          req.method,
          req.url,
          'ETIMEDOUT',
          `registry stalled: no data for ${this.idleTimeoutMs / 1000}s`,
          false,
        ),
      );
    };
    socket.setTimeout(this.idleTimeoutMs);
    socket.on('timeout', onTimeout);
    res.once('close', () => {
      socket.off('timeout', onTimeout);
      socket.setTimeout(0);
    });
  }
}

/** Writes a request's body: in one go, or streamed (a source that fails ends the request with its error). */
function sendBody(r: http.ClientRequest, body: HttpRequest['body']): void {
  if (!isStreamed(body)) {
    r.end(body);
    return;
  }
  const source = body.open();
  source.once('error', (e) => r.destroy(e));
  r.once('close', () => source.destroy());
  source.pipe(r);
}

// Secure contexts are built once per distinct TLS settings: passing `ca` per
// request would rebuild the trust store (Node's roots plus ours) every time.
const contexts = new Map<string, Tls.SecureContext>();

/** https.request hands these to tls.connect, which takes a prepared secureContext. */
type TlsRequestOptions = Https.RequestOptions & { secureContext?: Tls.SecureContext };

function tlsOptions(settings: TlsSettings): TlsRequestOptions {
  if (!settings.ca?.length && !(settings.cert && settings.key)) return { rejectUnauthorized: settings.verify };
  const key = createHash('sha256')
    .update(JSON.stringify([settings.ca, settings.cert, settings.key]))
    .digest('hex');
  let secureContext = contexts.get(key);
  if (!secureContext) {
    secureContext = tls().createSecureContext({
      ...(settings.ca?.length ? { ca: [...tls().rootCertificates, ...settings.ca] } : {}),
      ...(settings.cert && settings.key ? { cert: settings.cert, key: settings.key } : {}),
    });
    contexts.set(key, secureContext);
  }
  return { rejectUnauthorized: settings.verify, secureContext };
}

function wrap(url: URL, res: IncomingMessage): HttpResponse {
  const raw = res.headersDistinct['www-authenticate'] ?? [];
  return {
    status: res.statusCode ?? 0,
    statusText: res.statusMessage ?? '',
    headers: res.headers,
    authenticate: raw,
    url,
    body: res,
  };
}

function redirected(req: HttpRequest, next: URL, status: number): HttpRequest {
  const headers = { ...req.headers };
  if (next.origin !== req.url.origin) {
    for (const name of Object.keys(headers)) if (name.toLowerCase() === 'authorization') delete headers[name];
  }
  // 303, and 301/302 after a POST, become a GET without a body (as browsers and Go do).
  const toGet = status === 303 || ((status === 301 || status === 302) && req.method === 'POST');
  if (!toGet) return { ...req, url: next, headers };
  for (const name of Object.keys(headers)) if (/^content-/i.test(name)) delete headers[name];
  const { body: _body, ...rest } = req;
  return { ...rest, method: 'GET', url: next, headers };
}

/** Throws away a response body we do not need, so its socket can be reused. */
export function discard(res: HttpResponse): void {
  res.body.resume();
  res.body.on('error', () => {});
}

/**
 * Reads a whole body, refusing more than `limit` bytes (checked against
 * Content-Length first, then while reading) so that a hostile registry cannot
 * make us buffer without bound before JSON.parse.
 */
export async function readBody(res: HttpResponse, limit: number, what: string): Promise<Buffer> {
  const tooLarge = () => new BodyTooLargeError(`${what} exceeds the ${limit}-byte limit`);
  const declared = Number(res.headers['content-length']);
  if (Number.isFinite(declared) && declared > limit) {
    res.body.destroy();
    throw tooLarge();
  }
  const chunks: Buffer[] = [];
  let total = 0;
  for await (const chunk of res.body as AsyncIterable<Buffer>) {
    total += chunk.length;
    if (total > limit) {
      res.body.destroy();
      throw tooLarge();
    }
    chunks.push(chunk);
  }
  return Buffer.concat(chunks, total);
}

export class BodyTooLargeError extends Error {
  override name = 'BodyTooLargeError';
}
