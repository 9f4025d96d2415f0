// docker save and docker load: archives berth writes are read back whole (the
// same image id, tags and manifest digest); archives in dockerd 20.10's layout
// and in a bare OCI layout load; hostile archives are refused and leave
// nothing listed and nothing in the content store.
import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { createGunzip, gzipSync } from 'node:zlib';
import path from 'node:path';
import * as tarStream from 'tar-stream';
import { beforeAll, describe, expect, it } from 'vitest';
import type { Daemon } from '../harness/daemon.js';
import { type Env, runToEnd, useEnv } from '../harness/env.js';
import { buildImage, buildIndex, buildLayer, busyboxLayer, BUSYBOX_CONFIG, sha256 } from '../harness/images.js';
import { tarOf, type TarEntry } from '../harness/tar.js';
import { dockerCli } from '../harness/cli.js';
import { expectNoLeaks, holdings } from '../harness/leaks.js';

const ctx = useEnv();
let env: Env;
let d: Daemon;
beforeAll(() => {
  ({ env, daemon: d } = ctx);
});

/** The files of a tar, by name (symlinks as `-> target`). */
async function untar(bytes: Buffer): Promise<Map<string, Buffer | string>> {
  const out = new Map<string, Buffer | string>();
  const extract = tarStream.extract();
  const done = (async () => {
    for await (const entry of extract) {
      const chunks: Buffer[] = [];
      for await (const c of entry) chunks.push(c as Buffer);
      const h = entry.header;
      if (h.type === 'file') out.set(h.name, Buffer.concat(chunks));
      else if (h.type === 'symlink') out.set(h.name, `-> ${h.linkname}`);
    }
  })();
  extract.end(bytes);
  await done;
  return out;
}

const jsonOf = (files: Map<string, Buffer | string>, name: string) => JSON.parse(String(files.get(name)));
const lines = (text: string) =>
  text
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l));

async function save(...names: string[]): Promise<Buffer> {
  const q = names.map((n) => `names=${encodeURIComponent(n)}`).join('&');
  const r = await d.request('GET', `/images/get?${q}`);
  expect(r.status, r.text).toBe(200);
  return r.body;
}

/** Loads an archive; `error` is the in-band error dockerd reports a failed load with (after a 200). */
async function load(archive: Buffer, quiet = true) {
  const r = await d.request('POST', `/images/load?quiet=${quiet ? 1 : 0}`, {
    raw: archive,
    headers: { 'Content-Type': 'application/x-tar' },
  });
  const error = r.status === 200 ? lines(r.text).find((l) => l.error)?.error : undefined;
  return { status: r.status, text: r.text, error: error as string | undefined };
}

const imageList = async () => (await d.request('GET', '/images/json')).json as { Id: string; RepoTags: string[] }[];
const inspect = async (ref: string) => (await d.request('GET', `/images/${encodeURIComponent(ref)}/json`)).json;

const runEcho = (image: string, text: string) => runToEnd(d, { Image: image, Cmd: ['echo', text] });

/** The files of the content store (what a refused load must not leave behind). */
const storedBlobs = () => readdirSync(path.join(d.dataRoot, 'content', 'blobs', 'sha256')).sort();

