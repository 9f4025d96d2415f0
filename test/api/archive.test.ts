// docker cp's API (HEAD, GET, PUT /containers/{id}/archive) against a real
// berthd and runc: dockerd's stat header and tar shapes, running and stopped
// containers, bind mounts seen as the container sees them, and a container
// that plants or swaps symlinks to host paths, which must never make a copy
// read or write outside its root (CVE-2018-15664).
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { Readable } from 'node:stream';
import * as tarStream from 'tar-stream';
import { beforeAll, describe, expect, it } from 'vitest';
import type { Daemon } from '../harness/daemon.js';
import { useEnv } from '../harness/env.js';
import { demuxText } from '../harness/streams.js';
import { tarOf } from '../harness/tar.js';

const ctx = useEnv();
let d: Daemon;
let busybox: string;
/** A host directory no container may reach through cp, and the secret in it. */
let hostDir: string;
const SECRET = 'host-secret-never-in-a-container';

beforeAll(() => {
  d = ctx.daemon;
  busybox = ctx.env.busybox;
  hostDir = path.join(d.dir, 'host-only');
  mkdirSync(hostDir, { recursive: true });
  writeFileSync(path.join(hostDir, 'sentinel'), SECRET);
});

const q = encodeURIComponent;

async function start(script: string, host: Record<string, unknown> = {}): Promise<string> {
  const r = await d.request('POST', '/containers/create', {
    body: { Image: busybox, Cmd: ['sh', '-c', script], HostConfig: host },
  });
  expect(r.status, r.text).toBe(201);
  expect((await d.request('POST', `/containers/${r.json.Id}/start`)).status).toBe(204);
  return r.json.Id;
}

/** A running container that has done `setup` (then sleeps). */
async function running(setup: string, host: Record<string, unknown> = {}): Promise<string> {
  const id = await start(`${setup}; touch /ready; exec sleep 1000`, host);
  for (let i = 0; i < 100; i++) {
    if ((await head(id, '/ready')).status === 200) return id;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error('container never got ready');
}

/** A container that did `script` and exited 0. */
async function stopped(script: string): Promise<string> {
  const id = await start(script);
  const w = await d.request('POST', `/containers/${id}/wait`);
  expect(w.json.StatusCode).toBe(0);
  return id;
}

const head = (id: string, p: string) => d.request('HEAD', `/containers/${id}/archive?path=${q(p)}`);
const get = (id: string, p: string) => d.request('GET', `/containers/${id}/archive?path=${q(p)}`);
const put = (id: string, p: string, tar: Buffer, params = '') =>
  d.request('PUT', `/containers/${id}/archive?path=${q(p)}${params}`, {
    raw: tar,
    headers: { 'Content-Type': 'application/x-tar' },
  });

const statOf = (r: { headers: Record<string, unknown> }) =>
  JSON.parse(Buffer.from(String(r.headers['x-docker-container-path-stat']), 'base64').toString('utf8'));

interface Entry {
  name: string;
  type: string;
  body: string;
  linkname: string | null;
  uid: number;
  mode: number;
}

async function entriesOf(tar: Buffer): Promise<Entry[]> {
  const out: Entry[] = [];
  const extract = tarStream.extract();
  Readable.from([tar]).pipe(extract as unknown as NodeJS.WritableStream);
  for await (const e of extract) {
    const chunks: Buffer[] = [];
    for await (const c of e) chunks.push(c as Buffer);
    const h = e.header;
    out.push({
      name: h.name,
      type: h.type ?? '',
      body: Buffer.concat(chunks).toString(),
      linkname: h.linkname ?? null,
      uid: h.uid ?? 0,
      mode: h.mode ?? 0,
    });
  }
  return out;
}

async function exec(id: string, script: string): Promise<string> {
  const c = await d.request('POST', `/containers/${id}/exec`, {
    body: { Cmd: ['sh', '-c', script], AttachStdout: true, AttachStderr: true },
  });
  const s = await d.request('POST', `/exec/${c.json.Id}/start`, { body: { Detach: false } });
  return demuxText(s.body);
}

describe('HEAD /containers/{id}/archive', () => {
  it('answers the stat header with Go FileMode bits, a resolved link target, and dockerd 404s', async () => {
    const id = await running('mkdir -p /d && echo hello > /d/f && chmod 4755 /d/f && ln -s /d/f /d/link');
    const file = statOf(await head(id, '/d/f'));
    expect(file).toMatchObject({ name: 'f', size: 6, mode: 0o755 + 2 ** 23, linkTarget: '' });
    expect(file.mtime).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$/);
    expect(statOf(await head(id, '/d'))).toMatchObject({ name: 'd', mode: 2 ** 31 + 0o755 });
    expect(statOf(await head(id, '/d/link'))).toMatchObject({
      name: 'link',
      mode: 2 ** 27 + 0o777,
      linkTarget: '/d/f',
    });
    const missing = await get(id, '/nope');
    expect(missing.status).toBe(404);
    expect(missing.json.message).toBe(`Could not find the file /nope in container ${id}`);
    expect((await head(id, '/nope')).status).toBe(404);
    const noPath = await d.request('GET', `/containers/${id}/archive`);
    expect(noPath.status).toBe(400);
    expect(noPath.json.message).toBe('bad parameter: path cannot be empty');
    expect((await head('no-such-container', '/')).status).toBe(404);
  });
});

