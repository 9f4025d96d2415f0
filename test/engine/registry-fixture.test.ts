// The test registry and the test images are real: a registry we start accepts
// what our own push client sends, and independent clients (skopeo, curl) read
// it back. Covers plain HTTP, htpasswd, TLS with our own CA, and token auth.
import { execFile, execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  busyboxImage,
  largeImage,
  listLayer,
  MediaTypes,
  multiLayerImage,
  pushImage,
  pushIndex,
  rawLayer,
  type Image,
} from '../harness/images.js';
import { startRegistry, type Registry, type RegistryOptions } from '../harness/registry.js';

const run = promisify(execFile);

interface Variant {
  name: string;
  opts: RegistryOptions;
}

const VARIANTS: Variant[] = [
  { name: 'plain', opts: {} },
  { name: 'htpasswd', opts: { auth: 'htpasswd' } },
  { name: 'tls', opts: { tls: true } },
  { name: 'token', opts: { auth: 'token' } },
];

/** null: anonymous. */
type Creds = { username: string; password: string } | null;

function firstUser(reg: Registry): Creds {
  const [entry] = Object.entries(reg.users);
  return entry ? { username: entry[0], password: entry[1] } : null;
}

interface SkopeoOptions {
  creds?: Creds;
  /** Flags that go before the subcommand (e.g. --override-arch). */
  global?: string[];
}

/** `skopeo inspect`: TLS verified with our CA when there is one, else plain HTTP. */
function skopeoInspect(reg: Registry, args: string[], opts: SkopeoOptions = {}) {
  const creds = opts.creds === undefined ? firstUser(reg) : opts.creds;
  const tls = reg.caFile ? ['--tls-verify=true', '--cert-dir', path.dirname(reg.caFile)] : ['--tls-verify=false'];
  const auth = creds ? ['--creds', `${creds.username}:${creds.password}`] : [];
  return run('skopeo', [...(opts.global ?? []), 'inspect', ...tls, ...auth, ...args]);
}

/** curl with our CA; headers (-D -) come first, then the body, then the status (-w). */
async function curl(
  reg: Registry,
  url: string,
  extra: string[] = [],
): Promise<{ status: number; body: string; headers: string }> {
  const ca = reg.caFile ? ['--cacert', reg.caFile] : [];
  const { stdout } = await run('curl', ['-sS', '-D', '-', '-w', '\n%{http_code}', ...ca, ...extra, url], {
    encoding: 'utf8',
  });
  const statusAt = stdout.lastIndexOf('\n');
  const response = stdout.slice(0, statusAt);
  const bodyAt = response.indexOf('\r\n\r\n');
  return {
    status: Number(stdout.slice(statusAt + 1)),
    headers: response.slice(0, bodyAt),
    body: response.slice(bodyAt + 4),
  };
}

/** The Authorization curl needs for a pull: Basic, or a token fetched from the realm with curl. */
async function pullAuth(reg: Registry, repo: string, creds: Creds): Promise<string[]> {
  if (!creds) return [];
  if (!reg.tokenIssuer) return ['-u', `${creds.username}:${creds.password}`];
  const { realm, service } = reg.tokenIssuer;
  const tokenUrl = `${realm}?service=${encodeURIComponent(service)}&scope=${encodeURIComponent(`repository:${repo}:pull`)}`;
  const answer = await curl(reg, tokenUrl, ['-u', `${creds.username}:${creds.password}`]);
  expect(answer.status).toBe(200);
  return ['-H', `Authorization: Bearer ${JSON.parse(answer.body).token}`];
}

const ACCEPT_ALL = [
  MediaTypes.dockerManifest,
  MediaTypes.dockerManifestList,
  MediaTypes.ociManifest,
  MediaTypes.ociIndex,
].join(', ');

async function getManifest(reg: Registry, repo: string, ref: string, creds: Creds = firstUser(reg)) {
  const auth = await pullAuth(reg, repo, creds);
  return curl(reg, `${reg.url}/v2/${repo}/manifests/${ref}`, ['-H', `Accept: ${ACCEPT_ALL}`, ...auth]);
}

/** Two platform images that share the busybox layer but differ in config. */
async function platformImages(format: 'docker' | 'oci'): Promise<Image[]> {
  return [await busyboxImage({ format }), await busyboxImage({ format, architecture: 'arm64', variant: 'v8' })];
}