describe('docker save', () => {
  it('writes manifest.json, repositories and an OCI layout holding the pulled blobs and manifest, byte for byte', async () => {
    const img = await inspect(env.busybox);
    const files = await untar(await save(env.busybox));
    expect(jsonOf(files, 'oci-layout')).toEqual({ imageLayoutVersion: '1.0.0' });
    const [entry] = jsonOf(files, 'manifest.json');
    expect(entry.RepoTags).toEqual([env.busybox]);
    expect(entry.Config).toBe(`blobs/sha256/${img.Id.slice(7)}`);
    const index = jsonOf(files, 'index.json');
    const repoDigest = img.RepoDigests[0].split('@')[1];
    // The manifest it was pulled with: a push of the loaded image keeps the registry's digest.
    expect(index.manifests[0].digest).toBe(repoDigest);
    expect(index.manifests[0].annotations['io.containerd.image.name']).toBe(`${env.busybox}`);
    expect(index.manifests[0].annotations['org.opencontainers.image.ref.name']).toBe('latest');
    const manifest = files.get(`blobs/sha256/${repoDigest.slice(7)}`) as Buffer;
    expect(sha256(manifest)).toBe(repoDigest);
    for (const l of JSON.parse(manifest.toString()).layers) {
      expect(sha256(files.get(`blobs/sha256/${l.digest.slice(7)}`) as Buffer)).toBe(l.digest);
    }
    const [name, tag] = [env.busybox.slice(0, env.busybox.lastIndexOf(':')), 'latest'];
    expect(Object.keys(jsonOf(files, 'repositories')[name])).toEqual([tag]);
  });

  it('answers 404 for an image it does not have, before writing anything', async () => {
    const r = await d.request('GET', '/images/get?names=no-such-image:1');
    expect([r.status, r.json.message]).toEqual([404, 'No such image: no-such-image:1']);
    const one = await d.request('GET', '/images/no-such-image/get');
    expect(one.status).toBe(404);
  });

  it('round-trips through rmi and load: the same id, tags and content', async () => {
    await d.request('POST', `/images/${encodeURIComponent(env.busybox)}/tag?repo=roundtrip&tag=one`);
    await d.request('POST', `/images/${encodeURIComponent(env.busybox)}/tag?repo=roundtrip&tag=two`);
    const id = (await inspect('roundtrip:one')).Id;
    // A bare name saves every tag of that repository.
    const archive = await save('roundtrip');
    expect(jsonOf(await untar(archive), 'manifest.json')[0].RepoTags.sort()).toEqual([
      'roundtrip:one',
      'roundtrip:two',
    ]);
    for (const t of ['roundtrip:one', 'roundtrip:two']) await d.request('DELETE', `/images/${t}`);
    const r = await load(archive);
    expect(r.status, r.text).toBe(200);
    expect(lines(r.text).map((l) => l.stream)).toEqual([
      'Loaded image: roundtrip:one\n',
      'Loaded image: roundtrip:two\n',
    ]);
    expect((await inspect('roundtrip:two')).Id).toBe(id);
    expect(await runEcho('roundtrip:one', 'loaded')).toBe('loaded\n');
  });

  it('saves a committed image, which loads into another name space after its removal', async () => {
    const c = await d.request('POST', '/containers/create', {
      body: { Image: env.busybox, Cmd: ['sh', '-c', 'echo committed > /marker'] },
    });
    await d.request('POST', `/containers/${c.json.Id}/start`);
    await d.request('POST', `/containers/${c.json.Id}/wait`);
    const commit = await d.request('POST', `/commit?container=${c.json.Id}&repo=committed&tag=v1`);
    expect(commit.status, commit.text).toBe(201);
    await d.request('DELETE', `/containers/${c.json.Id}`);
    const archive = await save('committed:v1');
    const index = jsonOf(await untar(archive), 'index.json');
    expect(index.manifests[0].mediaType).toBe('application/vnd.oci.image.manifest.v1+json');
    await d.request('DELETE', '/images/committed:v1');
    const r = await load(archive, false);
    expect(r.status, r.text).toBe(200);
    expect(lines(r.text).at(-1)).toEqual({ stream: 'Loaded image: committed:v1\n' });
    expect(await runToEnd(d, { Image: 'committed:v1', Cmd: ['cat', '/marker'] })).toBe('committed\n');
  });

  it('lets go of the image when the client hangs up part way, and keeps serving', async () => {
    const before = storedBlobs();
    const c = await d.request('POST', '/containers/create', {
      body: { Image: env.busybox, Cmd: ['sh', '-c', 'head -c 16777216 /dev/urandom > /big'] },
    });
    await d.request('POST', `/containers/${c.json.Id}/start`);
    await d.request('POST', `/containers/${c.json.Id}/wait`);
    expect((await d.request('POST', `/commit?container=${c.json.Id}&repo=hangup&tag=v1`)).status).toBe(201);
    await d.request('DELETE', `/containers/${c.json.Id}`);
    // Read the first bytes of the archive (a 16 MiB layer), then hang up.
    const first = await new Promise<Buffer>((resolve, reject) => {
      const req = http.get({ socketPath: d.socket, path: '/images/get?names=hangup:v1', agent: false }, (res) => {
        res.once('data', (chunk: Buffer) => {
          req.destroy();
          resolve(chunk);
        });
      });
      req.on('error', (e) => (req.destroyed ? undefined : reject(e)));
    });
    expect(first.length).toBeGreaterThan(0);
    expect((await d.request('GET', '/_ping')).status).toBe(200);
    expect((await d.request('DELETE', '/images/hangup:v1')).status).toBe(200);
    // Its blobs were held while the save ran: a removal meanwhile leaves them, and whatever no
    // image holds is gone by the next start at the latest.
    await d.restart();
    expect(storedBlobs()).toEqual(before);
  });

  it('saves by id without tags, and load says "Loaded image ID"', async () => {
    const id = (await inspect(env.busybox)).Id;
    const files = await untar(await save(id.slice(7, 19)));
    expect(jsonOf(files, 'manifest.json')[0].RepoTags).toBeNull();
    const r = await load(
      await tarOf([...files].map(([name, body]) => ({ name, body: body as Buffer, type: 'file' as const }))),
    );
    expect(lines(r.text)).toEqual([{ stream: `Loaded image ID: ${id}\n` }]);
  });
});