describe('GET /containers/{id}/archive', () => {
  it('packs a file by its base name, a directory under its base name, and `dir/.` as `./`', async () => {
    const id = await running('mkdir -p /d/sub && echo one > /d/f && echo two > /d/sub/g && ln -s f /d/l');
    const file = await get(id, '/d/f');
    expect(file.status).toBe(200);
    expect(file.headers['content-type']).toBe('application/x-tar');
    expect(statOf(file)).toMatchObject({ name: 'f', size: 4 });
    expect((await entriesOf(file.body)).map((e) => [e.name, e.body])).toEqual([['f', 'one\n']]);

    const dir = await entriesOf((await get(id, '/d')).body);
    expect(dir.map((e) => [e.name, e.type])).toEqual([
      ['d/', 'directory'],
      ['d/f', 'file'],
      ['d/l', 'symlink'],
      ['d/sub/', 'directory'],
      ['d/sub/g', 'file'],
    ]);
    expect(dir.find((e) => e.name === 'd/l')?.linkname).toBe('f');
    const dot = await entriesOf((await get(id, '/d/.')).body);
    expect(dot.map((e) => e.name)).toEqual(['./', './f', './l', './sub/', './sub/g']);
    const link = await entriesOf((await get(id, '/d/l')).body);
    expect(link.map((e) => [e.name, e.type, e.linkname])).toEqual([['l', 'symlink', 'f']]);
  });

  it('reads a stopped container, and sees a bind mount as the container does', async () => {
    const stoppedId = await stopped('echo kept > /kept');
    expect((await entriesOf((await get(stoppedId, '/kept')).body))[0]?.body).toBe('kept\n');

    const bound = path.join(d.dir, 'bound');
    mkdirSync(bound, { recursive: true });
    writeFileSync(path.join(bound, 'from-host'), 'bound content');
    const id = await running('true', { Binds: [`${bound}:/data`] });
    expect((await entriesOf((await get(id, '/data/from-host')).body))[0]?.body).toBe('bound content');
    expect((await put(id, '/data', await tarOf([{ name: 'from-cp', body: 'in' }]))).status).toBe(200);
    expect(readFileSync(path.join(bound, 'from-cp'), 'utf8')).toBe('in');
    // Nothing is left mounted on the host for it.
    expect(readdirSync(path.join(d.dataRoot))).not.toContain('from-cp');
  });
});

describe('PUT /containers/{id}/archive', () => {
  it('extracts into a directory with the archive owners, refuses a file or a missing path as dockerd does', async () => {
    const id = await running('mkdir -p /in && echo x > /in/file');
    const tar = await tarOf([
      { name: 'dir', type: 'directory', mode: 0o750, uid: 1000, gid: 1000 },
      { name: 'dir/f', body: 'content', mode: 0o640, uid: 1000, gid: 1000 },
      { name: 'dir/l', type: 'symlink', linkname: 'f' },
    ]);
    expect((await put(id, '/in', tar)).status).toBe(200);
    expect(await exec(id, 'cat /in/dir/l; stat -c " %u:%g %a" /in/dir/f')).toBe('content 1000:1000 640\n');

    const notDir = await put(id, '/in/file', tar);
    expect(notDir.status).toBe(400);
    expect(notDir.json.message).toBe('extraction point is not a directory');
    const missing = await put(id, '/nope', tar);
    expect(missing.status).toBe(404);
    expect(missing.json.message).toBe(`Could not find the file /nope in container ${id}`);

    // noOverwriteDirNonDir: a directory is not replaced by a file.
    const clash = await put(id, '/in', await tarOf([{ name: 'dir', body: 'a file now' }]), '&noOverwriteDirNonDir=1');
    expect(clash.status).toBe(500);
    expect(clash.json.message).toBe('cannot overwrite directory "dir" with non-directory "/in"');
    // Without it, it is.
    expect((await put(id, '/in', await tarOf([{ name: 'dir', body: 'a file now' }]))).status).toBe(200);
    expect(await exec(id, 'cat /in/dir')).toBe('a file now');
  });

  it('copies into a stopped container, and into a read-only rootfs refuses', async () => {
    const id = await stopped('mkdir /target');
    expect((await put(id, '/target', await tarOf([{ name: 'f', body: 'while stopped' }]))).status).toBe(200);
    expect((await entriesOf((await get(id, '/target/f')).body))[0]?.body).toBe('while stopped');

    const ro = await start('exec sleep 1000', { ReadonlyRootfs: true });
    const r = await put(ro, '/tmp', await tarOf([{ name: 'f', body: 'x' }]));
    expect(r.status).toBe(400);
    expect(r.json.message).toBe('container rootfs is marked read-only');
  });

  it('copyUIDGID gives the files the container user', async () => {
    const r = await d.request('POST', '/containers/create', {
      body: { Image: busybox, Cmd: ['sleep', '1000'], User: 'nobody' },
    });
    const id = r.json.Id;
    await d.request('POST', `/containers/${id}/start`);
    const tar = await tarOf([{ name: 'owned', body: 'x', uid: 1000, gid: 1000 }]);
    expect((await put(id, '/tmp', tar, '&copyUIDGID=1')).status).toBe(200);
    expect(await exec(id, 'stat -c %U /tmp/owned')).toBe('nobody\n');
  });
});