describe.each(VARIANTS)('$name registry', ({ name, opts }) => {
  let reg: Registry;
  let busybox: Image;

  beforeAll(async () => {
    const t0 = performance.now();
    reg = await startRegistry(opts);
    console.log(`[${name}] registry up in ${(performance.now() - t0).toFixed(0)} ms at ${reg.url}`);
    busybox = await busyboxImage();
    const t1 = performance.now();
    await pushImage(reg, 'busybox', 'latest', busybox);
    console.log(`[${name}] busybox pushed in ${(performance.now() - t1).toFixed(0)} ms`);
  });
  afterAll(async () => {
    await reg?.stop();
  });

  it('serves the pushed busybox to skopeo', async () => {
    const { stdout } = await skopeoInspect(reg, [`docker://${reg.host}/busybox:latest`]);
    const info = JSON.parse(stdout);
    expect(info.Digest).toBe(busybox.digest);
    expect(info.Architecture).toBe('amd64');
    expect(info.Os).toBe('linux');
    expect(info.Layers).toEqual([busybox.layers[0]!.digest]);
    expect(info.Env).toContain('PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin');
  });

  it('serves the manifest to plain curl', async () => {
    const res = await getManifest(reg, 'busybox', 'latest');
    expect(res.status).toBe(200);
    expect(res.headers.toLowerCase()).toContain(`docker-content-digest: ${busybox.digest}`);
    expect(Buffer.from(res.body).equals(busybox.manifestBytes)).toBe(true);
  });

  // Auth-only checks exist only for the registries that have auth.
  if (opts.auth)
    it('rejects a wrong password with 401', async () => {
      const wrong = { username: 'berth', password: 'wrong' };
      if (reg.tokenIssuer) {
        const denied = await curl(reg, `${reg.tokenIssuer.realm}?service=x&scope=repository:busybox:pull`, [
          '-u',
          'berth:wrong',
        ]);
        expect(denied.status).toBe(401);
      } else {
        expect((await getManifest(reg, 'busybox', 'latest', wrong)).status).toBe(401);
      }
      await expect(skopeoInspect(reg, [`docker://${reg.host}/busybox:latest`], { creds: wrong })).rejects.toThrow();
      await expect(pushImage(reg, 'busybox', 'wrong', busybox, wrong)).rejects.toMatchObject({ status: 401 });
    });

  if (opts.auth)
    it('refuses anonymous pulls with 401', async () => {
      expect((await getManifest(reg, 'busybox', 'latest', null)).status).toBe(401);
      if (reg.tokenIssuer) {
        // The issuer hands anonymous callers a token for nothing; the registry still says 401.
        const res = await curl(
          reg,
          `${reg.tokenIssuer.realm}?service=${reg.tokenIssuer.service}&scope=repository:busybox:pull`,
        );
        expect(res.status).toBe(200);
        const token = JSON.parse(res.body).token as string;
        const claims = JSON.parse(Buffer.from(token.split('.')[1]!, 'base64url').toString('utf8'));
        expect(claims.access).toEqual([]);
        const pull = await curl(reg, `${reg.url}/v2/busybox/manifests/latest`, [
          '-H',
          `Authorization: Bearer ${token}`,
        ]);
        expect(pull.status).toBe(401);
        expect(reg.tokenIssuer.requests.map((r) => r.outcome)).toEqual(
          expect.arrayContaining(['granted', 'denied', 'anonymous']),
        );
      }
    });

  it.each(['docker', 'oci'] as const)('serves a pushed %s index that skopeo reads raw', async (format) => {
    const images = await platformImages(format);
    const digest = await pushIndex(
      reg,
      'multiarch',
      format,
      images.map((image) => ({ image })),
      format,
    );
    const { stdout } = await skopeoInspect(reg, ['--raw', `docker://${reg.host}/multiarch:${format}`]);
    const index = JSON.parse(stdout);
    expect(index.mediaType).toBe(format === 'oci' ? MediaTypes.ociIndex : MediaTypes.dockerManifestList);
    expect(index.manifests.map((m: { digest: string }) => m.digest)).toEqual(images.map((i) => i.digest));
    expect(index.manifests[1].platform).toEqual({ architecture: 'arm64', os: 'linux', variant: 'v8' });
    expect((await getManifest(reg, 'multiarch', digest)).status).toBe(200);
    // skopeo resolves the index to the child for a chosen platform (its Digest stays the index's).
    const arm = JSON.parse(
      (await skopeoInspect(reg, [`docker://${reg.host}/multiarch:${format}`], { global: ['--override-arch', 'arm64'] }))
        .stdout,
    );
    expect(arm).toMatchObject({ Digest: digest, Architecture: 'arm64', Layers: [images[1]!.layers[0]!.digest] });
  });
});

describe('registry lifecycle and token issuer', () => {
  it('stop() kills every process it started and removes the temp dir', async () => {
    const reg = await startRegistry({ auth: 'token', tls: true });
    const pids = () =>
      run('pgrep', ['-f', reg.dir]).then(
        (r) => r.stdout.trim().split('\n'),
        () => [],
      );
    expect((await pids()).length).toBeGreaterThanOrEqual(3); // watchdog sh, registry, token issuer
    await reg.stop();
    expect(await pids()).toEqual([]);
    expect(existsSync(reg.dir)).toBe(false);
  });

  it('issues tokens while the test process is blocked in execFileSync', async () => {
    const reg = await startRegistry({ auth: 'token' });
    try {
      await pushImage(reg, 'busybox', 'latest', await busyboxImage());
      const before = reg.tokenIssuer!.requests.length;
      // The issuer is its own process, so a synchronous client cannot deadlock it.
      const out = execFileSync(
        'skopeo',
        ['inspect', '--tls-verify=false', '--creds', 'berth:s3cret', `docker://${reg.host}/busybox:latest`],
        { encoding: 'utf8' },
      );
      expect(JSON.parse(out).Architecture).toBe('amd64');
      // Its request log arrives over IPC, once our event loop runs again.
      await expect.poll(() => reg.tokenIssuer!.requests.length).toBeGreaterThan(before);
      expect(reg.tokenIssuer!.requests.at(-1)).toMatchObject({
        method: 'GET',
        user: 'berth',
        scopes: ['repository:busybox:pull'],
        outcome: 'granted',
      });
    } finally {
      await reg.stop();
    }
  });

  it('lets anonymous callers pull, not push, with anonymousPull', async () => {
    const reg = await startRegistry({ auth: 'token', anonymousPull: true });
    try {
      const image = await busyboxImage();
      await pushImage(reg, 'public', 'latest', image);
      const info = JSON.parse(
        (await skopeoInspect(reg, [`docker://${reg.host}/public:latest`], { creds: null })).stdout,
      );
      expect(info.Digest).toBe(image.digest);
      await expect(pushImage(reg, 'public', 'anon', image, null)).rejects.toMatchObject({ status: 401 });
    } finally {
      await reg.stop();
    }
  });
});

