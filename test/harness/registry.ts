// Starts the real CNCF distribution registry (Debian's `docker-registry`, 2.8)
// for tests: on a free 127.0.0.1 port, with its own temp storage, anonymous or
// with htpasswd or token auth, over plain HTTP or TLS (a CA made with openssl).
//
// No registry outlives the test process: each runs under a tiny shell watchdog
// that kills it when our stdin pipe to it closes — which the kernel does when
// this process dies, however it dies — and an exit hook kills them as well.
//
// Token auth (distribution 2.8, registry/auth/token): the registry trusts the
// certificates in `rootcertbundle`. A JWT names its signing key either by `kid`
// (the libtrust fingerprint of a key from that bundle) or by an `x5c` header
// holding a certificate chain that verifies up to the bundle. We use `x5c`
// with the self-signed signing certificate itself: no fingerprint to compute.
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import crypto from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

export type RegistryAuth = 'none' | 'htpasswd' | 'token';

export interface RegistryOptions {
  auth?: RegistryAuth;
  tls?: boolean;
  /** username → password; default {berth: 's3cret'} when auth is not 'none'. */
  users?: Record<string, string>;
  /** Token auth: anonymous callers get pull (like a public Docker Hub repo) instead of nothing. */
  anonymousPull?: boolean;
}

/** One call to the token issuer, recorded for tests (never the password). */
export interface TokenRequest {
  method: string;
  /** Username sent, if any. */
  user?: string;
  scopes: string[];
  /** 'granted' (valid user), 'anonymous', or 'denied' (bad credentials: 401). */
  outcome: 'granted' | 'anonymous' | 'denied';
}

export interface TokenIssuer {
  /** Base URL; the realm is `${url}/token`. */
  url: string;
  realm: string;
  service: string;
  issuer: string;
  requests: TokenRequest[];
}

export interface Registry {
  /** '127.0.0.1:PORT' */
  host: string;
  /** http(s)://host */
  url: string;
  /** PEM of the CA that signed the registry's certificate (tls only). It sits
   *  alone in its directory, so `path.dirname(caFile)` works as skopeo's
   *  --cert-dir or as /etc/docker/certs.d/<host>/. */
  caFile?: string;
  users: Record<string, string>;
  tokenIssuer?: TokenIssuer;
  /** The temp dir holding config, storage, certificates. */
  dir: string;
  /** The registry's recent log output (for failure messages). */
  logs(): string;
  /** Kills the registry (and token issuer) and removes the temp dir. Idempotent. */
  stop(): Promise<void>;
}

export const DEFAULT_USERS: Readonly<Record<string, string>> = Object.freeze({ berth: 's3cret' });
export const TOKEN_SERVICE = 'berth-test-registry';
export const TOKEN_ISSUER = 'berth-test-token-issuer';
const TOKEN_TTL_SECONDS = 300;
const LOG_TAIL_BYTES = 64 * 1024;

// ──────────────────────────── process bookkeeping ─────────────────────────────

interface Running {
  proc: ChildProcess;
  dir: string;
  /** Settles when every holder of the stderr pipe (shell and registry) is gone. */
  closed: Promise<void>;
}
const running = new Set<Running>();

process.once('exit', () => {
  for (const r of running) {
    killGroup(r.proc);
    rmSync(r.dir, { recursive: true, force: true });
  }
});

/** SIGKILL the watchdog shell and the registry: they share a process group. */
function killGroup(proc: ChildProcess): void {
  try {
    if (proc.pid) process.kill(-proc.pid, 'SIGKILL');
  } catch {
    // already gone
  }
}

// ─────────────────────────────── certificates ────────────────────────────────

interface CertFiles {
  key: string;
  cert: string;
}

/** One EC P-256 key and certificate from the openssl CLI; signed by `ca`, or self-signed. */
async function makeCert(dir: string, name: string, subject: string, extensions: string[], ca?: CertFiles): Promise<CertFiles> {
  mkdirSync(dir, { recursive: true });
  const files = { key: path.join(dir, `${name}.key`), cert: path.join(dir, `${name}.crt`) };
  const args = ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  args.push('-keyout', files.key, '-out', files.cert, '-days', '2', '-subj', subject);
  if (ca) args.push('-CA', ca.cert, '-CAkey', ca.key);
  for (const ext of extensions) args.push('-addext', ext);
  await run('openssl', args);
  return files;
}

