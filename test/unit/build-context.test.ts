// Receiving a build context (engine/builder/context.ts) and resolving COPY/ADD
// sources in it (sources.ts), on a real filesystem, with hostile contexts:
// names and hard links that climb out, absolute names, symlinks pointing out
// of the context, device nodes, a context larger than memory should hold.
import { execFileSync } from 'node:child_process';
import { createServer, type Server } from 'node:http';
import {
  closeSync,
  constants as C,
  existsSync,
  lstatSync,
  openSync,
  readFileSync,
  readdirSync,
  readlinkSync,
  statSync,
} from 'node:fs';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { PassThrough, Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { gzipSync } from 'node:zlib';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { type BuildContext, receiveContext } from '../../src/engine/builder/context.js';
import { ContextIndex } from '../../src/engine/builder/context-index.js';
import { downloadName, fetchUrl } from '../../src/engine/builder/add-url.js';
import { sourceChecksum } from '../../src/engine/builder/checksum.js';
import { type CopySource, resolveSources } from '../../src/engine/builder/sources.js';
import { sourcesTar } from '../../src/engine/builder/sources-tar.js';
import { applyLayer } from '../../src/engine/layers/apply.js';
import { O_PATH } from '../../src/engine/os/rooted.js';
import * as tarStream from 'tar-stream';
import { tarOf, type TarEntry } from '../harness/tar.js';

/** Each entry of a tar stream as [name, body, mode]; the stream's own error (an EngineError) is what rejects. */
async function tarEntries(tar: Readable): Promise<Array<[string, string, number]>> {
  const extract = tarStream.extract();
  const piped = pipeline(tar, extract as unknown as NodeJS.WritableStream);
  piped.catch(() => undefined);
  const out: Array<[string, string, number]> = [];
  try {
    for await (const e of extract) {
      const chunks: Buffer[] = [];
      for await (const c of e) chunks.push(c as Buffer);
      out.push([e.header.name, Buffer.concat(chunks).toString(), e.header.mode ?? 0]);
    }
  } catch (e) {
    await piped;
    throw e;
  }
  await piped;
  return out;
}

let base = '';
let n = 0;
const fresh = () => path.join(base, `ctx${++n}`);

beforeEach(async () => {
  base = await mkdtemp(path.join(tmpdir(), 'berth-build-ctx-'));
});
afterEach(async () => {
  await rm(base, { recursive: true, force: true });
});

const DF = { name: 'Dockerfile', body: 'FROM scratch\n' };

/** A file of a received context, as text, resolved inside it; null when not there. */
async function ctxText(ctx: BuildContext, rel: string): Promise<string | null> {
  const node = ctx.index.lstat(rel);
  if (!node) return null;
  const { node: file } = ctx.index.resolve(rel);
  return (await ctx.index.readAll(file)).toString('utf8');
}

async function receive(entries: TarEntry[], opts: { dockerfile?: string } = {}): Promise<BuildContext> {
  return receiveContext({ body: Readable.from([await tarOf(entries)]), dir: fresh(), ...opts });
}

describe('receiveContext', () => {
  it('extracts a plain tar and reads the Dockerfile and .dockerignore', async () => {
    const ctx = await receive([
      DF,
      { name: '.dockerignore', body: '*.log\n!keep.log\n' },
      { name: 'src/', type: 'directory', mode: 0o755 },
      { name: 'src/a.txt', body: 'a', mode: 0o640 },
      { name: 'x.log', body: 'x' },
      { name: 'keep.log', body: 'k' },
    ]);
    expect(ctx.dockerfile).toBe('FROM scratch\n');
    expect(ctx.dockerfilePath).toBe('Dockerfile');
    expect(await ctxText(ctx, 'src/a.txt')).toBe('a');
    expect(ctx.index.lstat('src/a.txt')?.mode).toBe(0o640);
    expect(ctx.excluded('x.log')).toBe(true);
    expect(ctx.excluded('keep.log')).toBe(false);
    expect(ctx.excluded('src/a.txt')).toBe(false);
    await ctx.dispose();
  });

  it('takes gzip, bzip2 and xz bodies', async () => {
    const src = path.join(base, 'src');
    await mkdir(src);
    await writeFile(path.join(src, 'Dockerfile'), 'FROM busybox\n');
    await writeFile(path.join(src, 'f'), 'content');
    const plain = execFileSync('tar', ['-C', src, '-cf', '-', '.']);
    for (const [name, body] of [
      ['gzip', gzipSync(plain)],
      ['bzip2', execFileSync('bzip2', ['-c'], { input: plain })],
      ['xz', execFileSync('xz', ['-c'], { input: plain })],
    ] as const) {
      const ctx = await receiveContext({ body: Readable.from([body]), dir: fresh() });
      expect(ctx.dockerfile, name).toBe('FROM busybox\n');
      expect(await ctxText(ctx, 'f'), name).toBe('content');
      await ctx.dispose();
    }
  });

  it('a corrupt xz body is an error, and the directory is removed', async () => {
    const dir = fresh();
    const body = Buffer.concat([Buffer.from([0xfd, 0x37, 0x7a, 0x58, 0x5a, 0x00]), Buffer.alloc(200, 7)]);
    await expect(receiveContext({ body: Readable.from([body]), dir })).rejects.toThrow(/xz/);
    expect(existsSync(dir)).toBe(false);
  });

  it('creates no file for the context (a spool file only beyond the memory bound); not a tar is refused', async () => {
    const dir = fresh();
    const ctx = await receiveContext({
      body: Readable.from([gzipSync(await tarOf([DF, { name: 'a', body: 'A' }, { name: '../up', body: 'U' }]))]),
      dir,
    });
    expect(await ctxText(ctx, 'a')).toBe('A');
    expect(await ctxText(ctx, 'up')).toBe('U'); // clamped
    expect(readdirSync(dir)).toEqual([]);
    await ctx.dispose();
    expect(existsSync(dir)).toBe(false);
    await expect(
      receiveContext({
        body: Readable.from([Buffer.alloc(2048, 0x41)]), // not a tar
        dir: fresh(),
      }),
    ).rejects.toMatchObject({ kind: 'invalid' });
  });

  it('Dockerfile: a named one, the lower-case fallback, a missing one, an empty one (dockerd words)', async () => {
    const named = await receive([{ name: 'build/My.Dockerfile', body: 'FROM a\n' }], {
      dockerfile: 'build/My.Dockerfile',
    });
    expect(named.dockerfile).toBe('FROM a\n');
    const lower = await receive([{ name: 'dockerfile', body: 'FROM b\n' }]);
    expect(lower.dockerfile).toBe('FROM b\n');
    expect(lower.dockerfilePath).toBe('dockerfile');
    await expect(receive([{ name: 'other', body: 'x' }])).rejects.toMatchObject({
      kind: 'system',
      message: 'Cannot locate specified Dockerfile: Dockerfile',
    });
    await expect(receive([{ name: 'x', body: '' }], { dockerfile: 'Dockerfile.dev' })).rejects.toThrow(
      'Cannot locate specified Dockerfile: Dockerfile.dev',
    );
    await expect(receive([{ name: 'Dockerfile', body: '' }])).rejects.toThrow(
      'the Dockerfile (Dockerfile) cannot be empty',
    );
  });

  it('a Dockerfile symlink pointing out of the context resolves inside it', async () => {
    const outside = path.join(base, 'secret');
    await writeFile(outside, 'FROM secret\n');
    await expect(receive([{ name: 'Dockerfile', type: 'symlink', linkname: outside }])).rejects.toThrow(
      'Cannot locate specified Dockerfile',
    );
    const ctx = await receive([
      { name: 'Dockerfile', type: 'symlink', linkname: '../../../../real' },
      { name: 'real', body: 'FROM inside\n' },
    ]);
    expect(ctx.dockerfile).toBe('FROM inside\n');
    await expect(
      receive([
        { name: 'Dockerfile', type: 'symlink', linkname: 'loop' },
        { name: 'loop', type: 'symlink', linkname: 'Dockerfile' },
      ]),
    ).rejects.toThrow('Cannot locate specified Dockerfile: Dockerfile');
    await expect(receive([{ name: 'Dockerfile', type: 'symlink', linkname: '/proc/self/environ' }])).rejects.toThrow(
      'Cannot locate specified Dockerfile',
    );
  });

  it('names and hard links that climb out, and absolute names, land inside (as in dockerd chrooted untar)', async () => {
    await writeFile(path.join(base, 'victim'), 'host');
    const ctx = await receive([
      DF,
      { name: '../../escape', body: 'x' },
      { name: '/etc/abs', body: 'inside' },
      { name: 'a/../../b', body: 'b' },
      { name: 'victim', body: 'context victim' },
      { name: 'hl', type: 'link', linkname: '../victim' },
      { name: 'hl-abs', type: 'link', linkname: '/victim' },
    ]);
    expect(existsSync(path.join(base, 'escape'))).toBe(false);
    expect(await ctxText(ctx, 'escape')).toBe('x');
    expect(await ctxText(ctx, 'etc/abs')).toBe('inside');
    expect(await ctxText(ctx, 'b')).toBe('b');
    expect(ctx.index.lstat('hl')).toBe(ctx.index.lstat('victim'));
    expect(ctx.index.lstat('hl-abs')).toBe(ctx.index.lstat('victim'));
    expect(await ctxText(ctx, 'hl')).toBe('context victim');
    expect(statSync(path.join(base, 'victim')).nlink).toBe(1);
    expect(readFileSync(path.join(base, 'victim'), 'utf8')).toBe('host');

    // A hard link to a file outside that the context does not have: refused, nothing made.
    const dir = fresh();
    await expect(
      receiveContext({
        body: Readable.from([await tarOf([DF, { name: 'h', type: 'link', linkname: '../victim' }])]),
        dir,
      }),
    ).rejects.toMatchObject({
      kind: 'invalid',
      message: expect.stringMatching(/hardlink "h" points at a file that does not exist/),
    });
    expect(existsSync(dir)).toBe(false);
  });

  it('symlinks are kept as written; a directory symlinked out is not written through', async () => {
    const outside = path.join(base, 'outside');
    await mkdir(outside);
    const ctx = await receive([
      DF,
      { name: 'link', type: 'symlink', linkname: outside },
      { name: 'link/planted', body: 'x' },
    ]);
    expect(existsSync(path.join(outside, 'planted'))).toBe(false);
    // Followed as if the context were `/`, as docker cp's extraction does.
    expect(await ctxText(ctx, path.join(outside, 'planted'))).toBe('x');
    expect(await ctxText(ctx, 'link/planted')).toBe('x');
    expect(ctx.index.lstat('link')?.kind).toBe('symlink');
    const kept = await receive([DF, { name: 'l', type: 'symlink', linkname: '/etc/passwd' }]);
    expect(kept.index.lstat('l')?.target).toBe('/etc/passwd');
  });

  it('skips device nodes and fifos', async () => {
    const ctx = await receive([
      DF,
      { name: 'null', type: 'character-device', devmajor: 1, devminor: 3 },
      { name: 'sda', type: 'block-device', devmajor: 8, devminor: 0 },
      { name: 'pipe', type: 'fifo' },
    ]);
    expect(ctx.index.lstat('null')).toBeNull();
    expect(ctx.index.lstat('sda')).toBeNull();
    expect(ctx.index.lstat('pipe')).toBeNull();
  });

  it('a huge context streams to one spool file (memory stays flat) and maxBytes refuses beyond it', async () => {
    const size = 512 << 20;
    const header = await tarOf([DF]);
    const body = new PassThrough();
    const chunk = Buffer.alloc(1 << 20, 0x61);
    (async () => {
      const pack = tarStream.pack();
      pack.pipe(body);
      pack.entry({ name: 'Dockerfile' }, 'FROM scratch\n');
      const big = pack.entry({ name: 'big', size }, () => undefined);
      for (let i = 1; i < size / chunk.length; i++)
        if (!big.write(chunk)) await new Promise<void>((r) => big.once('drain', () => r()));
      big.end(chunk);
      pack.finalize();
    })().catch((e) => body.destroy(e));
    const before = process.memoryUsage().rss;
    let peak = before;
    const timer = setInterval(() => {
      peak = Math.max(peak, process.memoryUsage().rss);
    }, 20);
    try {
      const dir = fresh();
      const ctx = await receiveContext({ body, dir });
      expect(ctx.index.lstat('big')?.size).toBe(size);
      expect(readdirSync(dir)).toEqual(['context.spool']); // one file for all the bodies beyond the memory bound
      let read = 0;
      for await (const c of ctx.index.read(ctx.index.lstat('big')!)) read += c.length;
      expect(read).toBe(size);
      expect(peak - before).toBeLessThan(size / 4);
      await ctx.dispose();
    } finally {
      clearInterval(timer);
    }
    expect(header.length).toBeGreaterThan(0);

    const limited = Readable.from([await tarOf([DF, { name: 'f', body: Buffer.alloc(100_000) }])]);
    await expect(receiveContext({ body: limited, dir: fresh(), maxBytes: 10_000 })).rejects.toMatchObject({
      kind: 'too-large',
    });
  }, 120_000);

  it('an aborted receive rejects and removes the directory', async () => {
    const body = new PassThrough();
    body.write(await tarOf([DF]).then((b) => b.subarray(0, 1024)));
    const ac = new AbortController();
    const dir = fresh();
    const p = receiveContext({ body, dir, signal: ac.signal });
    setTimeout(() => ac.abort(new Error('client gone')), 50);
    await expect(p).rejects.toThrow('client gone');
    expect(existsSync(dir)).toBe(false);
  });
});

describe('remote contexts', () => {
  let server: Server;
  let url = '';
  let tarball: Buffer;
  beforeAll(async () => {
    tarball = gzipSync(
      await tarOf([
        { name: 'Dockerfile', body: 'FROM remote\n' },
        { name: 'r', body: 'R' },
      ]),
    );
    server = createServer((req, res) => {
      if (req.url === '/ctx.tar.gz') {
        res.writeHead(200, { 'content-type': 'application/x-gzip' });
        res.end(tarball);
      } else if (req.url === '/Dockerfile') {
        res.writeHead(200, { 'content-type': 'application/octet-stream' });
        res.end('FROM plain\n');
      } else if (req.url === '/page') {
        res.writeHead(200, { 'content-type': 'text/html' });
        res.end('<html></html>');
      } else if (req.url?.startsWith('/file/')) {
        res.writeHead(200, { 'last-modified': 'Wed, 21 Oct 2015 07:28:00 GMT' });
        res.end('downloaded');
      } else {
        res.writeHead(404, { 'content-type': 'text/plain' });
        res.end('nope\n');
      }
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(() => new Promise<void>((r) => server.close(() => r())));

  const none = () => Readable.from([]);

  it('a tarball URL is a context; a plain-text one is the Dockerfile alone', async () => {
    let bytes = 0;
    const ctx = await receiveContext({
      body: none(),
      dir: fresh(),
      remote: `${url}/ctx.tar.gz`,
      progress: (c) => (bytes = c),
    });
    expect(bytes).toBe(tarball.length);
    expect(ctx.dockerfile).toBe('FROM remote\n');
    expect(await ctxText(ctx, 'r')).toBe('R');
    const df = await receiveContext({ body: none(), dir: fresh(), remote: `${url}/Dockerfile` });
    expect(df.dockerfile).toBe('FROM plain\n');
  });

  it('refuses git, non-http URLs, unsupported types and failed GETs with dockerd words', async () => {
    for (const remote of ['git://example.com/r', 'github.com/moby/moby', 'https://example.com/r.git', 'git@x:y']) {
      await expect(receiveContext({ body: none(), dir: fresh(), remote })).rejects.toMatchObject({
        kind: 'invalid',
        message: expect.stringMatching(/git build contexts are not supported/),
      });
    }
    await expect(receiveContext({ body: none(), dir: fresh(), remote: 'ftp://x/y' })).rejects.toThrow(
      'remoteURL (ftp://x/y) could not be recognized as URL',
    );
    await expect(receiveContext({ body: none(), dir: fresh(), remote: `${url}/page` })).rejects.toThrow(
      'unsupported Content-Type "text/html"',
    );
    await expect(receiveContext({ body: none(), dir: fresh(), remote: `${url}/missing` })).rejects.toMatchObject({
      kind: 'not-found',
      message: `error downloading remote context ${url}/missing: failed to GET ${url}/missing with status 404 Not Found: nope`,
    });
  });

  it('fetchUrl downloads ADD sources: 0600, Last-Modified mtime, named after the URL', async () => {
    const dir = path.join(base, 'dl');
    const told: Array<[number, number | null]> = [];
    const s = await fetchUrl(`${url}/file/some%20name.txt?x=1`, dir, undefined, (c, t) => told.push([c, t]));
    expect(told.at(-1)?.[0]).toBe(10); // total: the server sent no Content-Length
    expect(s.rel).toBe('some name.txt');
    expect(readFileSync(s.abs, 'utf8')).toBe('downloaded');
    expect(statSync(s.abs).mode & 0o7777).toBe(0o600);
    expect(statSync(s.abs).mtimeMs).toBe(Date.parse('2015-10-21T07:28:00Z'));
    expect(s.download).toBe(true);
    expect(downloadName('http://h/dir/', 'attachment; filename="x.tgz"')).toBe('x.tgz');
    expect(downloadName('http://h/', null)).toBeUndefined();
    expect(downloadName('http://h/a/..', null)).toBeUndefined();
    await expect(fetchUrl(`${url}/missing`, path.join(base, 'dl2'))).rejects.toMatchObject({ kind: 'not-found' });
  });
});

describe('resolveSources', () => {
  let ctx: BuildContext;
  beforeEach(async () => {
    const outside = path.join(base, 'outside');
    await mkdir(outside);
    await writeFile(path.join(outside, 'secret'), 'host secret');
    ctx = await receive([
      DF,
      { name: '.dockerignore', body: 'ignored\n**/*.tmp\n' },
      { name: 'a.txt', body: 'A' },
      { name: 'b.txt', body: 'B' },
      { name: 'x.tmp', body: 't' },
      { name: 'ignored', body: 'i' },
      { name: 'dir/', type: 'directory' },
      { name: 'dir/one', body: '1' },
      { name: 'dir/two.tmp', body: '2' },
      { name: 'dir/sub/three', body: '3' },
      { name: 'etc/passwd', body: 'context passwd' },
      { name: 'abs-out', type: 'symlink', linkname: '/etc/passwd' },
      { name: 'rel-out', type: 'symlink', linkname: '../../../../../etc/passwd' },
      { name: 'to-outside', type: 'symlink', linkname: path.join(outside, 'secret') },
      { name: 'dirlink', type: 'symlink', linkname: 'dir' },
      { name: 'to-ignored', type: 'symlink', linkname: 'ignored' },
    ]);
  });

  it('names files and directories; wildcards in lexical order; ./ and / prefixes', () => {
    expect(resolveSources(ctx, ['a.txt']).map((s) => s.rel)).toEqual(['a.txt']);
    expect(resolveSources(ctx, ['./a.txt', '/b.txt']).map((s) => s.rel)).toEqual(['a.txt', 'b.txt']);
    expect(resolveSources(ctx, ['*.txt']).map((s) => s.rel)).toEqual(['a.txt', 'b.txt']);
    expect(resolveSources(ctx, ['dir/*']).map((s) => s.rel)).toEqual(['dir/one', 'dir/sub']);
    expect(resolveSources(ctx, ['dir/s*/t*']).map((s) => s.rel)).toEqual(['dir/sub/three']);
    expect(resolveSources(ctx, ['*/sub']).map((s) => s.rel)).toEqual(['dir/sub']);
    expect(() => resolveSources(ctx, ['dirlink/*'])).toThrow('no source files were specified'); // Walk does not enter links
    expect(() => resolveSources({ ...ctx, image: true }, ['nope'])).toThrow(/^stat nope: file does not exist$/);
    const dir = resolveSources(ctx, ['dir'])[0]!;
    expect(dir.stat.isDirectory()).toBe(true);
    expect(resolveSources(ctx, ['.'])[0]!.real).toBe('');
  });

  it('symlinks are followed inside the context only', async () => {
    const [abs] = resolveSources(ctx, ['abs-out']);
    expect(abs!.real).toBe('etc/passwd');
    expect(abs!.rel).toBe('abs-out');
    const [rel] = resolveSources(ctx, ['rel-out']);
    expect(rel!.real).toBe('etc/passwd');
    expect(() => resolveSources(ctx, ['to-outside'])).toThrow(
      'file not found in build context or excluded by .dockerignore: stat to-outside: file does not exist',
    );
    expect(resolveSources(ctx, ['dirlink'])[0]!.real).toBe('dir');
    // `..` climbs no higher than the context, as dockerd's scoped resolution.
    const [up] = resolveSources(ctx, ['../../etc/passwd']);
    expect(up!.real).toBe('etc/passwd');
    expect(await ctxText(ctx, '../../etc/passwd')).toBe('context passwd');
  });

  it('excluded files are not there, directly, through a link, or by wildcard', () => {
    expect(() => resolveSources(ctx, ['ignored'])).toThrow('stat ignored: file does not exist');
    expect(() => resolveSources(ctx, ['to-ignored'])).toThrow('stat to-ignored: file does not exist');
    expect(resolveSources(ctx, ['*.tmp', 'a.txt']).map((s) => s.rel)).toEqual(['a.txt']);
    expect(() => resolveSources(ctx, ['*.nothing'])).toThrow('no source files were specified');
    expect(() => resolveSources(ctx, ['missing'])).toThrow(
      'file not found in build context or excluded by .dockerignore: stat missing: file does not exist',
    );
    expect(() => resolveSources(ctx, ['http://x/y'])).toThrow("source can't be a URL for COPY");
  });

  it('checksums: file, dir, multi; content and mode change them, mtime does not', async () => {
    const a = await sourceChecksum(resolveSources(ctx, ['a.txt']));
    expect(a).toMatch(/^file:[0-9a-f]{64}$/);
    expect(await sourceChecksum(resolveSources(ctx, ['dir']))).toMatch(/^dir:[0-9a-f]{64}$/);
    expect(await sourceChecksum(resolveSources(ctx, ['a.txt', 'b.txt']))).toMatch(/^multi:[0-9a-f]{64}$/);
    const d1 = await sourceChecksum(resolveSources(ctx, ['dir']));
    const other = async (entries: TarEntry[]) =>
      receive([DF, { name: '.dockerignore', body: '**/*.tmp\n' }, { name: 'dir/one', body: '1' }, ...entries]);
    const base0 = await other([
      { name: 'a.txt', body: 'A' },
      { name: 'dir/two.tmp', body: '2' },
      { name: 'dir/sub/three', body: '3' },
    ]);
    expect(await sourceChecksum(resolveSources(base0, ['a.txt']))).toBe(a);
    expect(await sourceChecksum(resolveSources(base0, ['dir']))).toBe(d1);
    const renamed = await other([{ name: 'a2.txt', body: 'A' }]);
    expect(await sourceChecksum(resolveSources(renamed, ['a2.txt']))).not.toBe(a); // same bytes, another name
    const touched = await other([{ name: 'a.txt', body: 'A', mtime: new Date(1_000_000) }]);
    expect(await sourceChecksum(resolveSources(touched, ['a.txt']))).toBe(a);
    const chmodded = await other([{ name: 'a.txt', body: 'A', mode: 0o600 }]);
    expect(await sourceChecksum(resolveSources(chmodded, ['a.txt']))).not.toBe(a);
    const excludedChanged = await other([
      { name: 'dir/two.tmp', body: 'changed but excluded' },
      { name: 'dir/sub/three', body: '3' },
    ]);
    expect(await sourceChecksum(resolveSources(excludedChanged, ['dir']))).toBe(d1);
    const changed = await other([
      { name: 'dir/two.tmp', body: '2' },
      { name: 'dir/sub/three', body: 'changed' },
    ]);
    expect(await sourceChecksum(resolveSources(changed, ['dir']))).not.toBe(d1);
  });
});

describe('sourcesTar', () => {
  it('lays sources out for the destination: dir contents, file names, owners, modes; excluded left out', async () => {
    const ctx = await receive([
      DF,
      { name: '.dockerignore', body: 'dir/skip\n' },
      { name: 'dir/one', body: '1', mode: 0o751, uid: 1000, gid: 1000 },
      { name: 'dir/skip', body: 's' },
      { name: 'dir/ln', type: 'symlink', linkname: '/etc/passwd' },
      { name: 'file', body: 'F', mode: 0o640 },
    ]);
    const tar = sourcesTar({ sources: resolveSources(ctx, ['dir', 'file']), destIsDir: true });
    const entries = await tarEntries(tar);
    expect(entries.map(([n]) => n)).toEqual(['ln', 'one', 'file']);
    expect(entries.find(([n]) => n === 'one')).toEqual(['one', '1', 0o751]);

    const named = await tarEntries(
      sourcesTar({ sources: resolveSources(ctx, ['file']), destIsDir: false, destName: 'renamed' }),
    );
    expect(named).toEqual([['renamed', 'F', 0o640]]);

    const owners: Array<[string, number, number]> = [];
    const ex = tarStream.extract();
    sourcesTar({ sources: resolveSources(ctx, ['dir']), destIsDir: true, chown: { uid: 7, gid: 8 } }).pipe(
      ex as unknown as NodeJS.WritableStream,
    );
    for await (const e of ex) {
      owners.push([e.header.name, e.header.uid ?? -1, e.header.gid ?? -1]);
      e.resume();
    }
    expect(owners).toEqual([
      ['ln', 7, 8],
      ['one', 7, 8],
    ]);
    const rooted = await tarEntries(sourcesTar({ sources: resolveSources(ctx, ['dir/one']), destIsDir: true }));
    expect(rooted.map(([n]) => n)).toEqual(['one']);
  });

  it('lands in a destination through the docker cp extraction core uses (ArchiveService.put)', async () => {
    const inner = await tarOf([{ name: 'pkg/x', body: 'X', uid: 5, gid: 6 }]);
    const ctx = await receive([
      DF,
      { name: 'app/', type: 'directory', mode: 0o750 },
      { name: 'app/main.js', body: 'main', mode: 0o640 },
      { name: 'app/lib/util.js', body: 'util' },
      { name: 'app/link', type: 'symlink', linkname: '../../../etc/shadow' },
      { name: 'app/hard', type: 'link', linkname: 'app/main.js' },
      { name: 'pkg.tar', body: inner },
    ]);
    const dest = path.join(base, 'dest');
    await mkdir(dest);
    const dirFd = openSync(dest, O_PATH | C.O_DIRECTORY);
    try {
      const tar = sourcesTar({
        sources: resolveSources(ctx, ['app', 'pkg.tar']),
        destIsDir: true,
        chown: { uid: 1234, gid: 5678 },
        extractArchives: true,
      });
      await applyLayer(tar, '', { copy: { dirFd, name: '/dest', noOverwriteDirNonDir: false } });
    } finally {
      closeSync(dirFd);
    }
    expect(readFileSync(path.join(dest, 'main.js'), 'utf8')).toBe('main');
    expect(statSync(path.join(dest, 'main.js'))).toMatchObject({ uid: 1234, gid: 5678 });
    expect(statSync(path.join(dest, 'main.js')).mode & 0o7777).toBe(0o640);
    expect(statSync(path.join(dest, 'hard')).ino).toBe(statSync(path.join(dest, 'main.js')).ino);
    expect(readFileSync(path.join(dest, 'lib/util.js'), 'utf8')).toBe('util');
    expect(readlinkSync(path.join(dest, 'link'))).toBe('../../../etc/shadow');
    expect(lstatSync(path.join(dest, 'link'))).toMatchObject({ uid: 1234, gid: 5678 });
    expect(readFileSync(path.join(dest, 'pkg/x'), 'utf8')).toBe('X');
    expect(statSync(path.join(dest, 'pkg/x'))).toMatchObject({ uid: 5, gid: 6 }); // the archive's owners
  });

  it('keeps file capabilities (security.capability), as dockerd copies them', async () => {
    // VFS_CAP_REVISION_2 with the effective bit, permitted cap_net_raw.
    const cap = Buffer.alloc(20);
    cap.writeUInt32LE(0x02000001, 0);
    cap.writeUInt32LE(1 << 13, 4);
    const pax = { 'SCHILY.xattr.security.capability': cap.toString('latin1') };
    const ctx = await receive([
      DF,
      { name: 'bin/ping', body: 'elf', mode: 0o755, pax },
      { name: 'solo', body: 's', pax },
    ]);
    expect(ctx.index.lstat('solo')?.capability).toEqual(cap);
    for (const src of ['bin', 'solo']) {
      const ex = tarStream.extract();
      sourcesTar({ sources: resolveSources(ctx, [src]), destIsDir: true }).pipe(ex as unknown as NodeJS.WritableStream);
      const seen: Array<[string, string | undefined]> = [];
      for await (const e of ex) {
        seen.push([
          e.header.name,
          (e.header.pax as Record<string, string> | undefined)?.['SCHILY.xattr.security.capability'] === undefined
            ? undefined
            : 'cap',
        ]);
        e.resume();
      }
      expect(seen, src).toEqual([[src === 'bin' ? 'ping' : 'solo', 'cap']]);
    }
  });

  it('ADD expands local archives (gzip, bzip2, xz, plain) but copies other files and downloads as they are', async () => {
    const inner = await tarOf([
      { name: 'pkg/', type: 'directory' },
      { name: 'pkg/x', body: 'X', uid: 5, gid: 6 },
    ]);
    const ctx = await receive([
      DF,
      { name: 'a.tar', body: inner },
      { name: 'a.tar.gz', body: gzipSync(inner) },
      { name: 'a.tar.bz2', body: execFileSync('bzip2', ['-c'], { input: inner }) },
      { name: 'a.tar.xz', body: execFileSync('xz', ['-c'], { input: inner }) },
      { name: 'not.tar.gz', body: 'just text' },
      { name: 'empty.tar', body: Buffer.alloc(1024) },
      { name: 'evil.tar', body: await tarOf([{ name: '../../out', body: 'x' }]) },
    ]);
    for (const name of ['a.tar', 'a.tar.gz', 'a.tar.bz2', 'a.tar.xz']) {
      const entries = await tarEntries(
        sourcesTar({ sources: resolveSources(ctx, [name]), destIsDir: true, extractArchives: true }),
      );
      expect(
        entries.map(([n]) => n),
        name,
      ).toEqual(['pkg/', 'pkg/x']);
    }
    const copied = await tarEntries(
      sourcesTar({ sources: resolveSources(ctx, ['not.tar.gz', 'empty.tar']), destIsDir: true, extractArchives: true }),
    );
    expect(copied.map(([n]) => n)).toEqual(['not.tar.gz', 'empty.tar']);
    const asFile = await tarEntries(sourcesTar({ sources: resolveSources(ctx, ['a.tar']), destIsDir: true }));
    expect(asFile.map(([n]) => n)).toEqual(['a.tar']);
    await expect(
      tarEntries(sourcesTar({ sources: resolveSources(ctx, ['evil.tar']), destIsDir: true, extractArchives: true })),
    ).rejects.toThrow(/invalid entry name/);
    const download = { ...resolveSources(ctx, ['a.tar'])[0]!, download: true };
    const dl = await tarEntries(sourcesTar({ sources: [download], destIsDir: true, extractArchives: true }));
    expect(dl.map(([n]) => n)).toEqual(['a.tar']);
  });
});

describe('the context index against an extracted context', () => {
  /** Every entry of a tar stream: name, type, mode, link target, body (and mtime, but for directories). */
  async function entriesOf(tar: Readable): Promise<string[]> {
    const ex = tarStream.extract();
    tar.pipe(ex as unknown as NodeJS.WritableStream);
    const out: string[] = [];
    for await (const e of ex) {
      const chunks: Buffer[] = [];
      for await (const c of e) chunks.push(c as Buffer);
      const h = e.header;
      const mtime = h.type === 'directory' ? '' : String(h.mtime?.getTime());
      out.push([h.name, h.type, h.mode?.toString(8), h.linkname ?? '', mtime, Buffer.concat(chunks)].join(' '));
    }
    return out;
  }

  it('resolves, checksums and lays out sources as the directory dockerd would have extracted', async () => {
    const entries: TarEntry[] = [
      DF,
      { name: '.dockerignore', body: 'dir/ignored\n' },
      { name: 'dir/', type: 'directory', mode: 0o750, mtime: new Date(5_000_000) },
      { name: 'dir/a', body: 'a', mode: 0o644, mtime: new Date(7_000_000) },
      { name: 'dir/ignored', body: 'i' },
      { name: 'dir/sub/b', body: 'b', mode: 0o4755 },
      { name: '../../up', body: 'up' },
      { name: '/abs/c', body: 'c' },
      { name: 'link-abs', type: 'symlink', linkname: '/dir' },
      { name: 'link-rel', type: 'symlink', linkname: '../../../dir' },
      { name: 'link-out', type: 'symlink', linkname: '/etc' },
      { name: 'link-abs/d', body: 'through a link' },
      { name: 'rel-in', type: 'symlink', linkname: 'dir/sub' },
      { name: 'rel-in/e', body: 'e' },
      { name: 'hl', type: 'link', linkname: 'dir/a' },
      { name: 'hl2', type: 'link', linkname: '../dir/a' },
      { name: 'dup', body: 'one' },
      { name: 'dup', body: 'two', mode: 0o600 },
      { name: 'rep/x', body: 'x' },
      { name: 'rep', body: 'now a file' },
      { name: 'f2', body: 'file' },
      { name: 'f2/', type: 'directory', mode: 0o700 },
      { name: 'orig', body: 'O' },
      { name: 'hl3', type: 'link', linkname: 'orig' },
      { name: 'orig', body: 'N' },
      { name: 'loop1', type: 'symlink', linkname: 'loop2' },
      { name: 'loop2', type: 'symlink', linkname: 'loop1' },
      { name: 'pipe', type: 'fifo' },
      { name: 'null', type: 'character-device', devmajor: 1, devminor: 3 },
      { name: 'tree/', type: 'directory' },
      { name: 'tree/hard-a', type: 'link', linkname: 'dir/a' },
      { name: 'tree/hard-b', type: 'link', linkname: 'dir/a' },
      { name: 'tree/ln', type: 'symlink', linkname: '../up' },
    ];
    const tar = await tarOf(entries, { mtime: new Date(3_000_000) });
    const ctx = await receiveContext({ body: Readable.from([tar]), dir: fresh() });
    const dest = fresh();
    await mkdir(dest);
    const dirFd = openSync(dest, O_PATH | C.O_DIRECTORY);
    try {
      const copy = { dirFd, name: '/', noOverwriteDirNonDir: false, skipDevices: true, clampNames: true };
      await applyLayer(Readable.from([tar]), '', { copy });
    } finally {
      closeSync(dirFd);
    }
    const onDisk = { root: dest, excluded: ctx.excluded };
    const patterns = [
      ['.'],
      ['dir'],
      ['link-abs'],
      ['link-rel'],
      ['link-abs/a'],
      ['hl'],
      ['dup'],
      ['rep'],
      ['f2'],
      ['hl3', 'orig'],
      ['up', 'abs'],
      ['h*'],
      ['r*', 'd*'],
      ['dir/*'],
      ['tree'],
      ['rel-in'],
      ['dir/sub/b'],
    ];
    for (const p of patterns) {
      const fromIndex = resolveSources(ctx, p);
      const fromDisk = resolveSources(onDisk, p);
      const shape = (s: CopySource) => [s.rel, s.real, s.stat.mode & 0o170777];
      expect(fromIndex.map(shape), p.join(' ')).toEqual(fromDisk.map(shape));
      expect(await sourceChecksum(fromIndex), p.join(' ')).toBe(await sourceChecksum(fromDisk));
      for (const destIsDir of [true, false]) {
        const o = { destIsDir, destName: 'named', chown: { uid: 3, gid: 4 } };
        expect(await entriesOf(sourcesTar({ ...o, sources: fromIndex })), p.join(' ')).toEqual(
          await entriesOf(sourcesTar({ ...o, sources: fromDisk })),
        );
      }
    }
    for (const p of ['loop1', 'link-out', 'link-out/passwd', 'dir/ignored', 'missing', 'dup/x']) {
      expect(() => resolveSources(ctx, [p]), p).toThrow(/file does not exist/);
      expect(() => resolveSources(onDisk, [p]), p).toThrow(/file does not exist/);
    }
    await ctx.dispose();
  });
});

describe('ContextIndex', () => {
  it('refuses a context with more entries than it may hold', async () => {
    const entries: TarEntry[] = [DF, ...Array.from({ length: 10 }, (_, i) => ({ name: `e${i}`, body: '' }))];
    const small = new ContextIndex(path.join(base, 'spool'), 10);
    await expect(small.ingest(Readable.from([await tarOf(entries)]))).rejects.toMatchObject({
      kind: 'invalid',
      message: 'the build context has more than 10 entries',
    });
    const enough = new ContextIndex(path.join(base, 'spool2'), 11);
    await enough.ingest(Readable.from([await tarOf(entries)]));
    expect(enough.lstat('e9')?.size).toBe(0);
    await enough.close();
  });
});

describe('the context index refuses what extraction refuses', () => {
  const hostile: Array<[string, TarEntry[]]> = [
    ['a hard link to nothing', [{ name: 'h', type: 'link', linkname: 'nope' }]],
    [
      'a hard link to a directory',
      [
        { name: 'd/', type: 'directory' },
        { name: 'h', type: 'link', linkname: 'd' },
      ],
    ],
    [
      'a hard link replacing its own target',
      [
        { name: 'd/f', body: 'f' },
        { name: 'd', type: 'link', linkname: 'd/f' },
      ],
    ],
    ['a hard link to the root', [{ name: 'h', type: 'link', linkname: '/' }]],
    ['a hard link through a missing directory', [{ name: 'h', type: 'link', linkname: 'no/such' }]],
    [
      'a file under a file',
      [
        { name: 'f', body: 'f' },
        { name: 'f/x', body: 'x' },
      ],
    ],
    [
      'a parent that is a symlink loop',
      [
        { name: 'l1', type: 'symlink', linkname: 'l2' },
        { name: 'l2', type: 'symlink', linkname: 'l1' },
        { name: 'l1/x', body: 'x' },
      ],
    ],
    ['a symlink with no target', [{ name: 's', type: 'symlink', linkname: '' }]],
    ['a name with a component too long', [{ name: `${'n'.repeat(256)}/x`, body: 'x' }]],
  ];
  for (const [what, entries] of hostile) {
    it(what, async () => {
      const tar = await tarOf([DF, ...entries]);
      const dest = fresh();
      await mkdir(dest);
      const dirFd = openSync(dest, O_PATH | C.O_DIRECTORY);
      let old: unknown;
      try {
        const copy = { dirFd, name: '/', noOverwriteDirNonDir: false, skipDevices: true, clampNames: true };
        await applyLayer(Readable.from([tar]), '', { copy }).catch((e: unknown) => {
          old = e;
        });
      } finally {
        closeSync(dirFd);
      }
      expect(old, 'extraction refuses it').toMatchObject({ kind: 'invalid' });
      const index = new ContextIndex(path.join(base, 'spool'));
      const refused = await index.ingest(Readable.from([tar])).then(
        () => undefined,
        (e: unknown) => e as Error,
      );
      expect(refused).toMatchObject({ kind: 'invalid' });
      expect((old as Error).message.startsWith(refused!.message)).toBe(true);
    });
  }
});
