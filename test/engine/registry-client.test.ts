// The registry client against the real CNCF distribution registry
// (/usr/bin/docker-registry 2.8) started by the test harness: anonymous,
// htpasswd, token auth, TLS, and a registry that redirects blob downloads.
//
// Tampering follows moby's TestPullFailsWithAlteredManifest/Layer: the bytes
// in the registry's own storage are overwritten, so the real registry serves them.
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  copyFileSync,
  createReadStream,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import type { Readable } from 'node:stream';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isEngineError } from '../../src/errors.js';
import { ContentStore } from '../../src/engine/content/store.js';
import { parseReference } from '../../src/engine/reference.js';
import { decodeRegistryAuth } from '../../src/engine/registry/auth.js';
import { RegistryClient, type RegistryClientOptions } from '../../src/engine/registry/client.js';
import {
  formatPlatform,
  hostPlatform,
  MediaTypes,
  parseManifest,
  parsePlatform,
} from '../../src/engine/registry/manifest.js';
import { startRegistry, type Registry } from '../harness/registry.js';
import { buildImage, buildLayer, busyboxImage, pushImage, pushIndex, type Image } from '../harness/images.js';

const run = promisify(execFile);
const sha = (b: Buffer) => `sha256:${createHash('sha256').update(b).digest('hex')}`;

const cleanups: Array<() => unknown> = [];
const certsRoot = mkdtempSync(path.join(os.tmpdir(), 'berth-certs-'));
cleanups.push(() => rmSync(certsRoot, { recursive: true, force: true }));

/** A client that reads certificates only from our temp dir, never the host's. */
function client(opts: RegistryClientOptions = {}): RegistryClient {
  const c = new RegistryClient({ certsDirs: [certsRoot], ...opts });
  cleanups.push(() => c.close());
  return c;
}

async function started(opts: Parameters<typeof startRegistry>[0]): Promise<Registry> {
  const reg = await startRegistry(opts);
  cleanups.push(() => reg.stop());
  return reg;
}

afterAll(async () => {
  for (const c of cleanups.reverse()) await c();
});

async function readAll(r: Readable): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const c of r) chunks.push(c as Buffer);
  return Buffer.concat(chunks);
}

/** Where distribution's filesystem driver keeps a blob. */
function blobFile(reg: Registry, digest: string): string {
  const hex = digest.slice('sha256:'.length);
  return path.join(reg.dir, 'storage', 'docker', 'registry', 'v2', 'blobs', 'sha256', hex.slice(0, 2), hex, 'data');
}

/** Overwrites a stored blob with same-length bytes that differ. */
function tamper(reg: Registry, digest: string, change: (b: Buffer) => Buffer): void {
  const file = blobFile(reg, digest);
  const before = readFileSync(file);
  const after = change(Buffer.from(before));
  expect(after.length).toBe(before.length);
  expect(after.equals(before)).toBe(false);
  writeFileSync(file, after);
}

/** A small image of its own, so tampering with its blobs touches no other test. */
async function uniqueImage(label: string, format: 'docker' | 'oci' = 'docker'): Promise<Image> {
  const layer = await buildLayer([{ path: `${label}.txt`, content: `${label}\n` }]);
  return buildImage({ layers: [layer], config: { Cmd: ['/bin/sh'], Labels: { test: label } }, format });
}

const errorOf = async (p: Promise<unknown>) => {
  try {
    await p;
  } catch (e) {
    return e as Error & { kind?: string };
  }
  throw new Error('expected a rejection');
};