/** An image built by hand, with its layers' tars, for archives laid out as other engines write them. */
async function handmade(marker: string) {
  const base = await busyboxLayer();
  const top = await buildLayer([{ path: 'marker', content: `${marker}\n` }], { gzip: false });
  const image = buildImage({ layers: [base, top], config: { ...BUSYBOX_CONFIG, Cmd: ['cat', '/marker'] } });
  const tars = await Promise.all(
    image.layers.map(async (l: { open: () => NodeJS.ReadableStream; compressed: boolean }) => {
      const chunks: Buffer[] = [];
      for await (const c of l.open()) chunks.push(c as Buffer);
      return Buffer.concat(chunks);
    }),
  );
  return { image, blobs: tars as Buffer[] };
}

describe('docker load of archives other engines write', () => {
  it("reads dockerd 20.10's layout: <id>/layer.tar files, a repeated layer as a symlink to the first", async () => {
    const a = await handmade('legacy-a');
    const b = await handmade('legacy-b');
    const entries: TarEntry[] = [];
    const layerDir = (img: typeof a, i: number) => sha256(Buffer.from(`${img.image.configDigest}/${i}`)).slice(7);
    for (const img of [a, b]) {
      img.blobs.forEach((blob, i) => {
        const dir = layerDir(img, i);
        entries.push({ name: `${dir}/`, type: 'directory' });
        entries.push({ name: `${dir}/VERSION`, body: '1.0' });
        entries.push({ name: `${dir}/json`, body: JSON.stringify({ id: dir }) });
        // dockerd writes a layer it already wrote as a link to the first copy.
        if (img === b && i === 0)
          entries.push({ name: `${dir}/layer.tar`, type: 'symlink', linkname: `../${layerDir(a, 0)}/layer.tar` });
        else entries.push({ name: `${dir}/layer.tar`, body: blob });
      });
      entries.push({ name: `${img.image.configDigest.slice(7)}.json`, body: img.image.configBytes });
    }
    const manifest = [a, b].map((img, n) => ({
      Config: `${img.image.configDigest.slice(7)}.json`,
      RepoTags: [`legacy:${n}`],
      Layers: img.blobs.map((_, i) => `${layerDir(img, i)}/layer.tar`),
    }));
    entries.push({ name: 'manifest.json', body: JSON.stringify(manifest) });
    entries.push({ name: 'repositories', body: '{}' });
    const r = await load(await tarOf(entries), false);
    expect(r.status, r.text).toBe(200);
    const out = lines(r.text);
    expect(out.some((l) => l.status === 'Loading layer')).toBe(true);
    expect(out.filter((l) => l.stream).map((l) => l.stream)).toEqual([
      'Loaded image: legacy:0\n',
      'Loaded image: legacy:1\n',
    ]);
    expect((await inspect('legacy:1')).Id).toBe(b.image.configDigest);
    expect(await runEcho('legacy:0', 'x')).toBe('x\n');
  });

  it('reads a bare OCI layout: names from the index annotations, the platform from a nested index', async () => {
    const { image, blobs } = await handmade('oci');
    const other = buildImage({
      layers: image.layers,
      architecture: 'arm64',
      config: { ...BUSYBOX_CONFIG, Cmd: ['cat', '/marker'] },
    });
    const index = buildIndex(
      [
        { image, platform: { architecture: 'amd64', os: 'linux' } },
        { image: other, platform: { architecture: 'arm64', os: 'linux' } },
      ],
      'oci',
    );
    const blob = (bytes: Buffer) => ({ name: `blobs/sha256/${sha256(bytes).slice(7)}`, body: bytes });
    const top = {
      schemaVersion: 2,
      mediaType: 'application/vnd.oci.image.index.v1+json',
      manifests: [
        {
          mediaType: index.mediaType,
          digest: index.digest,
          size: index.manifestBytes.length,
          annotations: {
            'io.containerd.image.name': 'example.com/team/oci:1.0',
            'org.opencontainers.image.ref.name': '1.0',
          },
        },
      ],
    };
    const entries: TarEntry[] = [
      { name: 'oci-layout', body: '{"imageLayoutVersion":"1.0.0"}' },
      ...blobs.map(blob),
      blob(image.configBytes),
      blob(image.manifestBytes),
      blob(other.configBytes),
      blob(other.manifestBytes),
      blob(index.manifestBytes),
      { name: 'index.json', body: JSON.stringify(top) },
    ];
    const r = await load(await tarOf(entries));
    expect(lines(r.text)).toEqual([{ stream: 'Loaded image: example.com/team/oci:1.0\n' }]);
    expect((await inspect('example.com/team/oci:1.0')).Id).toBe(image.configDigest);
  });
});