/** A CA (alone in dir/ca, as Docker's certs.d wants it) and a server cert for 127.0.0.1/localhost. */
async function makeServerTls(dir: string): Promise<{ caFile: string; server: CertFiles }> {
  const ca = await makeCert(path.join(dir, 'ca'), 'ca', '/CN=berth test CA', ['basicConstraints=critical,CA:TRUE', 'keyUsage=critical,keyCertSign,cRLSign']);
  // Keep only the CA certificate in the trust directory: its key lives elsewhere.
  const caKey = path.join(dir, 'ca-private.key');
  writeFileSync(caKey, readFileSync(ca.key));
  rmSync(ca.key);
  const serverExt = ['subjectAltName=IP:127.0.0.1,DNS:localhost', 'basicConstraints=CA:FALSE', 'extendedKeyUsage=serverAuth'];
  const server = await makeCert(path.join(dir, 'tls'), 'server', '/CN=localhost', serverExt, { cert: ca.cert, key: caKey });
  return { caFile: ca.cert, server };
}

// ─────────────────────────────── token issuer ────────────────────────────────

interface ResourceAccess {
  type: string;
  name: string;
  actions: string[];
}

/** 'repository:some/name:pull,push' → {type, name, actions}; names may hold ':' (host:port). */
function parseScope(scope: string): ResourceAccess | undefined {
  const first = scope.indexOf(':');
  const last = scope.lastIndexOf(':');
  if (first < 0 || last === first) return undefined;
  return { type: scope.slice(0, first), name: scope.slice(first + 1, last), actions: scope.slice(last + 1).split(',').filter(Boolean) };
}

function base64url(data: string | Buffer): string {
  return Buffer.from(data).toString('base64url');
}

/** A compact JWS (ES256) whose header carries the signing certificate (x5c). */
function signJwt(claims: object, key: crypto.KeyObject, certDerBase64: string): string {
  const header = { typ: 'JWT', alg: 'ES256', x5c: [certDerBase64] };
  const input = `${base64url(JSON.stringify(header))}.${base64url(JSON.stringify(claims))}`;
  // JWS wants r||s, not DER, for ECDSA signatures.
  const signature = crypto.sign('sha256', Buffer.from(input), { key, dsaEncoding: 'ieee-p1363' });
  return `${input}.${base64url(signature)}`;
}

function pemToDerBase64(pem: string): string {
  return pem.replace(/-----[^-]+-----/g, '').replace(/\s+/g, '');
}

function parseBasic(header: string | undefined): { username: string; password: string } | undefined {
  const m = /^Basic\s+(\S+)/i.exec(header ?? '');
  if (!m) return undefined;
  const decoded = Buffer.from(m[1]!, 'base64').toString('utf8');
  const colon = decoded.indexOf(':');
  return colon < 0 ? undefined : { username: decoded.slice(0, colon), password: decoded.slice(colon + 1) };
}