describe('anonymous registry over plain HTTP (loopback is insecure, as in dockerd)', () => {
  let reg: Registry;
  let busybox: Image;
  let pushed = '';
  const c = client();

  beforeAll(async () => {
    reg = await started({ auth: 'none' });
    busybox = await busyboxImage();
    pushed = await pushImage(reg, 'busybox', 'latest', busybox);
  });

  it('resolves by tag', async () => {
    const r = await c.resolve(`${reg.host}/busybox:latest`);
    expect(r.manifestDigest).toBe(pushed);
    expect(r.manifest.equals(busybox.manifestBytes)).toBe(true);
    expect(r.mediaType).toBe(MediaTypes.dockerManifest);
    expect(r.image.digest).toBe(pushed);
    expect(r.config.equals(busybox.configBytes)).toBe(true);
    expect(r.configDigest).toBe(busybox.configDigest);
    expect(r.configMediaType).toBe(MediaTypes.dockerConfig);
    expect(r.layers.map((l) => [l.digest, l.size])).toEqual(busybox.layers.map((l) => [l.digest, l.size]));
    expect(r.source).toBe(`http://${reg.host}`);
    expect(r.ref.familiar).toBe(`${reg.host}/busybox`);
  });

  it('resolves by digest (a parsed reference works as well as a string)', async () => {
    const r = await c.resolve(parseReference(`${reg.host}/busybox@${pushed}`));
    expect(r.manifestDigest).toBe(pushed);
    expect(r.configDigest).toBe(busybox.configDigest);
  });

  it('fetchBlob streams bytes that match the digest and size', async () => {
    const layer = busybox.layers[0]!;
    const bytes = await readAll(await c.fetchBlob(`${reg.host}/busybox`, layer));
    expect(bytes.length).toBe(layer.size);
    expect(sha(bytes)).toBe(layer.digest);
  });

  it('fetchBlob output goes through the content store’s verification', async () => {
    const root = mkdtempSync(path.join(os.tmpdir(), 'berth-store-'));
    cleanups.push(() => rmSync(root, { recursive: true, force: true }));
    const store = new ContentStore(root);
    await store.init();
    const layer = busybox.layers[0]!;
    const ref = parseReference(`${reg.host}/busybox`);
    await store.ingest(layer.digest, layer.size, () => c.fetchBlob(ref, layer), { what: 'filesystem layer' });
    expect(await store.size(layer.digest)).toBe(layer.size);
  });

  it('unknown tag → not-found in dockerd’s words', async () => {
    const err = await errorOf(c.resolve(`${reg.host}/busybox:nope`));
    expect(err.kind).toBe('not-found');
    expect(err.message).toBe(`manifest for ${reg.host}/busybox:nope not found: manifest unknown: manifest unknown`);
  });

  it('unknown repository → not-found in dockerd’s words for what distribution answers (MANIFEST_UNKNOWN)', async () => {
    const err = await errorOf(c.resolve(`${reg.host}/nothere:latest`));
    expect(err.kind).toBe('not-found');
    expect(err.message).toBe(`manifest for ${reg.host}/nothere:latest not found: manifest unknown: manifest unknown`);
  });

  it('missing blob → "unknown blob"', async () => {
    const err = await errorOf(c.fetchBlob(`${reg.host}/busybox`, { digest: sha(Buffer.from('not there')) }));
    expect(isEngineError(err, 'not-found')).toBe(true);
    expect(err.message).toBe('unknown blob');
  });

  it('unreachable registry → unavailable with the connect error', async () => {
    const err = await errorOf(c.resolve('127.0.0.1:1/x:latest'));
    expect(err.kind).toBe('unavailable');
    expect(err.message).toBe('Get "http://127.0.0.1:1/v2/": dial tcp 127.0.0.1:1: connect: connection refused');
  });
});

