// Pulling and managing images against real registries: plain, htpasswd, token
// and TLS; by tag, digest and index; through a mirror; failures leave nothing.
import {
  existsSync,
  mkdirSync,
  copyFileSync,
  readdirSync,
  rmSync,
  statSync,
  writeFileSync,
  readFileSync,
} from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startDaemon, waitFor, type Daemon } from '../harness/daemon.js';
import { pull, removeAllContainers } from '../harness/env.js';
import {
  buildImage,
  buildLayer,
  busyboxImage,
  busyboxLayer,
  largeImage,
  multiLayerImage,
  pushImage,
  pushIndex,
  rawLayer,
} from '../harness/images.js';
import { startRegistry, type Registry } from '../harness/registry.js';
import { dockerCli } from '../harness/cli.js';
import { demuxText } from '../harness/streams.js';

let d: Daemon;
let plain: Registry;
const extra: Registry[] = [];

beforeAll(async () => {
  plain = await startRegistry();
  await pushImage(plain, 'busybox', 'latest', await busyboxImage());
  d = await startDaemon();
});
afterAll(async () => {
  await removeAllContainers(d);
  await d?.cleanup();
  await plain?.stop();
  for (const r of extra) await r.stop();
});

const lines = (text: string) =>
  text
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l));
const images = async () =>
  (await d.request('GET', '/v1.43/images/json')).json as { Id: string; RepoTags: string[]; RepoDigests: string[] }[];
const tagged = async (t: string) => (await images()).find((i) => i.RepoTags.includes(t));
const b64 = (o: unknown, urlSafe: boolean, pad: boolean) => {
  let s = Buffer.from(JSON.stringify(o)).toString(urlSafe ? 'base64url' : 'base64');
  if (!urlSafe && !pad) s = s.replace(/=+$/, '');
  if (urlSafe && pad) s += '='.repeat((4 - (s.length % 4)) % 4);
  return s;
};

/** Puts the registry's CA in berth's certs.d for the duration of `fn`. */
async function withTrustedCa(reg: Registry, fn: () => Promise<void>): Promise<void> {
  const certDir = path.join('/etc/berth/certs.d', reg.host);
  mkdirSync(certDir, { recursive: true });
  copyFileSync(reg.caFile!, path.join(certDir, 'ca.crt'));
  try {
    await fn();
  } finally {
    rmSync(certDir, { recursive: true, force: true });
  }
}

