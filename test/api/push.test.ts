// Pushing images to real registries (CNCF distribution): pulled images go up
// byte for byte (same manifest digest), committed ones as Docker schema 2;
// blobs the registry has are skipped, blobs from another repository of the same
// registry mounted; Basic and token auth; a failing registry is retried.
// skopeo reads what berth pushed. Also GET /distribution/{name}/json.
import { execFile } from 'node:child_process';
import http from 'node:http';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startDaemon, type Daemon } from '../harness/daemon.js';
import { pull, removeAllContainers } from '../harness/env.js';
import { startFaultyRegistry } from '../harness/faulty-registry.js';
import { busyboxImage, largeImage, multiLayerImage, pushImage, pushIndex } from '../harness/images.js';
import { startRegistry, type Registry } from '../harness/registry.js';
import { demuxText } from '../harness/streams.js';

const run = promisify(execFile);

let d: Daemon;
let src: Registry;
let dst: Registry;
const extra: Registry[] = [];
/** The busybox the daemon pulled from src, and its manifest digest there. */
let busybox: string;
let busyboxDigest: string;

beforeAll(async () => {
  [src, dst] = await Promise.all([startRegistry(), startRegistry()]);
  busyboxDigest = await pushImage(src, 'busybox', 'latest', await busyboxImage());
  d = await startDaemon();
  busybox = `${src.host}/busybox:latest`;
  await pull(d, busybox);
});
afterAll(async () => {
  await removeAllContainers(d);
  await d?.cleanup();
  for (const r of [src, dst, ...extra]) await r?.stop();
});

type Message = {
  status?: string;
  id?: string;
  progressDetail?: { current?: number; total?: number };
  progress?: string;
  aux?: { Tag: string; Digest: string; Size: number };
  error?: string;
  errorDetail?: { message: string };
};

const lines = (text: string): Message[] =>
  text
    .trim()
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l));
const q = encodeURIComponent;
const b64 = (o: unknown) => Buffer.from(JSON.stringify(o)).toString('base64url');

async function tag(image: string, repo: string, t: string): Promise<void> {
  const r = await d.request('POST', `/images/${image}/tag?repo=${q(repo)}&tag=${t}`);
  expect(r.status, r.text).toBe(201);
}

/** POST /images/{name}/push; the messages of its stream. */
async function push(name: string, t?: string, headers: Record<string, string> = {}) {
  const r = await d.request('POST', `/v1.43/images/${name}/push${t ? `?tag=${t}` : ''}`, { headers });
  return { status: r.status, text: r.text, json: r.json, msgs: r.status === 200 ? lines(r.text) : [] };
}

/** Pushes and fails on an in-band error; the messages. */
async function pushOk(name: string, t?: string, headers?: Record<string, string>): Promise<Message[]> {
  const r = await push(name, t, headers);
  expect(r.status, r.text).toBe(200);
  const err = r.msgs.find((m) => m.error);
  expect(err, r.text).toBeUndefined();
  return r.msgs;
}

const statuses = (msgs: Message[]) => msgs.map((m) => m.status);
const digestOf = (msgs: Message[]) => msgs.find((m) => m.aux)!.aux!.Digest;

async function skopeo(args: string[]): Promise<string> {
  return (await run('skopeo', ['inspect', '--tls-verify=false', ...args])).stdout;
}

const inspect = async (image: string) => (await d.request('GET', `/images/${image}/json`)).json;