describe('manifest lists and OCI indexes', () => {
  let reg: Registry;
  const c = client();
  let amd64: Image;
  let arm64: Image;
  let armv6: Image;

  beforeAll(async () => {
    reg = await started({ auth: 'none' });
    amd64 = await busyboxImage({ architecture: 'amd64' });
    arm64 = await busyboxImage({ architecture: 'arm64', variant: 'v8' });
    armv6 = await busyboxImage({ architecture: 'arm', variant: 'v6' });
  });

  it.each(['docker', 'oci'] as const)('%s: picks the host platform and reports the index digest', async (format) => {
    const entries = [{ image: arm64 }, { image: amd64 }, { image: armv6 }];
    const digest = await pushIndex(reg, `multi-${format}`, 'latest', entries, format);
    const r = await c.resolve(`${reg.host}/multi-${format}:latest`, undefined, {
      platform: { os: 'linux', architecture: 'amd64' },
    });
    expect(r.manifestDigest).toBe(digest);
    expect(r.mediaType).toBe(format === 'oci' ? MediaTypes.ociIndex : MediaTypes.dockerList);
    expect(r.image.digest).toBe(amd64.digest);
    expect(r.configDigest).toBe(amd64.configDigest);
    expect(r.image.platform).toMatchObject({ os: 'linux', architecture: 'amd64' });
  });

  it('selects variants: arm64, and an arm/v7 host takes the v6 image', async () => {
    await pushIndex(reg, 'variants', 'latest', [{ image: amd64 }, { image: arm64 }, { image: armv6 }]);
    const ref = `${reg.host}/variants:latest`;
    expect((await c.resolve(ref, undefined, { platform: { os: 'linux', architecture: 'arm64' } })).image.digest).toBe(
      arm64.digest,
    );
    expect(
      (await c.resolve(ref, undefined, { platform: { os: 'linux', architecture: 'arm', variant: 'v7' } })).image.digest,
    ).toBe(armv6.digest);
    const err = await errorOf(c.resolve(ref, undefined, { platform: { os: 'linux', architecture: 's390x' } }));
    expect(err.kind).toBe('not-found');
    expect(err.message).toBe('no matching manifest for linux/s390x in the manifest list entries');
  });

  it('the host platform is the default', async () => {
    const host = process.arch === 'arm64' ? arm64 : amd64;
    await pushIndex(reg, 'hostdefault', 'latest', [{ image: amd64 }, { image: arm64 }]);
    expect((await c.resolve(`${reg.host}/hostdefault:latest`)).image.digest).toBe(host.digest);
  });

  it('resolves an index by its digest', async () => {
    const digest = await pushIndex(reg, 'bydigest', 'latest', [{ image: amd64 }, { image: arm64 }], 'oci');
    const r = await c.resolve(`${reg.host}/bydigest@${digest}`, undefined, {
      platform: { os: 'linux', architecture: 'arm64', variant: 'v8' },
    });
    expect(r.manifestDigest).toBe(digest);
    expect(r.image.digest).toBe(arm64.digest);
  });
});

describe('tampered content in the registry’s storage', () => {
  let reg: Registry;
  const c = client();

  beforeAll(async () => {
    reg = await started({ auth: 'none' });
  });

  it('tampered config → image config verification failed', async () => {
    const image = await uniqueImage('tampered-config');
    await pushImage(reg, 'tc', 'latest', image);
    tamper(reg, image.configDigest, (b) =>
      Buffer.from(b.toString('latin1').replace('tampered-config', 'TAMPERED-CONFIG'), 'latin1'),
    );
    const err = await errorOf(c.resolve(`${reg.host}/tc:latest`));
    expect(err.message).toBe(
      `error pulling image configuration: image config verification failed for digest ${image.configDigest}`,
    );
  });

  it('manifest altered and pulled by digest → manifest verification failed', async () => {
    const image = await uniqueImage('tampered-manifest');
    const digest = await pushImage(reg, 'tm', 'latest', image);
    // Still a manifest the registry can parse (it does so to serve it): only a size changes.
    tamper(reg, digest, (b) =>
      Buffer.from(
        b
          .toString('latin1')
          .replace(/"size":(\d+)/, (_m, n: string) => `"size":${n.slice(0, -1)}${(Number(n.at(-1)) + 1) % 10}`),
        'latin1',
      ),
    );
    const byDigest = await errorOf(c.resolve(`${reg.host}/tm@${digest}`));
    expect(byDigest.message).toBe(`manifest verification failed for digest ${digest}`);
    // By tag, the registry's Docker-Content-Digest is the digest the bytes must match.
    const byTag = await errorOf(c.resolve(`${reg.host}/tm:latest`));
    expect(byTag.message).toBe(`manifest verification failed for digest ${digest}`);
  });

  it('tampered layer: fetchBlob serves it, the content store refuses it', async () => {
    const image = await uniqueImage('tampered-layer');
    await pushImage(reg, 'tl', 'latest', image);
    const layer = image.layers[0]!;
    tamper(reg, layer.digest, (b) => {
      b[b.length - 1] = b[b.length - 1]! ^ 0xff;
      return b;
    });
    const root = mkdtempSync(path.join(os.tmpdir(), 'berth-store-'));
    cleanups.push(() => rmSync(root, { recursive: true, force: true }));
    const store = new ContentStore(root);
    await store.init();
    const ref = parseReference(`${reg.host}/tl`);
    const err = await errorOf(
      store.ingest(layer.digest, layer.size, () => c.fetchBlob(ref, layer), { what: 'filesystem layer' }),
    );
    expect(err.message).toBe(`filesystem layer verification failed for digest ${layer.digest}`);
    expect(await store.has(layer.digest)).toBe(false);
  });
});