describe('symlinks planted by the container never lead a copy out of its root', () => {
  const hostFiles = () => readdirSync(hostDir).sort();

  it('absolute links and `..` chains to host paths resolve inside the container', async () => {
    const plant = [
      `ln -s ${hostDir} /abs`,
      `ln -s ../../../../../../../../../..${hostDir} /dots`,
      `mkdir -p /deep/a/b && ln -s ../../../../../../../../../..${hostDir}/sentinel /deep/a/b/file`,
    ].join(' && ');
    const id = await running(plant);
    for (const p of ['/abs/sentinel', '/dots/sentinel', '/abs/', '/dots/.', '/deep/a/b/file/']) {
      const r = await get(id, p);
      expect(r.status, p).toBe(404);
      expect(r.text).not.toContain(SECRET);
    }
    // The link itself is packed as a link, never followed.
    const link = await entriesOf((await get(id, '/deep/a/b/file')).body);
    expect(link.map((e) => [e.type, e.body])).toEqual([['symlink', '']]);
    expect(statOf(await head(id, '/abs')).linkTarget).toBe(hostDir);
    // The whole root packed: the links are in it as links, the host file is not.
    const all = await get(id, '/');
    expect(all.status).toBe(200);
    expect(all.body.includes(Buffer.from(SECRET))).toBe(false);

    for (const p of ['/abs', '/dots', '/abs/']) {
      expect((await put(id, p, await tarOf([{ name: 'pwned', body: 'x' }]))).status, p).toBe(404);
    }
    expect(hostFiles()).toEqual(['sentinel']);
  });

  it('a tar with `..`, absolute names or a symlink-then-file is refused or kept inside', async () => {
    const id = await running('mkdir /dest');
    const climbing = await put(id, '/dest', await tarOf([{ name: '../escaped', body: 'x' }]));
    expect(climbing.status).toBe(500);
    expect(climbing.json.message).toBe('invalid entry name "../escaped"');
    const hard = await put(id, '/dest', await tarOf([{ name: 'h', type: 'link', linkname: '../../etc/passwd' }]));
    expect(hard.status).toBe(500);
    expect(await exec(id, 'ls /escaped /h /dest/h 2>&1 | grep -c "No such"')).toBe('3\n');

    expect((await put(id, '/dest', await tarOf([{ name: '/abs-name', body: 'abs' }]))).status).toBe(200);
    expect(await exec(id, 'cat /dest/abs-name')).toBe('abs');

    const trick = await tarOf([
      { name: 'link', type: 'symlink', linkname: hostDir },
      { name: 'link/pwned', body: 'written through a link' },
      { name: 'up', type: 'symlink', linkname: '../../../../../../..' },
      { name: `up${hostDir}/pwned2`, body: 'written through ..' },
    ]);
    expect((await put(id, '/dest', trick)).status).toBe(200);
    expect(hostFiles()).toEqual(['sentinel']);
    // Re-rooted at the destination, as a layer's links are at the layer.
    expect(await exec(id, `cat /dest${hostDir}/pwned /dest${hostDir}/pwned2`)).toBe(
      'written through a linkwritten through ..',
    );
  });

  it('a directory swapped for a host link in a loop during many copies never exposes or touches the host', async () => {
    const swap = [
      'mkdir -p /race',
      'while :; do',
      // Each state held for a spin, so that copies meet the real directory as well as the link.
      '  rm -rf /race/dir; mkdir /race/dir; echo inside > /race/dir/sentinel; i=0; while [ $i -lt 3000 ]; do i=$((i+1)); done',
      `  rm -rf /race/dir; ln -s ${hostDir} /race/dir; i=0; while [ $i -lt 300 ]; do i=$((i+1)); done`,
      'done',
    ].join('\n');
    const id = await running(`(${swap}) & true`);
    const tar = await tarOf([{ name: 'raced', body: 'x' }]);
    let reads = 0;
    for (let i = 0; i < 150; i++) {
      const [a, b, c] = await Promise.all([
        get(id, '/race/dir/sentinel'),
        get(id, '/race/dir'),
        put(id, '/race/dir', tar),
      ]);
      for (const r of [a, b, c]) {
        expect(r.text).not.toContain(SECRET);
        // A copy that lost the race is refused in Docker's shape, whatever stream it had begun.
        if (r.status !== 200) expect(Object.keys(JSON.parse(r.text))).toEqual(['message']);
      }
      if (a.status === 200) reads++;
    }
    expect(reads).toBeGreaterThan(0); // the copies did run against the real directory, some of the time
    expect(hostFiles()).toEqual(['sentinel']);
    expect(readFileSync(path.join(hostDir, 'sentinel'), 'utf8')).toBe(SECRET);
  });
});