describe('pull', () => {
  it("streams dockerd's progress and lists the image", async () => {
    const ref = `${plain.host}/busybox`;
    const r = await d.request('POST', `/v1.43/images/create?fromImage=${ref}&tag=latest`);
    expect(r.status).toBe(200);
    expect(r.headers['content-type']).toBe('application/json');
    const msgs = lines(r.text);
    expect(msgs[0]).toEqual({ status: 'Pulling from busybox', id: 'latest' });
    const statuses = msgs.map((m) => m.status);
    for (const s of ['Pulling fs layer', 'Verifying Checksum', 'Download complete', 'Extracting', 'Pull complete'])
      expect(statuses).toContain(s);
    expect(msgs.find((m) => m.status === 'Pulling fs layer')).toMatchObject({
      progressDetail: {},
      id: expect.stringMatching(/^[0-9a-f]{12}$/),
    });
    expect(statuses.at(-2)).toMatch(/^Digest: sha256:[0-9a-f]{64}$/);
    expect(statuses.at(-1)).toBe(`Status: Downloaded newer image for ${ref}:latest`);
    const img = await tagged(`${ref}:latest`);
    expect(img).toMatchObject({
      Id: expect.stringMatching(/^sha256:[0-9a-f]{64}$/),
      ParentId: '',
      RepoDigests: [expect.stringMatching(new RegExp(`^${ref}@sha256:`))],
    });
    const again = lines((await d.request('POST', `/v1.43/images/create?fromImage=${ref}&tag=latest`)).text);
    expect(again.at(-1).status).toBe(`Status: Image is up to date for ${ref}:latest`);
    expect(again.map((m) => m.status)).toContain('Already exists');
  });

  it('pulls by digest and from a manifest list, picking linux/amd64', async () => {
    const amd = await busyboxImage({ config: { Labels: { arch: 'amd64' } } });
    const arm = await busyboxImage({ architecture: 'arm64', config: { Labels: { arch: 'arm64' } } });
    await pushIndex(plain, 'multi', 'latest', [{ image: arm }, { image: amd }]);
    await pull(d, `${plain.host}/multi:latest`);
    const inspect = await d.request('GET', `/images/${plain.host}/multi:latest/json`);
    expect(inspect.json).toMatchObject({ Architecture: 'amd64', Os: 'linux', Config: { Labels: { arch: 'amd64' } } });
    const digest = await pushImage(
      plain,
      'bydigest',
      'v1',
      await busyboxImage({ config: { Labels: { by: 'digest' } } }),
    );
    await pull(d, `${plain.host}/bydigest@${digest}`);
    const byDigest = (await images()).find((i) => i.RepoDigests.includes(`${plain.host}/bydigest@${digest}`));
    expect(byDigest).toBeDefined();
    // No tag: no names in RepoTags from API 1.43 (dockerd's <none>:<none> before).
    expect(byDigest!.RepoTags).toEqual([]);
  });

  it('answers unknown tags and repositories with 404 and lists nothing', async () => {
    const before = (await images()).length;
    const tag = await d.request('POST', `/images/create?fromImage=${plain.host}/busybox&tag=nope`);
    expect(tag.status).toBe(404);
    expect(tag.json.message).toMatch(/manifest unknown/);
    const repo = await d.request('POST', `/images/create?fromImage=${plain.host}/no-such-repo&tag=latest`);
    expect(repo.status).toBe(404);
    expect((await images()).length).toBe(before);
    const bad = await d.request('POST', '/images/create?fromImage=Bad/Name');
    expect(bad.status).toBe(400);
    expect(bad.json.message).toMatch(/invalid reference format/);
  });

  it('extracts whiteouts and opaque directories so a container sees the merged tree', async () => {
    const img = await multiLayerImage();
    await pushImage(plain, 'multilayer', 'latest', img);
    await pull(d, `${plain.host}/multilayer:latest`);
    const files = Object.keys(img.expected.files);
    const script = [
      ...files.map((f) => `printf '%s=' ${f}; cat ${f}; echo`),
      ...img.expected.absent.map((f) => `test -e ${f} && echo PRESENT ${f} || true`),
    ].join('; ');
    const c = await d.request('POST', '/containers/create', {
      body: { Image: `${plain.host}/multilayer:latest`, Cmd: ['sh', '-c', script] },
    });
    await d.request('POST', `/containers/${c.json.Id}/start`);
    await d.request('POST', `/containers/${c.json.Id}/wait`);
    const out = (await d.request('GET', `/containers/${c.json.Id}/logs?stdout=1`)).body;
    const text = demuxText(out);
    for (const [f, content] of Object.entries(img.expected.files)) expect(text).toContain(`${f}=${content}`);
    expect(text).not.toMatch(/PRESENT/);
  });
});