describe('htpasswd (Basic) auth', () => {
  let reg: Registry;
  let digest = '';
  const c = client();
  const header = (cfg: object) => Buffer.from(JSON.stringify(cfg)).toString('base64url');

  beforeAll(async () => {
    reg = await started({ auth: 'htpasswd' });
    digest = await pushImage(reg, 'private/busybox', 'latest', await busyboxImage());
  });

  it('pulls with the credentials from X-Registry-Auth', async () => {
    const [username, password] = Object.entries(reg.users)[0]!;
    const auth = decodeRegistryAuth(header({ username, password, serveraddress: reg.host }));
    const r = await c.resolve(`${reg.host}/private/busybox:latest`, auth);
    expect(r.manifestDigest).toBe(digest);
    const bytes = await readAll(await c.fetchBlob(r.ref, r.layers[0]!, auth));
    expect(sha(bytes)).toBe(r.layers[0]!.digest);
  });

  it('anonymous → no basic auth credentials (unclassified, as dockerd: not a 401 the CLI would prompt on)', async () => {
    const err = await errorOf(c.resolve(`${reg.host}/private/busybox:latest`));
    expect(err.kind).toBe('system');
    expect(err.message).toBe(`Get "http://${reg.host}/v2/private/busybox/manifests/latest": no basic auth credentials`);
  });

  it('wrong password → unauthorized, naming the request the registry refused', async () => {
    const [username] = Object.keys(reg.users);
    const err = await errorOf(
      c.resolve(`${reg.host}/private/busybox:latest`, { username: username!, password: 'wrong' }),
    );
    expect(err.kind).toBe('unauthorized');
    expect(err.message).toBe(
      `Get "http://${reg.host}/v2/private/busybox/manifests/latest": unauthorized: authentication required`,
    );
  });
});

describe('token auth (Bearer, realm on another port)', () => {
  let reg: Registry;
  let digest = '';
  const c = client();

  beforeAll(async () => {
    reg = await started({ auth: 'token' });
    digest = await pushImage(reg, 'team/busybox', 'latest', await busyboxImage());
  });

  const creds = () => {
    const [username, password] = Object.entries(reg.users)[0]!;
    return { username, password };
  };

  it('gets a token with the credentials, once per scope', async () => {
    const before = reg.tokenIssuer!.requests.length;
    const r = await c.resolve(`${reg.host}/team/busybox:latest`, creds());
    expect(r.manifestDigest).toBe(digest);
    const bytes = await readAll(await c.fetchBlob(r.ref, r.layers[0]!, creds()));
    expect(sha(bytes)).toBe(r.layers[0]!.digest);
    await c.resolve(`${reg.host}/team/busybox:latest`, creds());
    const asked = reg.tokenIssuer!.requests.slice(before);
    expect(asked).toEqual([
      { method: 'GET', user: creds().username, scopes: ['repository:team/busybox:pull'], outcome: 'granted' },
    ]);
  });

  it('wrong password → unauthorized with the token server’s words', async () => {
    const err = await errorOf(c.resolve(`${reg.host}/team/busybox:latest`, { ...creds(), password: 'nope' }));
    expect(err.kind).toBe('unauthorized');
    expect(err.message).toBe(
      `Get "http://${reg.host}/v2/team/busybox/manifests/latest": unauthorized: incorrect username or password`,
    );
  });

  it('anonymous, with a token that grants nothing → pull access denied', async () => {
    const err = await errorOf(c.resolve(`${reg.host}/team/busybox:latest`));
    expect(err.kind).toBe('not-found');
    expect(err.message).toMatch(
      new RegExp(
        `^pull access denied for ${reg.host}/team/busybox, repository does not exist or may require 'docker login': `,
      ),
    );
  });

  it('uses a registrytoken as the bearer token, without asking the realm', async () => {
    const issued = reg.tokenIssuer!.requests;
    const { username, password } = creds();
    const basic = `Basic ${Buffer.from(`${username}:${password}`).toString('base64')}`;
    /** A token of the test's own asking, once the issuer (another process) has told of the request. */
    const ask = async (scope: string) => {
      const realm = new URL(reg.tokenIssuer!.realm);
      realm.searchParams.set('service', reg.tokenIssuer!.service);
      realm.searchParams.set('scope', scope);
      const told = issued.length;
      const res = await fetch(realm, { headers: { Authorization: basic } });
      const { token } = (await res.json()) as { token: string };
      while (!issued.slice(told).some((q) => q.scopes.includes(scope))) await new Promise((r) => setTimeout(r, 10));
      return token;
    };
    const token = await ask('repository:team/busybox:pull');
    const before = issued.length;
    const r = await client().resolve(`${reg.host}/team/busybox:latest`, { registrytoken: token });
    expect(r.manifestDigest).toBe(digest);
    // The issuer tells of requests in order: once it has told of this one, it has told of any the resolve made.
    await ask('repository:team/after-the-resolve:pull');
    expect(issued.slice(before).map((q) => q.scopes)).toEqual([['repository:team/after-the-resolve:pull']]);
  });
});