describe('hostile archives', () => {
  async function refused(entries: TarEntry[], message: RegExp) {
    const before = storedBlobs();
    const listed = (await imageList()).length;
    const r = await load(await tarOf(entries));
    expect(r.status, r.text).toBe(200);
    expect(r.error).toMatch(message);
    expect((await imageList()).length).toBe(listed);
    expect(storedBlobs()).toEqual(before);
  }

  async function archiveOf(
    marker: string,
    edit: (entries: TarEntry[], img: Awaited<ReturnType<typeof handmade>>) => void,
  ) {
    const img = await handmade(marker);
    const entries: TarEntry[] = [
      ...img.blobs.map((b) => ({ name: `blobs/sha256/${sha256(b).slice(7)}`, body: b })),
      { name: `blobs/sha256/${img.image.configDigest.slice(7)}`, body: img.image.configBytes },
      {
        name: 'manifest.json',
        body: JSON.stringify([
          {
            Config: `blobs/sha256/${img.image.configDigest.slice(7)}`,
            RepoTags: [`hostile:${marker}`],
            Layers: img.blobs.map((b) => `blobs/sha256/${sha256(b).slice(7)}`),
          },
        ]),
      },
    ];
    edit(entries, img);
    return entries;
  }

  it('refuses names that leave the archive', async () => {
    const entries = await archiveOf('dots', (e) => e.unshift({ name: '../../escape', body: 'x' }));
    await refused(entries, /leaves the archive/);
  });

  it('refuses a symlinked manifest.json and a link that leaves the archive', async () => {
    const linked = await archiveOf('link', (e) => {
      const m = e.pop()!;
      e.push({ name: 'real.json', body: m.body }, { name: 'manifest.json', type: 'symlink', linkname: 'real.json' });
    });
    await refused(linked, /manifest.json is a symbolic link/);
    const out = await archiveOf('out', (e) =>
      e.unshift({ name: 'x', type: 'symlink', linkname: '../../../etc/passwd' }),
    );
    await refused(out, /leaves the archive/);
  });

  it('refuses a blob whose bytes are not its name, and a layer that is not the diff id its config says', async () => {
    const misnamed = await archiveOf('misnamed', (e, img) => {
      e[0] = { name: e[0]!.name, body: Buffer.concat([img.blobs[0]!, Buffer.alloc(512)]) };
    });
    await refused(misnamed, /has digest sha256:/);
    const wrongLayer = await archiveOf('wrong', (e) => {
      const m = JSON.parse(String(e.at(-1)!.body));
      m[0].Layers.reverse();
      e[e.length - 1] = { name: 'manifest.json', body: JSON.stringify(m) };
    });
    await refused(wrongLayer, /invalid diffID for layer \d: expected "sha256:/);
  });

  it('refuses what is not an archive of images, and keeps serving', async () => {
    await refused([{ name: 'hello.txt', body: 'hi' }], /neither manifest.json nor index.json/);
    const r = await load(Buffer.from('not a tar at all, just some text that is long enough'.repeat(20)));
    expect(r.error).toMatch(/^invalid archive: /);
    expect((await d.request('GET', '/_ping')).status).toBe(200);
  });
});

describe('compressed archives (gzip, bzip2, xz), as dockerd sniffs them', () => {
  /** Processes berthd has started that are still there (a decompressor left running would be one). */
  const children = () =>
    readdirSync('/proc')
      .filter((p) => /^\d+$/.test(p))
      .flatMap((p) => {
        try {
          const stat = readFileSync(`/proc/${p}/stat`, 'utf8');
          const [comm, ppid] = [/\((.*)\)/.exec(stat)?.[1], stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]];
          return Number(ppid) === d.proc.pid && (comm === 'xz' || comm === 'bzip2') ? [`${p} ${comm}`] : [];
        } catch {
          return [];
        }
      });
  const compress = (program: string, bytes: Buffer) =>
    execFileSync(program, ['-c', '-1'], { input: bytes, maxBuffer: 1 << 30 });

  it('loads an archive of two images through each, as the plain one loads', async () => {
    await d.request('POST', `/images/${encodeURIComponent(env.busybox)}/tag?repo=zipped&tag=one`);
    await d.request('POST', `/images/${encodeURIComponent(env.busybox)}/tag?repo=zipped&tag=two`);
    const tar = await save('zipped:one', 'zipped:two');
    for (const program of ['gzip', 'bzip2', 'xz']) {
      await d.request('DELETE', '/images/zipped:one');
      await d.request('DELETE', '/images/zipped:two');
      const r = await load(compress(program, tar), false);
      expect(r.error, program).toBeUndefined();
      expect(r.text, program).toContain('Loaded image: zipped:one');
      expect(r.text, program).toContain('Loaded image: zipped:two');
      expect((await inspect('zipped:two')).Id).toBe((await inspect(env.busybox)).Id);
    }
    expect(children()).toEqual([]);
  });

  it('refuses a corrupt or truncated one cleanly: no image, no blob, no process, no temp file left', async () => {
    const before = holdings(d);
    const blobs = storedBlobs();
    const listed = (await imageList()).length;
    const tar = await save(env.busybox);
    const xz = compress('xz', tar);
    const bz = compress('bzip2', tar);
    const gz = gzipSync(tar);
    const corrupt = (b: Buffer) => Buffer.concat([b.subarray(0, 64), Buffer.alloc(4096, 0x5a), b.subarray(64)]);
    for (const [what, bytes] of [
      ['corrupt xz', corrupt(xz)],
      ['truncated xz', xz.subarray(0, xz.length >> 1)],
      ['corrupt bzip2', corrupt(bz)],
      ['corrupt gzip', corrupt(gz)],
      ['truncated gzip', gz.subarray(0, gz.length >> 1)],
    ] as const) {
      const r = await load(bytes);
      expect(r.status, what).toBe(200);
      expect(r.error, what).toMatch(/^invalid archive: /);
    }
    expect((await imageList()).length).toBe(listed);
    expect(storedBlobs()).toEqual(blobs);
    expect(children()).toEqual([]);
    await expectNoLeaks(d, before);
    expect((await d.request('GET', '/_ping')).status).toBe(200);
  });

  it('docker save a b | gzip > x.tgz; docker load < x.tgz, and docker load -i x.tar.xz', async () => {
    const cli = dockerCli(d);
    await cli.ok(['tag', env.busybox, 'cligz:a']);
    await cli.ok(['tag', env.busybox, 'cligz:b']);
    const dir = cli.configDir;
    const shellEnv = { ...process.env, DOCKER_HOST: d.host, DOCKER_CONFIG: dir };
    const sh = (script: string) => execFileSync('sh', ['-c', script], { env: shellEnv, cwd: dir }).toString();
    sh('docker save cligz:a cligz:b | gzip > x.tgz && docker save cligz:a | xz > x.tar.xz');
    await cli.ok(['rmi', 'cligz:a', 'cligz:b']);
    expect(sh('docker load < x.tgz').trim().split('\n')).toEqual(['Loaded image: cligz:a', 'Loaded image: cligz:b']);
    await cli.ok(['rmi', 'cligz:a']);
    expect((await cli.ok(['load', '-i', path.join(dir, 'x.tar.xz')])).trim()).toBe('Loaded image: cligz:a');
  });
});