describe('platform=', () => {
  it("pulls the platform asked for from an index, and refuses an unparsable one in containerd's words without asking the registry", async () => {
    const amd = await busyboxImage({ config: { Labels: { arch: 'amd64' } } });
    const arm = await busyboxImage({ architecture: 'arm64', config: { Labels: { arch: 'arm64' } } });
    await pushIndex(plain, 'plat', 'latest', [{ image: amd }, { image: arm }]);
    const ok = await d.request(
      'POST',
      `/v1.41/images/create?fromImage=${plain.host}/plat&tag=latest&platform=linux/arm64`,
    );
    expect(ok.status, ok.text).toBe(200);
    const inspect = await d.request('GET', `/images/${plain.host}/plat:latest/json`);
    expect(inspect.json).toMatchObject({ Architecture: 'arm64', Config: { Labels: { arch: 'arm64' } } });
    // Nothing listens on port 1: a pull that went to the registry would say so instead.
    for (const [platform, message] of [
      ['foobar', '"foobar": unknown operating system or architecture: invalid argument'],
      ['linux/amd64/v1/extra', '"linux/amd64/v1/extra": cannot parse platform specifier: invalid argument'],
      ['linux/*', '"linux/*": wildcards not yet supported: invalid argument'],
    ]) {
      const bad = await d.request(
        'POST',
        `/v1.41/images/create?fromImage=127.0.0.1:1/x&platform=${encodeURIComponent(platform!)}`,
      );
      expect(bad.status, platform).toBe(400);
      expect(bad.json.message).toBe(message);
      const imported = await d.request('POST', `/v1.41/images/create?fromSrc=-&platform=${platform}`, { body: '' });
      expect(imported.status, platform).toBe(400);
      expect(imported.json.message).toBe(message);
    }
  });

  it("refuses an import for another OS before reading the body (dockerd's CheckOS)", async () => {
    const windows = await d.request('POST', '/v1.41/images/create?fromSrc=-&platform=windows/amd64', { body: '' });
    expect([windows.status, windows.json.message]).toEqual([400, 'operating system is not supported']);
  });

  it('creates only from an image of the platform asked for (404 otherwise, as dockerd), from API 1.41', async () => {
    const src = `${plain.host}/busybox:latest`;
    await pull(d, src);
    const create = (platform: string, version = '1.41') =>
      d.request('POST', `/v${version}/containers/create?platform=${encodeURIComponent(platform)}`, {
        body: { Image: src, Cmd: ['true'] },
      });
    const foreign = await create('linux/arm64');
    expect(foreign.status).toBe(404);
    expect(foreign.json.message).toBe(
      `image with reference ${src} was found but does not match the specified platform: wanted linux/arm64, actual: linux/amd64`,
    );
    for (const same of ['linux/amd64', 'linux', 'amd64', 'linux/x86_64']) {
      const r = await create(same);
      expect(r.status, same).toBe(201);
      await d.request('DELETE', `/containers/${r.json.Id}`);
    }
    expect((await create('foobar')).json.message).toContain('unknown operating system or architecture');
    // dockerd reads no platform from an older client.
    const old = await create('linux/arm64', '1.40');
    expect(old.status).toBe(201);
    await d.request('DELETE', `/containers/${old.json.Id}`);
  });

  it('docker create --platform pulls the platform asked for when the local image is of another', async () => {
    const docker = dockerCli(d);
    const amd = await busyboxImage({ config: { Labels: { arch: 'amd64' } } });
    const arm = await busyboxImage({ architecture: 'arm64', config: { Labels: { arch: 'arm64' } } });
    const ref = `${plain.host}/cliplat:latest`;
    await pushIndex(plain, 'cliplat', 'latest', [{ image: amd }, { image: arm }]);
    await pull(d, ref);
    const r = await docker(['create', '--platform', 'linux/arm64', ref, 'true']);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toContain(`Unable to find image '${ref}' locally`);
    const arch = await docker(['image', 'inspect', '--format', '{{.Architecture}}', ref]);
    expect(arch.stdout.trim()).toBe('arm64');
    await docker(['rm', r.stdout.trim()]);
    const bad = await docker(['pull', '--platform', 'foobar', ref]);
    expect(bad.code).not.toBe(0);
    expect(bad.stderr).toContain('unknown operating system or architecture');
  });
});