describe('image builder', () => {
  it('gives the same digests for the same description', async () => {
    const [a, b] = [await multiLayerImage(), await multiLayerImage()];
    expect(a.digest).toBe(b.digest);
    expect(a.layers.map((l) => l.digest)).toEqual(b.layers.map((l) => l.digest));
  });

  it('writes whiteouts and opaque markers into the multi-layer image', async () => {
    const image = await multiLayerImage();
    expect(image.layers).toHaveLength(3);
    const top = (await listLayer(image.layers[2]!)).map((e) => e.name);
    expect(top).toEqual(
      expect.arrayContaining(['data/.wh.remove.txt', 'data/replace/.wh..wh..opq', 'bin/.wh.rev', 'data/change.txt']),
    );
    const middle = await listLayer(image.layers[1]!);
    expect(middle.find((e) => e.name === 'data/hard.txt')).toMatchObject({ type: 'link', linkname: 'data/keep.txt' });
    expect(middle.find((e) => e.name === 'data/link.txt')).toMatchObject({ type: 'symlink', linkname: 'keep.txt' });
  });

  it('lays out busybox with every applet and the users', async () => {
    const entries = await listLayer((await busyboxImage()).layers[0]!);
    const byName = new Map(entries.map((e) => [e.name, e]));
    for (const applet of ['sh', 'cat', 'ls', 'sleep', 'id', 'ps', 'grep', 'mount', 'stat', 'wc']) {
      expect(byName.get(`bin/${applet}`)).toMatchObject({ type: 'symlink', linkname: 'busybox' });
    }
    expect(byName.get('tmp/')?.mode).toBe(0o1777);
    expect(byName.get('bin/busybox')).toMatchObject({ type: 'file', mode: 0o755 });
    expect(byName.has('etc/passwd') && byName.has('etc/group')).toBe(true);
  });

  it('gives a busybox layer that GNU tar unpacks into a working root (chroot)', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'berth-rootfs-'));
    const blob = path.join(os.tmpdir(), `${path.basename(dir)}.tar.gz`);
    try {
      writeFileSync(blob, (await busyboxImage()).layers[0]!.blob!);
      await run('tar', ['-xzf', blob, '-C', dir]);
      const { stdout } = await run('chroot', [dir, '/bin/sh', '-c', 'echo hi; id -u app; stat -c %a /tmp']);
      expect(stdout.split('\n')).toEqual(['hi', '1000', '1777', '']);
    } finally {
      rmSync(dir, { recursive: true, force: true });
      rmSync(blob, { force: true });
    }
  });

  it('keeps hostile names verbatim in raw layers', async () => {
    const layer = await rawLayer([
      { name: '../escape', content: 'x' },
      { name: '/etc/abs', content: 'y' },
      { name: 'out', type: 'symlink', linkname: '/etc' },
      { name: 'hard', type: 'link', linkname: '../../etc/passwd' },
    ]);
    const entries = await listLayer(layer);
    expect(entries.map((e) => [e.name, e.linkname ?? null])).toEqual([
      ['../escape', null],
      ['/etc/abs', null],
      ['out', '/etc'],
      ['hard', '../../etc/passwd'],
    ]);
  });

  it('builds and pushes a 100 MiB image quickly', async () => {
    const reg = await startRegistry();
    try {
      const t0 = performance.now();
      const image = await largeImage(100, 4);
      const built = performance.now();
      await pushImage(reg, 'large', 'latest', image);
      const pushed = performance.now();
      console.log(`[large] built in ${(built - t0).toFixed(0)} ms, pushed in ${(pushed - built).toFixed(0)} ms`);
      const total = image.layers.reduce((n, l) => n + l.size, 0);
      expect(total).toBeGreaterThan(100 * 1024 * 1024);
      expect(image.layers.slice(1).every((l) => l.blob === undefined)).toBe(true);
      const info = JSON.parse((await skopeoInspect(reg, [`docker://${reg.host}/large:latest`])).stdout);
      expect(info.Digest).toBe(image.digest);
    } finally {
      await reg.stop();
    }
  });
});