describe('TLS', () => {
  let reg: Registry;
  let digest = '';

  beforeAll(async () => {
    reg = await started({ auth: 'none', tls: true });
    digest = await pushImage(reg, 'secure/busybox', 'latest', await busyboxImage());
  });

  it('trusts the CA from <certsDir>/<host:port>/ca.crt', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'berth-certs-'));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    mkdirSync(path.join(dir, reg.host));
    copyFileSync(reg.caFile!, path.join(dir, reg.host, 'ca.crt'));
    const r = await client({ certsDirs: [path.join(dir, 'missing'), dir] }).resolve(
      `${reg.host}/secure/busybox:latest`,
    );
    expect(r.manifestDigest).toBe(digest);
    expect(r.source).toBe(`https://${reg.host}`);
  });

  it('a loopback registry without a configured CA is not verified (dockerd’s insecure default)', async () => {
    const r = await client().resolve(`${reg.host}/secure/busybox:latest`);
    expect(r.source).toBe(`https://${reg.host}`);
  });

  it('a configured CA that did not sign the certificate → a clear TLS error, no fallback to HTTP', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'berth-certs-'));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    mkdirSync(path.join(dir, reg.host));
    const other = path.join(dir, reg.host, 'ca.crt');
    await run('openssl', [
      'req',
      '-x509',
      '-newkey',
      'ec',
      '-pkeyopt',
      'ec_paramgen_curve:prime256v1',
      '-nodes',
      '-keyout',
      path.join(dir, 'k.pem'),
      '-out',
      other,
      '-days',
      '1',
      '-subj',
      '/CN=someone else',
    ]);
    const err = await errorOf(client({ certsDirs: [dir] }).resolve(`${reg.host}/secure/busybox:latest`));
    expect(err.kind).toBe('unavailable');
    expect(err.message).toContain(
      `Get "https://${reg.host}/v2/": tls: failed to verify certificate: x509: certificate signed by unknown authority`,
    );
    expect(err.message).toContain(`${dir}/${reg.host}/ca.crt`);
  });

  it('a client certificate without its key is refused with dockerd’s words', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'berth-certs-'));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    mkdirSync(path.join(dir, reg.host));
    writeFileSync(path.join(dir, reg.host, 'client.cert'), 'x');
    const err = await errorOf(client({ certsDirs: [dir] }).resolve(`${reg.host}/secure/busybox:latest`));
    expect(err.message).toBe(
      'missing key client.key for client certificate client.cert. CA certificates must use the extension .crt',
    );
  });
});

