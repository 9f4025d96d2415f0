// Registry credentials: the X-Registry-Auth header, WWW-Authenticate
// challenges, and bearer tokens from the realm a registry names.
//
// Credentials are sent only where a challenge asks for them (the client
// enforces that: Basic to the registry that challenged, token requests to the
// realm that registry named) and are never logged: decoded configs serialise
// and inspect as "[redacted]".
import { createHash } from 'node:crypto';
import { inspect } from 'node:util';
import { invalidParameter } from '../../errors.js';
import { SharedWork } from '../shared.js';
import { discard, readBody, type HttpRequest, type HttpResponse } from './transport.js';
import { registryErrorFrom } from './errors.js';

export { parseChallenges, type Challenge } from './challenge.js';

/** Docker's AuthConfig as clients send it (JSON field names are Docker's). */
export interface AuthConfig {
  username?: string;
  password?: string;
  /** base64("user:password"), as in the CLI's config.json. */
  auth?: string;
  email?: string;
  serveraddress?: string;
  /** An OAuth2 refresh token for the registry's token server. */
  identitytoken?: string;
  /** A bearer token sent to the registry as is. */
  registrytoken?: string;
}

const FIELDS = ['username', 'password', 'auth', 'email', 'serveraddress', 'identitytoken', 'registrytoken'] as const;

const invalidHeader = (why: string) => invalidParameter(`invalid X-Registry-Auth header: ${why}`);

/**
 * Decodes X-Registry-Auth: base64 (standard or URL-safe alphabet, padded or
 * not — clients send all four) of a JSON AuthConfig. An absent or empty header,
 * `{}`, or an object with no non-empty field means anonymous (undefined).
 */
export function decodeRegistryAuth(header: string | readonly string[] | undefined): AuthConfig | undefined {
  const value = (typeof header === 'string' ? header : header?.[0])?.trim() ?? '';
  if (!value) return undefined;
  const doc = parseJson(decodeBase64(value));
  const config: AuthConfig = {};
  for (const field of FIELDS) {
    const v = doc[field];
    if (v === undefined || v === null) continue;
    if (typeof v !== 'string') throw invalidHeader(`invalid JSON: field ${field} must be a string`);
    if (v) config[field] = v;
  }
  return Object.keys(config).length ? redacted(config) : undefined;
}

/**
 * Decodes X-Registry-Config (a build's): base64, in the same four forms, of a
 * JSON map from registry host to AuthConfig. Absent or empty: no credentials.
 */
export function decodeRegistryConfig(header: string | readonly string[] | undefined): Record<string, AuthConfig> {
  const value = (typeof header === 'string' ? header : header?.[0])?.trim() ?? '';
  if (!value) return {};
  let doc: unknown;
  try {
    doc = JSON.parse(decodeBase64(value));
  } catch (e) {
    const why = (e as Error).message.replace(/^invalid X-Registry-Auth header: /, '');
    throw invalidParameter(`invalid X-Registry-Config header: ${why}`);
  }
  if (doc === null) return {};
  if (typeof doc !== 'object' || Array.isArray(doc))
    throw invalidParameter('invalid X-Registry-Config header: expected a JSON object');
  const out: Record<string, AuthConfig> = {};
  for (const [host, entry] of Object.entries(doc as Record<string, unknown>)) {
    if (!entry || typeof entry !== 'object') continue;
    const config: AuthConfig = {};
    for (const field of FIELDS) {
      const v = (entry as Record<string, unknown>)[field];
      if (typeof v === 'string' && v) config[field] = v;
    }
    if (Object.keys(config).length) out[host] = redacted(config);
  }
  return out;
}

function decodeBase64(value: string): string {
  // Buffer.from(…, 'base64') skips characters it does not know; check strictly first.
  const m = /^([A-Za-z0-9+/_-]*)(={0,2})$/.exec(value);
  const body = m?.[1] ?? '';
  const padded = Boolean(m?.[2]);
  const shapeOk = m && (padded ? value.length % 4 === 0 : body.length % 4 !== 1);
  if (!shapeOk) throw invalidHeader('must be a valid base64url-encoded string');
  return Buffer.from(body.replace(/-/g, '+').replace(/_/g, '/'), 'base64').toString('utf8');
}

