// Starts the real CNCF distribution registry (Debian's `docker-registry`, 2.8)
// for tests: on a free 127.0.0.1 port, with its own temp storage, anonymous or
// with htpasswd or token auth, over plain HTTP or TLS (a CA made with openssl).
//
// No registry outlives the test process: each runs under a tiny shell watchdog
// that kills it when our stdin pipe to it closes — which the kernel does when
// this process dies, however it dies — and an exit hook kills them as well.
//
// Token auth: the registry's `auth.token` trusts the self-signed certificate
// of a signing key that fixtures/token-issuer.mjs (a separate process) signs
// its JWTs with; see that file for what distribution 2.8 wants in a token.
import { execFile, fork, spawn, type ChildProcess } from 'node:child_process';
import crypto from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const run = promisify(execFile);
const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

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
  /** Every call so far. Reported over IPC by the issuer process, so an entry can
   *  land a moment after the HTTP answer: poll (expect.poll) rather than read once. */
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
const LOG_TAIL_BYTES = 64 * 1024;

// ─────────────────────────────────── start-up ───────────────────────────────────

/** Subscribes to a readiness signal, calling done(value) once; returns an unsubscribe. */
type Watch<T> = (done: (value: T) => void) => () => void;

/** Waits for a child's readiness signal; fails if it exits first or takes too long. */
function startedUp<T>(proc: ChildProcess, what: string, logs: Tail, watch: Watch<T>, timeoutMs = 15_000): Promise<T> {
  return new Promise((resolve, reject) => {
    let settled = false;
    let unwatch: (() => void) | undefined;
    const finish = (settle: () => void) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      proc.off('exit', onExit);
      unwatch?.();
      settle();
    };
    const onExit = () => finish(() => reject(new Error(`${what} exited during start-up:\n${logs.text()}`)));
    const timer = setTimeout(
      () => finish(() => reject(new Error(`${what} did not start in ${timeoutMs} ms:\n${logs.text()}`))),
      timeoutMs,
    );
    proc.once('exit', onExit);
    unwatch = watch((value) => finish(() => resolve(value)));
    if (settled) unwatch(); // the signal was already there when we subscribed
  });
}

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

/** Remembers a child (started detached: it leads its own group) until it is gone. */
function track(proc: ChildProcess, dir: string): Running {
  const entry: Running = { proc, dir, closed: new Promise((resolve) => proc.once('close', () => resolve())) };
  running.add(entry);
  void entry.closed.then(() => running.delete(entry));
  return entry;
}

/** SIGKILL a child's whole process group (the watchdog shell and its registry). */
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
async function makeCert(
  dir: string,
  name: string,
  subject: string,
  extensions: string[],
  ca?: CertFiles,
): Promise<CertFiles> {
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
  const ca = await makeCert(path.join(dir, 'ca'), 'ca', '/CN=berth test CA', [
    'basicConstraints=critical,CA:TRUE',
    'keyUsage=critical,keyCertSign,cRLSign',
  ]);
  // Keep only the CA certificate in the trust directory: its key lives elsewhere.
  const caKey = path.join(dir, 'ca-private.key');
  writeFileSync(caKey, readFileSync(ca.key));
  rmSync(ca.key);
  const serverExt = [
    'subjectAltName=IP:127.0.0.1,DNS:localhost',
    'basicConstraints=CA:FALSE',
    'extendedKeyUsage=serverAuth',
  ];
  const server = await makeCert(path.join(dir, 'tls'), 'server', '/CN=localhost', serverExt, {
    cert: ca.cert,
    key: caKey,
  });
  return { caFile: ca.cert, server };
}

// ─────────────────────────────── token issuer ────────────────────────────────

// The issuer runs in its own process (see fixtures/token-issuer.mjs): a test
// blocked in execFileSync must not stall a token fetch that it waits for.
const TOKEN_ISSUER_SCRIPT = path.join(ROOT, 'fixtures/token-issuer.mjs');

type IssuerMessage = { type: 'ready'; url: string } | { type: 'request'; request: TokenRequest };

interface TokenIssuerHandle {
  info: TokenIssuer;
  certFile: string;
}

/** Registers a child of one registry, so that its stop() kills it. */
type Adopt = (proc: ChildProcess) => void;

/** The issuer's URL, from its { type: 'ready' } message. */
function issuerReady(proc: ChildProcess): Watch<string> {
  return (done) => {
    const onMessage = (m: IssuerMessage) => m.type === 'ready' && done(m.url);
    proc.on('message', onMessage);
    return () => proc.off('message', onMessage);
  };
}