describe('credentials', () => {
  it('pulls through Basic auth with X-Registry-Auth in all four base64 forms, and refuses wrong ones', async () => {
    const reg = await startRegistry({ auth: 'htpasswd' });
    extra.push(reg);
    await pushImage(reg, 'secret', 'latest', await busyboxImage({ config: { Labels: { secret: 'yes' } } }));
    const good = { username: 'berth', password: 's3cret', serveraddress: reg.host };
    const before = (await images()).length;
    const wrong = await d.request('POST', `/images/create?fromImage=${reg.host}/secret&tag=latest`, {
      headers: { 'X-Registry-Auth': b64({ ...good, password: 'nope' }, true, true) },
    });
    expect(wrong.status).toBe(401);
    expect(wrong.json.message).toMatch(/unauthorized|authentication required|incorrect/i);
    // No credentials at all: dockerd's 500, not a 401 (the docker CLI answers a 401 with a login prompt).
    const none = await d.request('POST', `/images/create?fromImage=${reg.host}/secret&tag=latest`);
    expect(none.status).toBe(500);
    expect(none.json.message).toMatch(/no basic auth credentials$/);
    expect((await images()).length).toBe(before);
    for (const [urlSafe, pad] of [
      [false, true],
      [false, false],
      [true, true],
      [true, false],
    ] as const) {
      await pull(d, `${reg.host}/secret:latest`, { 'X-Registry-Auth': b64(good, urlSafe, pad) });
    }
    expect(await tagged(`${reg.host}/secret:latest`)).toBeDefined();
    // The credentials never reach the log.
    expect(d.stderr()).not.toContain('s3cret');
    expect(d.stderr()).not.toContain(b64(good, true, true));
  });

  it('pulls through Bearer-token auth', async () => {
    const reg = await startRegistry({ auth: 'token' });
    extra.push(reg);
    await pushImage(reg, 'tok', 'latest', await busyboxImage({ config: { Labels: { tok: 'yes' } } }));
    // dockerd's answer to an anonymous pull the token service grants nothing: 404, "pull access denied".
    const anon = await d.request('POST', `/images/create?fromImage=${reg.host}/tok&tag=latest`);
    expect(anon.status).toBe(404);
    expect(anon.json.message).toMatch(
      /^pull access denied for .*tok, repository does not exist or may require 'docker login'/,
    );
    await pull(d, `${reg.host}/tok:latest`, {
      'X-Registry-Auth': b64({ username: 'berth', password: 's3cret' }, false, true),
    });
    expect(await tagged(`${reg.host}/tok:latest`)).toBeDefined();
    expect(
      reg.tokenIssuer!.requests.some(
        (q) => q.outcome === 'granted' && q.scopes.some((s) => s.includes('repository:tok:pull')),
      ),
    ).toBe(true);
  });

  it('pulls over TLS with the CA in certs.d', async () => {
    const reg = await startRegistry({ tls: true });
    extra.push(reg);
    await pushImage(reg, 'tls', 'latest', await busyboxImage({ config: { Labels: { tls: 'yes' } } }));
    // A loopback registry is tried over HTTPS first; the CA must be trusted.
    await withTrustedCa(reg, async () => {
      await pull(d, `${reg.host}/tls:latest`);
      expect(await tagged(`${reg.host}/tls:latest`)).toBeDefined();
    });
  });

  it('pulls a short name through a registry mirror', async () => {
    const mirror = await startRegistry();
    extra.push(mirror);
    await pushImage(
      mirror,
      'library/mirrored',
      'latest',
      await busyboxImage({ config: { Labels: { mirror: 'yes' } } }),
    );
    const m = await startDaemon({ args: ['--registry-mirror', mirror.url] });
    try {
      const r = await m.request('POST', '/images/create?fromImage=mirrored&tag=latest');
      expect(r.status).toBe(200);
      expect(lines(r.text).at(-1).status).toBe('Status: Downloaded newer image for mirrored:latest');
      const list = (await m.request('GET', '/images/json')).json;
      expect(list[0].RepoTags).toEqual(['mirrored:latest']);
    } finally {
      await m.cleanup();
    }
  });
});