function parseJson(text: string): Record<string, unknown> {
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch (e) {
    throw invalidHeader(`invalid JSON: ${(e as Error).message}`);
  }
  if (typeof doc !== 'object' || doc === null || Array.isArray(doc))
    throw invalidHeader('invalid JSON: expected an object');
  return doc as Record<string, unknown>;
}

/** Makes accidental logging harmless: JSON and util.inspect show no secrets. */
function redacted(config: AuthConfig): AuthConfig {
  const safe = () => ({
    ...(config.username ? { username: config.username } : {}),
    ...(config.serveraddress ? { serveraddress: config.serveraddress } : {}),
    secrets: '[redacted]',
  });
  Object.defineProperty(config, 'toJSON', { value: safe, enumerable: false });
  Object.defineProperty(config, inspect.custom, { value: () => `AuthConfig ${inspect(safe())}`, enumerable: false });
  return config;
}

/** Username and password, from the fields or from `auth` (base64 "user:pass"). */
export function basicCredentials(auth: AuthConfig | undefined): { username: string; password: string } | undefined {
  if (!auth) return undefined;
  if (auth.username && auth.password) return { username: auth.username, password: auth.password };
  if (auth.auth) {
    const decoded = Buffer.from(auth.auth, 'base64').toString('utf8');
    const i = decoded.indexOf(':');
    if (i > 0) return { username: decoded.slice(0, i), password: decoded.slice(i + 1) };
  }
  return undefined;
}

export const basicHeader = (c: { username: string; password: string }) =>
  `Basic ${Buffer.from(`${c.username}:${c.password}`).toString('base64')}`;

// ---- bearer tokens -------------------------------------------------------------

export type Send = (req: HttpRequest) => Promise<HttpResponse>;

export interface TokenRequest {
  /** The realm named by the registry's Bearer challenge. */
  realm: string;
  service?: string;
  /** e.g. `repository:library/busybox:pull`; several are separated by spaces (a push that mounts asks for two). */
  scope: string;
  auth?: AuthConfig;
  /** Whether credentials may go to an http:// realm (loopback or insecure-registry realms only). */
  plainHttpAllowed?: boolean;
  signal?: AbortSignal;
}

export interface Token {
  token: string;
  /** ms since the epoch. */
  expiresAt: number;
}

/** distribution's minimum token lifetime: shorter or absent expires_in means 60 s. */
const MIN_TOKEN_SECONDS = 60;
const TOKEN_BODY_LIMIT = 1024 * 1024;
/** Docker identifies itself to token servers as client "docker" and asks for offline tokens. */
const CLIENT_ID = 'docker';

/**
 * Gets a token as Docker does: with an identity token, an OAuth2 POST
 * (grant_type=refresh_token), falling back to GET when the server does not
 * take POST (404/405); otherwise a GET with Basic credentials when there are any.
 * A refusal is a RegistryError (e.g. `unauthorized: incorrect username or password`).
 */
export async function fetchToken(send: Send, req: TokenRequest, now = Date.now): Promise<Token> {
  const realm = realmUrl(req);
  const creds = basicCredentials(req.auth);
  if (req.auth?.identitytoken) {
    const res = await send(oauthRequest(realm, req));
    if (res.status !== 404 && res.status !== 405) return tokenFrom(res, now);
    discard(res);
  }
  const url = new URL(realm);
  if (req.service) url.searchParams.append('service', req.service);
  // One `scope` parameter each, as Docker sends them (the OAuth form below takes them space-separated).
  for (const scope of req.scope.split(' ').filter(Boolean)) url.searchParams.append('scope', scope);
  url.searchParams.append('offline_token', 'true');
  url.searchParams.append('client_id', CLIENT_ID);
  const headers: Record<string, string> = creds ? { Authorization: basicHeader(creds) } : {};
  return tokenFrom(await send({ method: 'GET', url, headers, ...(req.signal ? { signal: req.signal } : {}) }), now);
}

function realmUrl(req: TokenRequest): URL {
  let realm: URL;
  try {
    realm = new URL(req.realm);
  } catch {
    throw new Error(`token realm is not a URL: ${JSON.stringify(req.realm)}`);
  }
  if (realm.protocol !== 'https:' && realm.protocol !== 'http:')
    throw new Error(`token realm is not an http(s) URL: ${realm.href}`);
  const sendsSecrets = Boolean(basicCredentials(req.auth) || req.auth?.identitytoken);
  if (realm.protocol === 'http:' && sendsSecrets && !req.plainHttpAllowed) {
    throw new Error(`refusing to send credentials to token server ${realm.origin} over plain HTTP`);
  }
  return realm;
}