describe('push', () => {
  it("pushes a pulled image to another registry byte for byte, with dockerd's stream", async () => {
    const target = `${dst.host}/copy`;
    await tag(busybox, target, 'v1');
    const msgs = await pushOk(target, 'v1');
    expect(msgs[0]).toEqual({ status: `The push refers to repository [${target}]` });
    const layerId = expect.stringMatching(/^[0-9a-f]{12}$/);
    expect(msgs.find((m) => m.status === 'Preparing')).toEqual({
      status: 'Preparing',
      progressDetail: {},
      id: layerId,
    });
    const pushing = msgs.find((m) => m.status === 'Pushing')!;
    expect(pushing).toMatchObject({
      id: layerId,
      progressDetail: { current: expect.any(Number), total: expect.any(Number) },
    });
    expect(statuses(msgs)).toContain('Pushed');
    // The manifest is the one pulled: the same digest in the new registry.
    expect(msgs.at(-2)!.status).toMatch(new RegExp(`^v1: digest: ${busyboxDigest} size: \\d+$`));
    expect(msgs.at(-1)).toEqual({
      progressDetail: {},
      aux: { Tag: 'v1', Digest: busyboxDigest, Size: expect.any(Number) },
    });
    expect((await inspect(`${target}:v1`)).RepoDigests).toContain(`${target}@${busyboxDigest}`);
    // skopeo reads it, and sees the same manifest digest.
    const info = JSON.parse(await skopeo([`docker://${target}:v1`]));
    expect(info.Digest).toBe(busyboxDigest);
  });

  it('skips blobs the registry has: "Layer already exists"', async () => {
    const target = `${dst.host}/copy`;
    const msgs = await pushOk(target, 'v1');
    expect(statuses(msgs)).toContain('Layer already exists');
    expect(statuses(msgs)).not.toContain('Pushed');
    expect(digestOf(msgs)).toBe(busyboxDigest);
  });

  it('mounts a blob from the repository of the same registry it came from', async () => {
    const target = `${src.host}/team/busybox-copy`;
    await tag(busybox, target, 'latest');
    const msgs = await pushOk(target, 'latest');
    expect(statuses(msgs)).toContain('Mounted from busybox');
    expect(statuses(msgs)).not.toContain('Pushed');
    expect(digestOf(msgs)).toBe(busyboxDigest);
  });

  it('keeps an OCI image OCI, and pushes every tag of a repository without `tag`', async () => {
    const oci = await multiLayerImage({ format: 'oci' });
    const ociDigest = await pushImage(src, 'oci', 'latest', oci);
    await pull(d, `${src.host}/oci:latest`);
    const target = `${dst.host}/alltags`;
    await tag(`${src.host}/oci:latest`, target, 'a');
    await tag(busybox, target, 'b');
    const msgs = await pushOk(target);
    const done = msgs.filter((m) => m.aux).map((m) => m.aux);
    expect(done).toEqual([
      { Tag: 'a', Digest: ociDigest, Size: expect.any(Number) },
      { Tag: 'b', Digest: busyboxDigest, Size: expect.any(Number) },
    ]);
    const raw = JSON.parse(await skopeo(['--raw', `docker://${target}:a`]));
    expect(raw.mediaType).toBe('application/vnd.oci.image.manifest.v1+json');
  });

  it('pushes a committed image as Docker schema 2, which pulls back and runs', async () => {
    const c = await d.request('POST', '/v1.43/containers/create', {
      body: { Image: busybox, Cmd: ['sh', '-c', 'echo committed > /made.txt'] },
    });
    expect(c.status, c.text).toBe(201);
    await d.request('POST', `/containers/${c.json.Id}/start`);
    await d.request('POST', `/containers/${c.json.Id}/wait`);
    const target = `${dst.host}/committed`;
    const commit = await d.request('POST', `/v1.43/commit?container=${c.json.Id}&repo=${q(target)}&tag=v1`);
    expect(commit.status, commit.text).toBe(201);
    const msgs = await pushOk(target, 'v1');
    const raw = JSON.parse(await skopeo(['--raw', `docker://${target}:v1`]));
    expect(raw.mediaType).toBe('application/vnd.docker.distribution.manifest.v2+json');
    expect(raw.config).toMatchObject({
      mediaType: 'application/vnd.docker.container.image.v1+json',
      digest: commit.json.Id,
    });
    expect(raw.layers.at(-1).mediaType).toBe('application/vnd.docker.image.rootfs.diff.tar.gzip');
    const digest = digestOf(msgs);

    // A second berthd, that never saw the image, pulls it and runs it.
    const fresh = await startDaemon();
    try {
      await pull(fresh, `${target}:v1`);
      expect((await fresh.request('GET', `/images/${target}:v1/json`)).json).toMatchObject({
        Id: commit.json.Id,
        RepoDigests: [`${target}@${digest}`],
      });
      const r = await fresh.request('POST', '/v1.43/containers/create', {
        body: { Image: `${target}:v1`, Cmd: ['cat', '/made.txt'] },
      });
      await fresh.request('POST', `/containers/${r.json.Id}/start`);
      expect((await fresh.request('POST', `/containers/${r.json.Id}/wait`)).json.StatusCode).toBe(0);
      const logs = await fresh.request('GET', `/containers/${r.json.Id}/logs?stdout=1`);
      expect(demuxText(logs.body)).toBe('committed\n');
      await fresh.request('DELETE', `/containers/${r.json.Id}?force=1`);
    } finally {
      await fresh.stop();
      await fresh.cleanup();
    }
  });

  it('answers 404 for an image or tag it does not have, and pushes nothing', async () => {
    const none = await push(`${dst.host}/nothing-here`, 'latest');
    expect(none.status).toBe(404);
    expect(none.json.message).toBe(`An image does not exist locally with the tag: ${dst.host}/nothing-here`);
    const noTag = await push(`${dst.host}/copy`, 'nope');
    expect(noTag.status).toBe(404);
    expect(noTag.json.message).toBe(`tag does not exist: ${dst.host}/copy:nope`);
    const digest = await push(`${dst.host}/copy@${busyboxDigest}`);
    expect(digest.status).toBe(400);
  });

  it("takes `platform` from API 1.46: the image's own, or 404", async () => {
    const platform = (p: object) => `platform=${q(JSON.stringify(p))}`;
    const arm = await d.request(
      'POST',
      `/v1.46/images/${dst.host}/copy/push?tag=v1&${platform({ os: 'linux', architecture: 'arm64' })}`,
    );
    expect(arm.status).toBe(404);
    expect(arm.json.message).toBe(
      `image with reference ${dst.host}/copy:v1 was found but does not provide the specified platform (linux/arm64)`,
    );
    const bad = await d.request('POST', `/v1.46/images/${dst.host}/copy/push?tag=v1&${platform({ os: 'linux' })}`);
    expect(bad.status).toBe(400);
    expect(bad.json.message).toBe('both OS and Architecture must be provided');
    const own = await d.request(
      'POST',
      `/v1.46/images/${dst.host}/copy/push?tag=v1&${platform({ os: 'linux', architecture: 'amd64' })}`,
    );
    expect(lines(own.text).at(-1)!.aux!.Digest).toBe(busyboxDigest);
    // Below 1.46 dockerd does not read it.
    const old = await d.request(
      'POST',
      `/v1.45/images/${dst.host}/copy/push?tag=v1&${platform({ os: 'linux', architecture: 'arm64' })}`,
    );
    expect(lines(old.text).at(-1)!.aux!.Digest).toBe(busyboxDigest);
  });

  it('pushes to an htpasswd registry with X-Registry-Auth, and reports a refusal in the stream', async () => {
    const reg = await startRegistry({ auth: 'htpasswd' });
    extra.push(reg);
    const target = `${reg.host}/private`;
    await tag(busybox, target, 'latest');
    const anonymous = await push(target, 'latest');
    expect(anonymous.status).toBe(200);
    expect(anonymous.msgs[0]!.status).toBe(`The push refers to repository [${target}]`);
    expect(anonymous.msgs.at(-1)!.errorDetail!.message).toMatch(/no basic auth credentials/);
    const wrong = await push(target, 'latest', { 'X-Registry-Auth': b64({ username: 'berth', password: 'nope' }) });
    expect(wrong.msgs.at(-1)!.error).toMatch(/unauthorized/);
    const msgs = await pushOk(target, 'latest', { 'X-Registry-Auth': b64({ username: 'berth', password: 's3cret' }) });
    expect(digestOf(msgs)).toBe(busyboxDigest);
  });

  it('asks a token server for push,pull on the repository (and pull on a mount source)', async () => {
    const reg = await startRegistry({ auth: 'token' });
    extra.push(reg);
    const creds = { 'X-Registry-Auth': b64({ username: 'berth', password: 's3cret' }) };
    await pushOk(await tagged(reg, 'first'), 'latest', creds);
    const msgs = await pushOk(await tagged(reg, 'second'), 'latest', creds);
    expect(statuses(msgs)).toContain('Mounted from first');
    const scopes = reg.tokenIssuer!.requests.flatMap((r) => r.scopes);
    expect(scopes).toContain('repository:first:push,pull');
    expect(scopes).toContain('repository:second:push,pull');
    expect(scopes).toContain('repository:first:pull');
  });

  it('retries a registry that fails (5xx) and a connection that breaks', async () => {
    const front = await startFaultyRegistry(dst);
    try {
      const target = `${front.host}/flaky`;
      await tag(busybox, target, 'latest');
      const five = front.inject({
        method: 'PUT',
        path: /\/blobs\/uploads\//,
        fault: { kind: 'status', status: 503 },
        times: 1,
      });
      const reset = front.inject({
        method: 'HEAD',
        path: /\/blobs\//,
        fault: { kind: 'reset', afterBytes: 0 },
        times: 1,
      });
      const msgs = await pushOk(target, 'latest');
      expect(five.hits).toBe(1);
      expect(reset.hits).toBe(1);
      expect(statuses(msgs).some((s) => /^Retrying in \d+ seconds?$/.test(s ?? ''))).toBe(true);
      expect(digestOf(msgs)).toBe(busyboxDigest);
    } finally {
      await front.close();
    }
  });

  it('stops when its client hangs up, and pushes nothing', async () => {
    const front = await startFaultyRegistry(dst);
    try {
      const target = `${front.host}/abandoned`;
      await tag(busybox, target, 'latest');
      // A HEAD: a stalled request whose body the front does not read would not see its client go.
      const stall = front.inject({ method: 'HEAD', path: /\/blobs\//, fault: { kind: 'stall' } });
      const req = http.request({ socketPath: d.socket, method: 'POST', path: `/images/${target}/push?tag=latest` });
      req.on('error', () => undefined);
      req.end();
      await stall.hit();
      req.destroy();
      const held = () => front.requests.filter((r) => r.method === 'HEAD' && !r.closed).length;
      await expect.poll(held, { timeout: 10_000 }).toBe(0);
      // Nothing was pushed: the registry has no manifest for it.
      stall.remove();
      const r = await fetch(`${dst.url}/v2/abandoned/manifests/latest`);
      expect(r.status).toBe(404);
    } finally {
      await front.close();
    }
  });

  it('uploads a large blob in PATCH chunks', async () => {
    const big = await largeImage(40, 1);
    await pushImage(src, 'big', 'latest', big);
    await pull(d, `${src.host}/big:latest`);
    const front = await startFaultyRegistry(dst);
    try {
      const target = `${front.host}/big`;
      await tag(`${src.host}/big:latest`, target, 'latest');
      const msgs = await pushOk(target, 'latest');
      expect(digestOf(msgs)).toBe(big.digest);
      expect(front.count(/\/blobs\/uploads\//, 'PATCH')).toBeGreaterThanOrEqual(2);
    } finally {
      await front.close();
    }
  });
});

/** busybox tagged into `repo` of `reg`; the name to push. */
async function tagged(reg: Registry, repo: string): Promise<string> {
  await tag(busybox, `${reg.host}/${repo}`, 'latest');
  return `${reg.host}/${repo}`;
}

describe('GET /distribution/{name}/json', () => {
  it("describes an image manifest, with its config's platform", async () => {
    const r = await d.request('GET', `/v1.43/distribution/${busybox}/json`);
    expect(r.status, r.text).toBe(200);
    expect(r.json).toEqual({
      Descriptor: {
        mediaType: 'application/vnd.docker.distribution.manifest.v2+json',
        digest: busyboxDigest,
        size: expect.any(Number),
      },
      Platforms: [{ architecture: 'amd64', os: 'linux' }],
    });
  });

  it("describes an index with each entry's platform", async () => {
    const amd = await busyboxImage({ config: { Labels: { arch: 'amd64' } } });
    const arm = await busyboxImage({ architecture: 'arm64', variant: 'v8', config: { Labels: { arch: 'arm64' } } });
    const digest = await pushIndex(src, 'multi', 'latest', [{ image: amd }, { image: arm }], 'oci');
    const r = await d.request('GET', `/distribution/${src.host}/multi/json`);
    expect(r.status, r.text).toBe(200);
    expect(r.json.Descriptor).toMatchObject({ mediaType: 'application/vnd.oci.image.index.v1+json', digest });
    expect(r.json.Platforms).toEqual([
      { architecture: 'amd64', os: 'linux' },
      { architecture: 'arm64', os: 'linux', variant: 'v8' },
    ]);
  });

  it('answers 404 for an unknown tag and 401 without credentials a registry wants', async () => {
    const unknown = await d.request('GET', `/distribution/${src.host}/busybox:nope/json`);
    expect(unknown.status).toBe(404);
    const reg = await startRegistry({ auth: 'token' });
    extra.push(reg);
    await pushImage(reg, 'secret', 'latest', await busyboxImage());
    const anonymous = await d.request('GET', `/distribution/${reg.host}/secret:latest/json`);
    expect(anonymous.status).toBe(401);
    const withAuth = await d.request('GET', `/distribution/${reg.host}/secret:latest/json`, {
      headers: { 'X-Registry-Auth': b64({ username: 'berth', password: 's3cret' }) },
    });
    expect(withAuth.status, withAuth.text).toBe(200);
  });
});