describe('hostile and broken content', () => {
  it('contains a traversal layer and touches nothing outside the data root', async () => {
    const victimDir = path.join(os.tmpdir(), `berth-victim-${process.pid}`);
    mkdirSync(victimDir, { recursive: true });
    writeFileSync(path.join(victimDir, 'hello'), 'victim');
    const before = statSync(path.join(victimDir, 'hello')).mtimeMs;
    const evil = await rawLayer([
      { name: `../../../../../../../..${victimDir}/pwned`, content: 'x' },
      { name: 'escape', type: 'symlink', linkname: victimDir },
      { name: 'escape/pwned2', content: 'x' },
      { name: 'hl', type: 'link', linkname: `${victimDir}/hello` },
    ]);
    const img = buildImage({ layers: [await busyboxLayer(), evil] });
    await pushImage(plain, 'evil', 'latest', img);
    const r = await d.request('POST', `/images/create?fromImage=${plain.host}/evil&tag=latest`);
    // Either refused or contained; in no case did a file appear beside the victim.
    expect(readdirSync(victimDir)).toEqual(['hello']);
    expect(readFileSync(path.join(victimDir, 'hello'), 'utf8')).toBe('victim');
    expect(statSync(path.join(victimDir, 'hello')).mtimeMs).toBe(before);
    if (lines(r.text).at(-1).error) expect(await tagged(`${plain.host}/evil:latest`)).toBeUndefined();
    rmSync(victimDir, { recursive: true, force: true });
  });

  it('refuses a tampered layer blob and lists nothing', async () => {
    const layer = await buildLayer([{ path: 'data.txt', content: 'original' }]);
    const img = buildImage({ layers: [await busyboxLayer(), layer] });
    await pushImage(plain, 'tampered', 'latest', img);
    const hex = layer.digest.slice('sha256:'.length);
    const blob = path.join(plain.dir, 'storage', 'docker/registry/v2/blobs/sha256', hex.slice(0, 2), hex, 'data');
    expect(existsSync(blob)).toBe(true);
    const other = await buildLayer([{ path: 'data.txt', content: 'tampered' }]);
    writeFileSync(blob, other.blob!);
    const r = await d.request('POST', `/images/create?fromImage=${plain.host}/tampered&tag=latest`);
    const last = lines(r.text).at(-1);
    expect(last.error).toMatch(/verification failed|digest/);
    expect(last.errorDetail.message).toBe(last.error);
    expect(await tagged(`${plain.host}/tampered:latest`)).toBeUndefined();
    // Nothing of the failed pull stays in the content store either.
    const blobs = path.join(d.dataRoot, 'content/blobs/sha256');
    for (const digest of [img.configDigest, img.digest, layer.digest])
      expect(existsSync(path.join(blobs, digest.slice(7))), digest).toBe(false);
    // The daemon keeps serving.
    expect((await d.request('GET', '/_ping')).status).toBe(200);
  });

  it('leaves no listed image when killed mid-pull, and the next pull completes', async () => {
    await pushImage(plain, 'large', 'latest', await largeImage(48, 3));
    const k = await startDaemon();
    try {
      const url = `/images/create?fromImage=${plain.host}/large&tag=latest`;
      const pending = k.request('POST', url).catch(() => undefined);
      await waitFor(
        () =>
          existsSync(path.join(k.dataRoot, 'layers/tmp')) &&
          readdirSync(path.join(k.dataRoot, 'layers/tmp')).length > 0,
        'a layer being extracted',
        20_000,
        5,
      );
      await k.kill();
      await pending;
      await k.restart();
      expect((await k.request('GET', '/images/json')).json).toEqual([]);
      expect(readdirSync(path.join(k.dataRoot, 'layers/tmp'))).toEqual([]);
      await pull(k, `${plain.host}/large:latest`);
      expect((await k.request('GET', '/images/json')).json).toHaveLength(1);
    } finally {
      await k.cleanup();
    }
  });
});

describe('tag, inspect, history, remove, prune', () => {
  it('tags, untags and deletes, with 409 while a container uses the image', async () => {
    const src = `${plain.host}/busybox:latest`;
    await pull(d, src);
    const t = await d.request('POST', `/images/${src}/tag?repo=mine/box&tag=v1`);
    expect(t.status).toBe(201);
    const id = (await tagged(src))!.Id;
    expect((await tagged('mine/box:v1'))!.Id).toBe(id);
    const inspect = await d.request('GET', '/images/mine/box:v1/json');
    expect(inspect.json).toMatchObject({
      Id: id,
      RootFS: { Type: 'layers', Layers: [expect.stringMatching(/^sha256:/)] },
      Os: 'linux',
      Config: { Cmd: ['sh'] },
    });
    // Docker's whole container.Config, as dockerd up to API 1.49 gives it: fields the image
    // config leaves out read as their zero values (Nomad's docker driver reads Config.User).
    expect(inspect.json.Config).toMatchObject({
      Hostname: '',
      User: '',
      Tty: false,
      WorkingDir: '',
      Entrypoint: null,
      Labels: null,
    });
    const history = await d.request('GET', '/images/mine/box:v1/history');
    expect(history.json[0]).toMatchObject({ Id: id, Tags: expect.arrayContaining(['mine/box:v1']) });
    // Untag one of two names.
    const ambiguous = await d.request('POST', `/images/${src}/tag?repo=sha256&tag=sometag`);
    expect(ambiguous.status).toBe(400);
    expect(ambiguous.json.message).toBe('refusing to create an ambiguous tag using digest algorithm as name');
    const untag = await d.request('DELETE', '/images/mine/box:v1');
    expect(untag.json).toEqual([{ Untagged: 'mine/box:v1' }]);
    // A container pins the image.
    const c = await d.request('POST', '/containers/create', {
      body: { Image: `sha256:${id.slice(7)}`, Cmd: ['true'] },
    });
    expect(c.status).toBe(201);
    const byId = await d.request('DELETE', `/images/${id}`);
    expect(byId.status).toBe(409);
    expect(byId.json.message).toMatch(/image is being used by stopped container/);
    await d.request('DELETE', `/containers/${c.json.Id}`);
    const del = await d.request('DELETE', `/images/${id}?force=1`);
    expect(del.status).toBe(200);
    expect(del.json).toEqual(expect.arrayContaining([{ Deleted: id }]));
    expect(await tagged(src)).toBeUndefined();
    expect((await d.request('GET', `/images/${id}/json`)).status).toBe(404);
  });

  it('prunes dangling images and filters the list', async () => {
    const digest = await pushImage(plain, 'dangle', 'v1', await busyboxImage({ config: { Labels: { dangle: '1' } } }));
    await pull(d, `${plain.host}/dangle@${digest}`);
    const dangling = (await d.request('GET', `/images/json?filters=${encodeURIComponent('{"dangling":["true"]}')}`))
      .json;
    expect(
      dangling.some((i: { RepoDigests: string[] }) => i.RepoDigests.includes(`${plain.host}/dangle@${digest}`)),
    ).toBe(true);
    const byLabel = (await d.request('GET', `/images/json?filters=${encodeURIComponent('{"label":["dangle=1"]}')}`))
      .json;
    expect(byLabel).toHaveLength(1);
    const badFilter = await d.request('GET', `/images/json?filters=${encodeURIComponent('{"nope":["x"]}')}`);
    expect(badFilter.status).toBe(400);
    expect(badFilter.json.message).toBe("invalid filter 'nope'");
    const pruned = await d.request('POST', '/images/prune');
    expect(pruned.status).toBe(200);
    expect(pruned.json.ImagesDeleted).toEqual(expect.arrayContaining([{ Deleted: byLabel[0].Id }]));
    expect(pruned.json.SpaceReclaimed).toBeGreaterThan(0);
  });
});