function oauthRequest(realm: URL, req: TokenRequest): HttpRequest {
  const form = new URLSearchParams({
    grant_type: 'refresh_token',
    refresh_token: req.auth?.identitytoken ?? '',
    client_id: CLIENT_ID,
    access_type: 'offline',
  });
  if (req.service) form.append('service', req.service);
  if (req.scope) form.append('scope', req.scope);
  return {
    method: 'POST',
    url: realm,
    headers: { 'Content-Type': 'application/x-www-form-urlencoded; charset=utf-8' },
    body: form.toString(),
    ...(req.signal ? { signal: req.signal } : {}),
  };
}

async function tokenFrom(res: HttpResponse, now: () => number): Promise<Token> {
  if (res.status < 200 || res.status >= 300) throw await registryErrorFrom(res);
  let doc: { token?: unknown; access_token?: unknown; expires_in?: unknown; issued_at?: unknown };
  try {
    doc = JSON.parse((await readBody(res, TOKEN_BODY_LIMIT, 'token response')).toString('utf8'));
  } catch (e) {
    throw new Error(`unable to decode token response: ${(e as Error).message}`);
  }
  const token =
    typeof doc.token === 'string' && doc.token
      ? doc.token
      : typeof doc.access_token === 'string'
        ? doc.access_token
        : '';
  if (!token) throw new Error('authorization server did not include a token in the response');
  // It goes into an Authorization header: anything else would fail there, less clearly.
  if (!/^[\x21-\x7e]+$/.test(token))
    throw new Error('authorization server sent a token that is not a valid header value');
  const seconds =
    typeof doc.expires_in === 'number' && doc.expires_in > MIN_TOKEN_SECONDS ? doc.expires_in : MIN_TOKEN_SECONDS;
  const issued = typeof doc.issued_at === 'string' ? Date.parse(doc.issued_at) : NaN;
  return { token, expiresAt: (Number.isFinite(issued) ? issued : now()) + seconds * 1000 };
}

/**
 * Tokens per (realm, service, scope, credentials) until they expire; concurrent
 * requests for the same key share one fetch (a pull asks for each layer at once),
 * which stops only when every caller has given up (each its own `signal`).
 * Credentials enter the key only as a hash.
 */
export class TokenCache {
  private readonly tokens = new Map<string, Token>();
  private readonly fetches = new SharedWork<Token>();
  /** Renew this long before the server's expiry, so a token does not die in flight. */
  private static readonly MARGIN_MS = 10_000;
  private static readonly MAX_ENTRIES = 512;

  constructor(
    private readonly send: Send,
    private readonly now: () => number = Date.now,
  ) {}

  async get(req: TokenRequest): Promise<string> {
    const key = cacheKey(req);
    const cached = this.tokens.get(key);
    if (cached && cached.expiresAt - TokenCache.MARGIN_MS > this.now()) return cached.token;
    const { signal, ...shared } = req;
    const token = await this.fetches.run(key, (s) => fetchToken(this.send, { ...shared, signal: s }, this.now), {
      signal,
    });
    this.store(key, token);
    return token.token;
  }

  invalidate(req: TokenRequest): void {
    this.tokens.delete(cacheKey(req));
  }

  private store(key: string, token: Token): void {
    if (this.tokens.size >= TokenCache.MAX_ENTRIES) {
      const t = this.now();
      for (const [k, v] of this.tokens) if (v.expiresAt <= t) this.tokens.delete(k);
      if (this.tokens.size >= TokenCache.MAX_ENTRIES) this.tokens.clear();
    }
    this.tokens.set(key, token);
  }
}

function cacheKey(req: TokenRequest): string {
  const creds = basicCredentials(req.auth);
  const secret =
    creds || req.auth?.identitytoken ? JSON.stringify([creds?.username, creds?.password, req.auth?.identitytoken]) : '';
  const who = secret ? createHash('sha256').update(secret).digest('hex') : 'anonymous';
  return JSON.stringify([req.realm, req.service ?? '', req.scope, who]);
}