describe('mirrors for docker.io', () => {
  let mirror: Registry;
  let digest = '';

  beforeAll(async () => {
    mirror = await started({ auth: 'none' });
    digest = await pushImage(mirror, 'library/busybox', 'latest', await busyboxImage());
  });

  it('serves docker.io names from the first mirror that answers', async () => {
    const c = client({ mirrors: ['http://127.0.0.1:1', `${mirror.url}/`] });
    const r = await c.resolve('busybox');
    expect(r.manifestDigest).toBe(digest);
    expect(r.source).toBe(mirror.url);
    const bytes = await readAll(await c.fetchBlob('busybox', r.layers[0]!));
    expect(sha(bytes)).toBe(r.layers[0]!.digest);
  });
});

/** A second registry process over the same storage, with distribution's redirect middleware. */
async function startRedirectingRegistry(
  storage: string,
  htpasswd: string,
  baseurl: string,
): Promise<{ host: string; stop: () => void }> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'berth-redirect-'));
  const config = {
    version: '0.1',
    log: { level: 'info', formatter: 'text', accesslog: { disabled: true } },
    storage: { filesystem: { rootdirectory: storage }, maintenance: { uploadpurging: { enabled: false } } },
    middleware: { storage: [{ name: 'redirect', options: { baseurl } }] },
    http: { addr: '127.0.0.1:0', secret: 'redirect-test' },
    auth: { htpasswd: { realm: 'redirect-test', path: htpasswd } },
  };
  writeFileSync(path.join(dir, 'config.yml'), JSON.stringify(config));
  const proc: ChildProcess = spawn('/usr/bin/docker-registry', ['serve', path.join(dir, 'config.yml')], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  const stop = () => {
    proc.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  };
  let log = '';
  const port = await new Promise<number>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`registry did not start:\n${log}`)), 15_000);
    proc.stderr!.on('data', (c: Buffer) => {
      log += c.toString();
      const m = /listening on 127\.0\.0\.1:(\d+)/.exec(log);
      if (m) {
        clearTimeout(timer);
        resolve(Number(m[1]));
      }
    });
    proc.once('exit', () => reject(new Error(`registry exited:\n${log}`)));
  });
  return { host: `127.0.0.1:${port}`, stop };
}

describe('blob redirects to another host (S3-style storage)', () => {
  let reg: Registry;
  let image: Image;
  let redirecting: { host: string; stop: () => void };
  const seenAuth: Array<string | undefined> = [];
  const seenPaths: string[] = [];
  let hostile = false;
  let storageServer: http.Server;

  beforeAll(async () => {
    reg = await started({ auth: 'htpasswd' });
    image = await uniqueImage('redirected');
    await pushImage(reg, 'redir/app', 'latest', image);
    const storage = path.join(reg.dir, 'storage');
    // The "storage host": 127.0.0.2, another origin. It serves the registry's files and records what it was sent.
    storageServer = http.createServer((req, res) => {
      seenAuth.push(req.headers.authorization);
      seenPaths.push(req.url!);
      if (hostile) {
        // Asks for credentials at a realm of its own: the client must not take it up.
        const realm = `http://${req.headers.host}/evil-token`;
        return void res.writeHead(401, { 'WWW-Authenticate': `Bearer realm="${realm}",service="evil"` }).end();
      }
      const file = path.join(storage, decodeURIComponent(new URL(req.url!, 'http://x').pathname));
      if (!file.startsWith(storage + path.sep) || !existsSync(file)) return void res.writeHead(404).end();
      res.writeHead(200, { 'Content-Length': String(statSync(file).size) });
      createReadStream(file).pipe(res);
    });
    await new Promise<void>((r) => storageServer.listen(0, '127.0.0.2', r));
    cleanups.push(() => new Promise((r) => storageServer.close(r)));
    const baseurl = `http://127.0.0.2:${(storageServer.address() as AddressInfo).port}/`;
    redirecting = await startRedirectingRegistry(storage, path.join(reg.dir, 'htpasswd'), baseurl);
    cleanups.push(() => redirecting.stop());
  });

  it('follows the redirect and sends no Authorization to the other host', async () => {
    const [username, password] = Object.entries(reg.users)[0]!;
    const auth = { username, password };
    const c = client();
    const r = await c.resolve(`${redirecting.host}/redir/app:latest`, auth);
    expect(r.configDigest).toBe(image.configDigest); // the config blob came through the redirect too
    const layer = r.layers[0]!;
    const bytes = await readAll(await c.fetchBlob(r.ref, layer, auth));
    expect(sha(bytes)).toBe(layer.digest);
    expect(seenAuth.length).toBeGreaterThanOrEqual(2);
    expect(seenAuth.every((a) => a === undefined)).toBe(true);
  });

  it('ignores a challenge from the host it was redirected to', async () => {
    const [username, password] = Object.entries(reg.users)[0]!;
    const auth = { username, password };
    const c = client();
    const r = await c.resolve(`${redirecting.host}/redir/app:latest`, auth);
    hostile = true;
    try {
      const err = await errorOf(c.fetchBlob(r.ref, r.layers[0]!, auth));
      expect(err.kind).toBe('unauthorized');
    } finally {
      hostile = false;
    }
    expect(seenPaths.filter((p) => p.startsWith('/evil-token'))).toEqual([]);
    expect(seenAuth.every((a) => a === undefined)).toBe(true);
  });
});