async function startTokenIssuer(
  dir: string,
  users: Record<string, string>,
  anonymousPull: boolean,
  adopt: Adopt,
): Promise<TokenIssuerHandle> {
  const signer = await makeCert(path.join(dir, 'token'), 'signing', '/CN=berth test token signer', [
    'keyUsage=critical,digitalSignature',
  ]);
  const configFile = path.join(dir, 'token', 'issuer.json');
  const config = {
    users,
    keyFile: signer.key,
    certFile: signer.cert,
    service: TOKEN_SERVICE,
    issuer: TOKEN_ISSUER,
    anonymousPull,
  };
  writeFileSync(configFile, JSON.stringify(config), { mode: 0o600 });

  // detached: its own process group, so killGroup() works on it as on the registry.
  const proc = fork(TOKEN_ISSUER_SCRIPT, [configFile], { detached: true, stdio: ['ignore', 'ignore', 'pipe', 'ipc'] });
  adopt(proc);
  const requests: TokenRequest[] = [];
  proc.on('message', (m: IssuerMessage) => {
    if (m.type === 'request') requests.push(m.request);
  });
  const url = await startedUp(proc, 'token issuer', tail(proc.stderr), issuerReady(proc));
  return {
    info: { url, realm: `${url}/token`, service: TOKEN_SERVICE, issuer: TOKEN_ISSUER, requests },
    certFile: signer.cert,
  };
}

// ─────────────────────────────────── config ───────────────────────────────────

/** `htpasswd -Bbn` per user: bcrypt, the only hash distribution accepts. */
async function writeHtpasswd(file: string, users: Record<string, string>): Promise<void> {
  const lines: string[] = [];
  for (const [user, password] of Object.entries(users)) {
    lines.push((await run('htpasswd', ['-Bbn', user, password])).stdout.trim());
  }
  writeFileSync(file, `${lines.join('\n')}\n`, { mode: 0o600 });
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

// $0 is the config file, $1 the temp dir. The registry runs in the background
// (stdin from /dev/null); the shell waits on its own stdin, our pipe, and once
// that reaches EOF (we died without cleaning up) kills the registry and
// removes the temp dir. stop() kills both first, so this only runs on a crash.
const WATCHDOG = 'docker-registry serve "$0" & read -r _; kill -9 $! 2>/dev/null; wait; rm -rf "$1"';

interface Tail {
  text(): string;
}

/** A bounded tail of a stream's text. */
function tail(stream: NodeJS.ReadableStream | null): Tail {
  let text = '';
  stream?.on('data', (c: Buffer) => {
    text = (text + c.toString('utf8')).slice(-LOG_TAIL_BYTES);
    if (process.env.BERTH_TEST_LOGS) process.stderr.write(c);
  });
  return { text: () => text };
}

/** The port from the registry's "listening on 127.0.0.1:PORT" log line. */
function registryListening(proc: ChildProcess, logs: Tail): Watch<number> {
  return (done) => {
    const check = () => {
      const m = /listening on 127\.0\.0\.1:(\d+)/.exec(logs.text());
      if (m) done(Number(m[1]));
    };
    proc.stderr?.on('data', check);
    check();
    return () => proc.stderr?.off('data', check);
  };
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

async function setUpAuth(
  dir: string,
  opts: RegistryOptions,
  users: Record<string, string>,
  adopt: Adopt,
): Promise<AuthSetup> {
  if (opts.auth === 'htpasswd') {
    const file = path.join(dir, 'htpasswd');
    await writeHtpasswd(file, users);
    return { config: { htpasswd: { realm: 'berth-test-registry', path: file } } };
  }
  if (opts.auth === 'token') {
    const issuer = await startTokenIssuer(dir, users, opts.anonymousPull ?? false, adopt);
    const token = {
      realm: issuer.info.realm,
      service: TOKEN_SERVICE,
      issuer: TOKEN_ISSUER,
      rootcertbundle: issuer.certFile,
    };
    return { config: { token }, issuer };
  }
  return {};
}

export async function startRegistry(opts: RegistryOptions = {}): Promise<Registry> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'berth-registry-'));
  const users = opts.auth && opts.auth !== 'none' ? { ...(opts.users ?? DEFAULT_USERS) } : {};
  const children: Running[] = [];
  const adopt: Adopt = (proc) => void children.push(track(proc, dir));
  const stop = async () => {
    await Promise.all(children.map(killAndWait));
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    const tls = opts.tls ? await makeServerTls(dir) : undefined;
    const auth = await setUpAuth(dir, opts, users, adopt);
    const configFile = path.join(dir, 'config.yml');
    writeFileSync(configFile, JSON.stringify(registryConfig({ dir, tls: tls?.server, auth: auth.config }), null, 2));

    const proc = spawn('sh', ['-c', WATCHDOG, configFile, dir], { detached: true, stdio: ['pipe', 'ignore', 'pipe'] });
    adopt(proc);
    const logs = tail(proc.stderr);
    const port = await startedUp(proc, 'docker-registry', logs, registryListening(proc, logs));

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