function readBody(req: http.IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

interface TokenAsk {
  creds?: { username: string; password: string };
  scopes: string[];
}

/**
 * What the caller asks for: docker's GET (Basic header, repeated `scope`) or
 * the OAuth2 POST form with grant_type=password (containerd's first try).
 */
async function readTokenAsk(req: http.IncomingMessage, url: URL): Promise<TokenAsk | 'unsupported'> {
  const splitScopes = (values: string[]) => values.flatMap((s) => s.split(' ')).filter(Boolean);
  if (req.method === 'GET') {
    return { creds: parseBasic(req.headers.authorization), scopes: splitScopes(url.searchParams.getAll('scope')) };
  }
  if (req.method !== 'POST') return 'unsupported';
  const form = new URLSearchParams(await readBody(req));
  if (form.get('grant_type') !== 'password') return 'unsupported';
  return { creds: { username: form.get('username') ?? '', password: form.get('password') ?? '' }, scopes: splitScopes(form.getAll('scope')) };
}

function sendJson(res: http.ServerResponse, status: number, body: object): void {
  res.writeHead(status, { 'Content-Type': 'application/json' });
  res.end(JSON.stringify(body));
}

interface TokenIssuerHandle {
  info: TokenIssuer;
  certFile: string;
  close(): Promise<void>;
}

async function startTokenIssuer(dir: string, users: Record<string, string>, anonymousPull: boolean): Promise<TokenIssuerHandle> {
  const signer = await makeCert(path.join(dir, 'token'), 'signing', '/CN=berth test token signer', ['keyUsage=critical,digitalSignature']);
  const key = crypto.createPrivateKey(readFileSync(signer.key));
  const certDer = pemToDerBase64(readFileSync(signer.cert, 'utf8'));
  const requests: TokenRequest[] = [];

  const grant = (ask: TokenAsk): ResourceAccess[] => {
    const wanted = ask.scopes.map(parseScope).filter((s): s is ResourceAccess => s !== undefined);
    if (ask.creds) return wanted; // a valid user may do anything it asks
    if (!anonymousPull) return []; // like Docker Hub for a private repo: a token for nothing
    return wanted.filter((s) => s.type === 'repository').map((s) => ({ ...s, actions: s.actions.filter((a) => a === 'pull') }));
  };

  const issue = (ask: TokenAsk): string => {
    const now = Math.floor(Date.now() / 1000);
    const claims = {
      iss: TOKEN_ISSUER,
      sub: ask.creds?.username ?? '',
      aud: TOKEN_SERVICE,
      exp: now + TOKEN_TTL_SECONDS,
      nbf: now,
      iat: now,
      jti: crypto.randomUUID(),
      access: grant(ask),
    };
    return signJwt(claims, key, certDer);
  };

  const server = http.createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://issuer');
    if (url.pathname !== '/token') return sendJson(res, 404, { details: 'not found' });
    readTokenAsk(req, url).then((ask) => {
      if (ask === 'unsupported') return sendJson(res, 400, { error: 'unsupported_grant_type' });
      const user = ask.creds?.username;
      if (ask.creds && users[ask.creds.username] !== ask.creds.password) {
        requests.push({ method: req.method!, user, scopes: ask.scopes, outcome: 'denied' });
        return sendJson(res, 401, { details: 'incorrect username or password' });
      }
      requests.push({ method: req.method!, user, scopes: ask.scopes, outcome: ask.creds ? 'granted' : 'anonymous' });
      const token = issue(ask);
      sendJson(res, 200, { token, access_token: token, expires_in: TOKEN_TTL_SECONDS, issued_at: new Date().toISOString() });
    }, (err: unknown) => sendJson(res, 500, { details: String(err) }));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    info: { url, realm: `${url}/token`, service: TOKEN_SERVICE, issuer: TOKEN_ISSUER, requests },
    certFile: signer.cert,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

// ─────────────────────────────────── config ───────────────────────────────────

/** `htpasswd -Bbn` per user: bcrypt, the only hash distribution accepts. */
async function writeHtpasswd(file: string, users: Record<string, string>): Promise<void> {
  const lines: string[] = [];
  for (const [user, password] of Object.entries(users)) {
    lines.push((await run('htpasswd', ['-Bbn', user, password])).stdout.trim());
  }
  writeFileSync(file, lines.join('\n') + '\n', { mode: 0o600 });
}

interface ConfigParts {
  dir: string;
  tls?: CertFiles;
  auth?: object;
}

/** The registry's config. JSON is valid YAML, so we write JSON into config.yml. */
function registryConfig({ dir, tls, auth }: ConfigParts): object {
  return {
    version: '0.1',
    // info: the registry logs "listening on <addr>", which tells us the port it got.
    log: { level: 'info', formatter: 'text', accesslog: { disabled: true } },
    storage: {
      filesystem: { rootdirectory: path.join(dir, 'storage') },
      delete: { enabled: true },
      maintenance: { uploadpurging: { enabled: false } },
    },
    http: {
      addr: '127.0.0.1:0', // the kernel picks a free port: no race with other tests
      secret: crypto.randomBytes(16).toString('hex'),
      ...(tls ? { tls: { certificate: tls.cert, key: tls.key } } : {}),
    },
    ...(auth ? { auth } : {}),
  };
}

// ───────────────────────────────── the process ────────────────────────────────

// $0 is the config file. The registry runs in the background (stdin from
// /dev/null); the shell waits on its own stdin, our pipe, and kills the
// registry once the pipe reaches EOF.
const WATCHDOG = 'docker-registry serve "$0" & read -r _; kill -9 $! 2>/dev/null';

/** A bounded tail of a stream's text. */
function tail(stream: NodeJS.ReadableStream | null): { text(): string } {
  let text = '';
  stream?.on('data', (c: Buffer) => {
    text = (text + c.toString('utf8')).slice(-LOG_TAIL_BYTES);
    if (process.env.BERTH_TEST_LOGS) process.stderr.write(c);
  });
  return { text: () => text };
}

/** Resolves with the port from the registry's "listening on 127.0.0.1:PORT" line. */
function waitForListening(proc: ChildProcess, logs: { text(): string }, timeoutMs = 15_000): Promise<number> {
  return new Promise((resolve, reject) => {
    const check = () => {
      const m = /listening on 127\.0\.0\.1:(\d+)/.exec(logs.text());
      if (m) finish(() => resolve(Number(m[1])));
    };
    const onExit = () => finish(() => reject(new Error(`docker-registry exited during start-up:\n${logs.text()}`)));
    const timer = setTimeout(() => finish(() => reject(new Error(`docker-registry did not start in ${timeoutMs} ms:\n${logs.text()}`))), timeoutMs);
    const finish = (settle: () => void) => {
      clearTimeout(timer);
      proc.stderr?.off('data', check);
      proc.off('exit', onExit);
      settle();
    };
    proc.stderr?.on('data', check);
    proc.once('exit', onExit);
    check();
  });
}

/** GET /v2/ until it answers 200 or 401 (both mean the API is up). */
async function waitForApi(url: string, ca: Buffer | undefined, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const status = await probe(`${url}/v2/`, ca).catch(() => 0);
    if (status === 200 || status === 401) return;
    if (Date.now() > deadline) throw new Error(`registry at ${url} did not answer /v2/ (last status ${status})`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

function probe(url: string, ca: Buffer | undefined): Promise<number> {
  return new Promise((resolve, reject) => {
    const client = url.startsWith('https:') ? https : http;
    const req = client.get(url, ca ? { ca } : {}, (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    req.on('error', reject);
  });
}

/** Kills the process group and waits until its stderr pipe closes: then nothing is left writing into the dir. */
async function killAndWait(entry: Running): Promise<void> {
  killGroup(entry.proc);
  await entry.closed;
}

// ─────────────────────────────────── public ───────────────────────────────────

interface AuthSetup {
  config?: object;
  issuer?: TokenIssuerHandle;
}

async function setUpAuth(dir: string, opts: RegistryOptions, users: Record<string, string>): Promise<AuthSetup> {
  if (opts.auth === 'htpasswd') {
    const file = path.join(dir, 'htpasswd');
    await writeHtpasswd(file, users);
    return { config: { htpasswd: { realm: 'berth-test-registry', path: file } } };
  }
  if (opts.auth === 'token') {
    const issuer = await startTokenIssuer(dir, users, opts.anonymousPull ?? false);
    const token = { realm: issuer.info.realm, service: TOKEN_SERVICE, issuer: TOKEN_ISSUER, rootcertbundle: issuer.certFile };
    return { config: { token }, issuer };
  }
  return {};
}

export async function startRegistry(opts: RegistryOptions = {}): Promise<Registry> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'berth-registry-'));
  const users = opts.auth && opts.auth !== 'none' ? { ...(opts.users ?? DEFAULT_USERS) } : {};
  let auth: AuthSetup = {};
  let entry: Running | undefined;
  const stop = async () => {
    if (entry) await killAndWait(entry);
    await auth.issuer?.close();
    if (entry) running.delete(entry);
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    const tls = opts.tls ? await makeServerTls(dir) : undefined;
    auth = await setUpAuth(dir, opts, users);
    const configFile = path.join(dir, 'config.yml');
    writeFileSync(configFile, JSON.stringify(registryConfig({ dir, tls: tls?.server, auth: auth.config }), null, 2));

    const proc = spawn('sh', ['-c', WATCHDOG, configFile], { detached: true, stdio: ['pipe', 'ignore', 'pipe'] });
    entry = { proc, dir, closed: new Promise((resolve) => proc.once('close', () => resolve())) };
    running.add(entry);
    const logs = tail(proc.stderr);
    const port = await waitForListening(proc, logs);

    const host = `127.0.0.1:${port}`;
    const url = `${tls ? 'https' : 'http'}://${host}`;
    await waitForApi(url, tls ? readFileSync(tls.caFile) : undefined);
    let stopped: Promise<void> | undefined;
    return {
      host,
      url,
      ...(tls ? { caFile: tls.caFile } : {}),
      users,
      ...(auth.issuer ? { tokenIssuer: auth.issuer.info } : {}),
      dir,
      logs: logs.text,
      stop: () => (stopped ??= stop()),
    };
  } catch (err) {
    await stop();
    throw err;
  }
}