describe('platforms', () => {
  it('maps the host to OCI names', () => {
    const p = hostPlatform();
    expect(p.os).toBe('linux');
    expect(p.architecture).toBe({ x64: 'amd64', arm64: 'arm64' }[process.arch as string] ?? p.architecture);
  });

  it.each([
    ['linux/amd64', 'linux/amd64'],
    ['linux/x86_64', 'linux/amd64'],
    ['linux/aarch64', 'linux/arm64'],
    ['linux/arm64/v8', 'linux/arm64'],
    ['linux/arm/v6', 'linux/arm/v6'],
    ['linux/armhf', 'linux/arm'],
    ['Linux/AMD64', 'linux/amd64'],
  ])('%s → %s', (input, shown) => {
    expect(formatPlatform(parsePlatform(input))).toBe(shown);
  });

  it.each([
    ['amd64', 'linux/amd64'],
    ['aarch64', 'linux/arm64'],
    ['windows', `windows/${hostPlatform().architecture}`],
    ['macos/arm64', 'darwin/arm64'],
    ['windows(10.0.17763+win32k)/amd64', 'windows/amd64'],
  ])('one word or an alias, as containerd reads it: %s → %s', (input, shown) => {
    expect(formatPlatform(parsePlatform(input))).toBe(shown);
  });

  it.each([
    ['foobar', '"foobar": unknown operating system or architecture: invalid argument'],
    ['linux/amd64/v1/extra', '"linux/amd64/v1/extra": cannot parse platform specifier: invalid argument'],
    ['linux/*', '"linux/*": wildcards not yet supported: invalid argument'],
    ['linux/am d64', '"am d64" is an invalid component of "linux/am d64": platform specifier component must match'],
    ['', '"" is an invalid OS component of "": OSAndVersion specifier component must match'],
    ['linux(%zz)/amd64', '"linux(%zz)/amd64" has an invalid OS option "%zz"'],
  ])("refuses %j in containerd's words", (input, message) => {
    expect(() => parsePlatform(input)).toThrow(message);
  });
});