describe('the docker CLI', () => {
  it('docker save -o, docker rmi, docker load -i, and save | load through a pipe', async () => {
    const cli = dockerCli(d);
    await cli.ok(['tag', env.busybox, 'clitest:1']);
    const file = path.join(cli.configDir, 'clitest.tar');
    await cli.ok(['save', '-o', file, 'clitest:1']);
    await cli.ok(['rmi', 'clitest:1']);
    expect((await cli.ok(['load', '-i', file])).trim()).toBe('Loaded image: clitest:1');
    const shellEnv = { ...process.env, DOCKER_HOST: d.host, DOCKER_CONFIG: cli.configDir };
    const piped = execFileSync('sh', ['-c', 'docker save clitest:1 | docker load'], { env: shellEnv }).toString();
    expect(piped.trim()).toBe('Loaded image: clitest:1');
    const junk = await cli(['load'], { input: 'not an archive' });
    expect(junk.code).not.toBe(0);
    expect(junk.stderr).toMatch(/invalid archive/);
  });
});

describe('docker import', () => {
  /** busybox's root filesystem as a plain tar. */
  async function rootfsTar(): Promise<Buffer> {
    const layer = await busyboxLayer();
    const chunks: Buffer[] = [];
    for await (const c of layer.compressed ? layer.open().pipe(createGunzip()) : layer.open()) chunks.push(c as Buffer);
    return Buffer.concat(chunks);
  }

  const importQuery = (q: Record<string, string | string[]>) =>
    Object.entries(q)
      .flatMap(([k, v]) => (Array.isArray(v) ? v : [v]).map((x) => `${k}=${encodeURIComponent(x)}`))
      .join('&');

  it('makes an image of one layer from the body, with the changes, message and tag', async () => {
    const tar = await rootfsTar();
    const q = importQuery({
      fromSrc: '-',
      repo: 'imported/one',
      tag: 'v1',
      message: 'from a tar',
      changes: ['CMD ["sh", "-c", "echo $GREETING"]', 'ENV GREETING=imported'],
    });
    const r = await d.request('POST', `/images/create?${q}`, {
      raw: tar,
      headers: { 'Content-Type': 'application/x-tar' },
    });
    expect(r.status, r.text).toBe(200);
    const id = JSON.parse(r.text.trim()).status;
    const img = await inspect('imported/one:v1');
    expect(img.Id).toBe(id);
    expect(img.Comment).toBe('from a tar');
    expect(img.Config.Cmd).toEqual(['sh', '-c', 'echo $GREETING']);
    expect(img.Config.Env).toContain('GREETING=imported');
    expect(img.RootFS.Layers).toHaveLength(1);
    const history = (await d.request('GET', '/images/imported/one:v1/history')).json;
    expect(history[0].Comment).toBe('from a tar');
    expect(await runToEnd(d, { Image: 'imported/one:v1' })).toBe('imported\n');
  });

  it('takes a gzip body and a URL (fromSrc=http://…), giving the same layer', async () => {
    const tar = await rootfsTar();
    const gz = gzipSync(tar);
    const r1 = await d.request('POST', `/images/create?${importQuery({ fromSrc: '-', repo: 'imported/gz' })}`, {
      raw: gz,
    });
    expect(r1.status, r1.text).toBe(200);
    const server = http.createServer((_req, res) => res.end(tar));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/rootfs.tar`;
      const r2 = await d.request('POST', `/images/create?${importQuery({ fromSrc: url, repo: 'imported/url' })}`);
      expect(r2.status, r2.text).toBe(200);
    } finally {
      server.close();
    }
    const [a, b] = [await inspect('imported/gz:latest'), await inspect('imported/url:latest')];
    expect(a.RootFS.Layers).toEqual(b.RootFS.Layers);
  });

  it('takes bzip2 and xz bodies, storing the tar they hold (the layer of the plain one)', async () => {
    const tar = await rootfsTar();
    const plain = await d.request('POST', `/images/create?${importQuery({ fromSrc: '-', repo: 'imported/plain' })}`, {
      raw: tar,
    });
    expect(plain.status, plain.text).toBe(200);
    for (const program of ['bzip2', 'xz']) {
      const r = await d.request(
        'POST',
        `/images/create?${importQuery({ fromSrc: '-', repo: `imported/${program}` })}`,
        {
          raw: execFileSync(program, ['-c', '-1'], { input: tar, maxBuffer: 1 << 30 }),
        },
      );
      expect(r.status, r.text).toBe(200);
      expect((await inspect(`imported/${program}:latest`)).RootFS.Layers).toEqual(
        (await inspect('imported/plain:latest')).RootFS.Layers,
      );
    }
    const corrupt = await d.request('POST', `/images/create?${importQuery({ fromSrc: '-', repo: 'imported/bad' })}`, {
      raw: Buffer.concat([
        execFileSync('xz', ['-c', '-1'], { input: tar, maxBuffer: 1 << 30 }).subarray(0, 100),
        Buffer.alloc(1000, 1),
      ]),
    });
    expect(corrupt.status).toBe(400);
    expect(corrupt.json.message).toMatch(/^invalid archive: xz: /);
    expect((await d.request('GET', '/images/imported/bad:latest/json')).status).toBe(404);
  });

  it('refuses a digest reference and what is not a tar, listing nothing', async () => {
    const digestRef = await d.request(
      'POST',
      `/images/create?${importQuery({ fromSrc: '-', repo: `x@sha256:${'a'.repeat(64)}` })}`,
      { raw: Buffer.alloc(0) },
    );
    expect([digestRef.status, digestRef.json.message]).toEqual([400, 'cannot import digest reference']);
    const before = (await imageList()).length;
    const junk = await d.request('POST', `/images/create?${importQuery({ fromSrc: '-', repo: 'junk' })}`, {
      raw: Buffer.from('no tar here'.repeat(100)),
    });
    expect(junk.status).toBeGreaterThanOrEqual(400);
    expect((await imageList()).length).toBe(before);
  });

  it('works from the docker CLI: docker import with --change and a message', async () => {
    const cli = dockerCli(d);
    const file = path.join(cli.configDir, 'rootfs.tar');
    writeFileSync(file, await rootfsTar());
    const id = (
      await cli.ok(['import', '-m', 'cli import', '--change', 'CMD ["echo", "from-cli"]', file, 'imported/cli:2'])
    ).trim();
    expect(id).toMatch(/^sha256:[0-9a-f]{64}$/);
    expect((await cli.ok(['run', '--rm', 'imported/cli:2'])).trim()).toBe('from-cli');
  });
});