describe('list', () => {
  it('counts the bytes each image shares with others when asked (shared-size)', async () => {
    const base = await busyboxLayer();
    const own = async (name: string) => buildLayer([{ path: `etc/${name}`, content: `${name}\n`.repeat(500) }]);
    const refs: Record<string, string> = {};
    for (const [name, layers] of [
      ['shares-a', [base, await own('a')]],
      ['shares-b', [base, await own('b')]],
      ['alone', [await own('alone')]],
    ] as const) {
      await pushImage(plain, name, 'v1', buildImage({ layers: [...layers] }));
      refs[name] = `${plain.host}/${name}:v1`;
      await pull(d, refs[name]);
    }
    await pull(d, `${plain.host}/busybox:latest`);
    refs.busybox = `${plain.host}/busybox:latest`;
    const list = async (url: string) => {
      const all = (await d.request('GET', url)).json as { RepoTags: string[]; Size: number; SharedSize: number }[];
      return Object.fromEntries(
        Object.entries(refs).map(([k, ref]) => [k, all.find((i) => i.RepoTags.includes(ref))!]),
      );
    };

    const counted = await list('/images/json?shared-size=1');
    // busybox's one layer is in all three of busybox, shares-a and shares-b.
    expect(counted.busybox!.SharedSize).toBe(counted.busybox!.Size);
    expect(counted['shares-a']!.SharedSize).toBe(counted.busybox!.Size);
    expect(counted['shares-b']!.SharedSize).toBe(counted.busybox!.Size);
    expect(counted['shares-a']!.Size).toBeGreaterThan(counted['shares-a']!.SharedSize);
    expect(counted.alone!.SharedSize).toBe(0);

    // -1 when not asked, and below API 1.42, which has no shared-size.
    for (const url of ['/images/json', '/v1.41/images/json?shared-size=1']) {
      for (const img of Object.values(await list(url))) expect(img.SharedSize).toBe(-1);
    }
  });
});