describe('documents the real registry refuses to store (parsed directly)', () => {
  const desc = { mediaType: MediaTypes.dockerConfig, digest: `sha256:${'a'.repeat(64)}`, size: 1 };
  const doc = (o: object) => Buffer.from(JSON.stringify(o));

  it('refuses a document that is both an image and an index (CVE-2021-41190)', () => {
    const both = doc({ schemaVersion: 2, config: desc, layers: [], manifests: [] });
    expect(() => parseManifest(both, MediaTypes.ociManifest)).toThrow(/both "layers" and "manifests"/);
    expect(() => parseManifest(both, 'application/json')).toThrow(/CVE-2021-41190/);
  });

  it('refuses a mediaType that contradicts the Content-Type', () => {
    const m = doc({ schemaVersion: 2, mediaType: MediaTypes.ociManifest, config: desc, layers: [] });
    expect(() => parseManifest(m, MediaTypes.dockerManifest)).toThrow(
      `mediaType ${MediaTypes.ociManifest} contradicts the Content-Type ${MediaTypes.dockerManifest}`,
    );
    expect(parseManifest(m, `${MediaTypes.ociManifest}; charset=utf-8`).kind).toBe('manifest');
    expect(parseManifest(m, 'application/json').mediaType).toBe(MediaTypes.ociManifest);
  });

  it('refuses a shape that contradicts the Content-Type when no mediaType is declared', () => {
    const index = doc({ schemaVersion: 2, manifests: [] });
    expect(() => parseManifest(index, MediaTypes.ociManifest)).toThrow(/must not have "manifests"/);
    expect(parseManifest(index, MediaTypes.ociIndex).kind).toBe('index');
  });

  it('refuses schema 1 and unknown media types in dockerd’s words', () => {
    expect(() => parseManifest(doc({ schemaVersion: 1, name: 'x' }), 'application/json')).toThrow(
      'unsupported media type application/vnd.docker.distribution.manifest.v1+prettyjws',
    );
    expect(() => parseManifest(doc({ schemaVersion: 2, mediaType: 'application/x-foo' }), 'application/json')).toThrow(
      'unsupported media type application/x-foo',
    );
  });

  it('refuses bad descriptors', () => {
    expect(() =>
      parseManifest(
        doc({ schemaVersion: 2, config: { ...desc, digest: 'sha256:zz' }, layers: [] }),
        MediaTypes.ociManifest,
      ),
    ).toThrow(/config.digest/);
    expect(() =>
      parseManifest(doc({ schemaVersion: 2, config: { ...desc, size: -1 }, layers: [] }), MediaTypes.ociManifest),
    ).toThrow(/config.size/);
  });
});

describe('a registry that stalls (a real one cannot be made to; raw sockets stand in)', () => {
  const servers: Array<http.Server | net.Server> = [];
  const sockets = new Set<net.Socket>();
  afterAll(async () => {
    for (const s of sockets) s.destroy();
    await Promise.all(servers.map((s) => new Promise((r) => s.close(r))));
  });

  async function listen<T extends http.Server | net.Server>(server: T): Promise<string> {
    servers.push(server);
    server.on('connection', (s: net.Socket) => sockets.add(s));
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    return `127.0.0.1:${(server.address() as AddressInfo).port}`;
  }

  it('one that accepts and never answers times out, as unavailable', async () => {
    const host = await listen(net.createServer(() => {}));
    const started = Date.now();
    const err = await errorOf(client({ headerTimeoutMs: 300 }).resolve(`${host}/x:latest`));
    expect(err.kind).toBe('unavailable');
    expect(err.message).toBe(`Get "http://${host}/v2/": timeout awaiting response headers after 0.3s`);
    expect(Date.now() - started).toBeLessThan(5_000);
  });

  /** /v2/ answers; blobs send `sent` of `total` bytes at once, then nothing more. */
  const blobServer = (sent: number, total: number) =>
    http.createServer((req, res) => {
      if (req.url === '/v2/') return void res.writeHead(200, { 'Content-Type': 'application/json' }).end('{}');
      res.writeHead(200, { 'Content-Length': String(total) });
      res.write(Buffer.alloc(sent, 1));
      if (sent === total) res.end();
    });
  const digest = `sha256:${'0'.repeat(64)}`;

  it('a blob body that stops arriving errors the stream', async () => {
    const host = await listen(blobServer(10, 1000));
    const body = await client({ idleTimeoutMs: 300 }).fetchBlob(`${host}/x`, { digest });
    await expect(readAll(body)).rejects.toThrow(
      `Get "http://${host}/v2/x/blobs/${digest}": registry stalled: no data for 0.3s`,
    );
  });

  it('a slow reader is not mistaken for a stalled registry', async () => {
    const total = 4 * 1024 * 1024;
    const host = await listen(blobServer(total, total));
    const body = await client({ idleTimeoutMs: 200 }).fetchBlob(`${host}/x`, { digest });
    await new Promise((r) => setTimeout(r, 700)); // backpressure: the socket is quiet because we are
    expect((await readAll(body)).length).toBe(total);
  });
});