describe('docker CLI', () => {
  it('pulls by tag and digest, and lists, tags and removes', async () => {
    const docker = dockerCli(d);
    const digest = await pushImage(plain, 'clipull', 'v1', await busyboxImage({ config: { Labels: { cli: '1' } } }));
    const r = await docker(['pull', `${plain.host}/clipull:v1`]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/Pull complete|Already exists/);
    expect(r.stdout).toContain(`Digest: ${digest}`);
    expect(r.stdout).toContain(`Status: Downloaded newer image for ${plain.host}/clipull:v1`);
    const byDigest = await docker(['pull', `${plain.host}/clipull@${digest}`]);
    expect(byDigest.code, byDigest.stderr).toBe(0);
    const ls = await docker(['images', '--format', '{{.Repository}}:{{.Tag}} {{.ID}}']);
    expect(ls.stdout).toMatch(new RegExp(`${plain.host}/clipull:v1 [0-9a-f]{12}`));
    expect((await docker(['tag', `${plain.host}/clipull:v1`, 'cli/tagged:x'])).code).toBe(0);
    // sha256:<tag> would read as an id prefix: refused, as dockerd does.
    const ambiguous = await docker(['tag', `${plain.host}/clipull:v1`, 'sha256:sometag']);
    expect(ambiguous.code).not.toBe(0);
    expect(ambiguous.stderr).toContain('refusing to create an ambiguous tag using digest algorithm as name');
    const rmi = await docker(['rmi', 'cli/tagged:x']);
    expect(rmi.stdout).toContain('Untagged: cli/tagged:x');
    const missing = await docker(['pull', `${plain.host}/clipull:nope`]);
    expect(missing.code).not.toBe(0);
    expect(missing.stderr).toMatch(/manifest unknown|not found/);
  });

  it('logs in and pulls through Basic and token auth, and refuses a wrong password', async () => {
    for (const auth of ['htpasswd', 'token'] as const) {
      const reg = await startRegistry({ auth });
      extra.push(reg);
      await pushImage(reg, 'private', 'latest', await busyboxImage({ config: { Labels: { auth } } }));
      const docker = dockerCli(d);
      const bad = await docker(['login', reg.host, '-u', 'berth', '--password-stdin'], { input: 'wrong\n' });
      expect(bad.code, auth).not.toBe(0);
      const login = await docker(['login', reg.host, '-u', 'berth', '--password-stdin'], { input: 's3cret\n' });
      expect(login.code, `${auth}: ${login.stderr}`).toBe(0);
      expect(login.stdout).toContain('Login Succeeded');
      const r = await docker(['pull', `${reg.host}/private:latest`]);
      expect(r.code, `${auth}: ${r.stderr}`).toBe(0);
      expect(r.stdout).toContain('Status: Downloaded newer image');
    }
  });

  it('pulls over TLS and through a mirror', async () => {
    const reg = await startRegistry({ tls: true });
    extra.push(reg);
    await pushImage(reg, 'tlscli', 'latest', await busyboxImage({ config: { Labels: { tlscli: '1' } } }));
    await withTrustedCa(reg, async () => {
      const r = await dockerCli(d)(['pull', `${reg.host}/tlscli:latest`]);
      expect(r.code, r.stderr).toBe(0);
    });
    const mirror = await startRegistry();
    extra.push(mirror);
    await pushImage(
      mirror,
      'library/viamirror',
      'latest',
      await busyboxImage({ config: { Labels: { via: 'mirror' } } }),
    );
    const m = await startDaemon({ args: ['--registry-mirror', mirror.url] });
    try {
      const r = await dockerCli(m)(['pull', 'viamirror']);
      expect(r.code, r.stderr).toBe(0);
      expect(r.stdout).toContain('docker.io/library/viamirror:latest');
    } finally {
      await m.cleanup();
    }
  });

  it('mounts an image of 100 layers', async () => {
    const layers = [await busyboxLayer()];
    for (let i = 0; i < 100; i++) layers.push(await buildLayer([{ path: `l/f${i}`, content: `layer ${i}\n` }]));
    await pushImage(plain, 'hundred', 'latest', buildImage({ layers }));
    await pull(d, `${plain.host}/hundred:latest`);
    const c = await d.request('POST', '/containers/create', {
      body: { Image: `${plain.host}/hundred:latest`, Cmd: ['sh', '-c', 'ls /l | wc -l; cat /l/f0 /l/f99'] },
    });
    expect((await d.request('POST', `/containers/${c.json.Id}/start`)).status).toBe(204);
    expect((await d.request('POST', `/containers/${c.json.Id}/wait`)).json.StatusCode).toBe(0);
    expect(demuxText((await d.request('GET', `/containers/${c.json.Id}/logs?stdout=1`)).body)).toBe(
      '100\nlayer 0\nlayer 99\n',
    );
  });
});
