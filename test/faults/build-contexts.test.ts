// Hostile build contexts sent to POST /build: names that climb out (`../`),
// absolute names, symlinks in the context pointing out of it (COPY must never
// follow them out), a symlink followed by a file "through" it, hard links to
// files outside, and a huge context (a gzip bomb). Each is refused or
// contained as dockerd 20.10 contains it (traversal and absolute names made
// relative to the context, symlinks resolved as if the context were `/`), and
// nothing outside the context is read or written. A huge context costs disk,
// not memory, and goes when the build ends.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { PassThrough } from 'node:stream';
import zlib from 'node:zlib';
import * as tarStream from 'tar-stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildRaw, type BuildResult, contextTar } from '../harness/build.js';
import { runToEnd, useEnv } from '../harness/env.js';

const ctx = useEnv();
/** A directory on the host, outside every context: what must stay unread and unwritten. */
let host: string;
const SECRET = 'HOST SECRET, never in an image\n';

beforeAll(() => {
  host = mkdtempSync(path.join(os.tmpdir(), 'berth-host-'));
  writeFileSync(path.join(host, 'secret.txt'), SECRET);
  writeFileSync(path.join(host, 'victim.txt'), 'unchanged\n');
});

afterAll(() => {
  rmSync(host, { recursive: true, force: true });
});

/** Host path without its leading slash (as a relative name inside a context). */
const rel = (p: string) => p.replace(/^\/+/, '');

/** Runs `cmd` in the built image; resolves with its stdout. */
const runIn = (image: string, cmd: string[]) => runToEnd(ctx.daemon, { Image: image, Cmd: cmd });

/** A refused build: an HTTP error, or an error record in the stream. */
const refused = (r: BuildResult) => r.status !== 200 || r.error !== undefined;

function hostUntouched() {
  expect(readFileSync(path.join(host, 'victim.txt'), 'utf8')).toBe('unchanged\n');
  expect(execFileSync('ls', ['-A', host], { encoding: 'utf8' }).split('\n').filter(Boolean).sort()).toEqual([
    'secret.txt',
    'victim.txt',
  ]);
}

describe('names that climb out of the context', () => {
  it('../ names: refused, or kept inside the context as dockerd does', async () => {
    const tar = await contextTar({ Dockerfile: `FROM ${ctx.env.busybox}\nCOPY . /ctx/\n` }, [
      { name: `../../../../../../../../${rel(host)}/escaped.txt`, body: 'escaped\n', mode: 0o644 },
      { name: `sub/../../${rel(host)}/escaped2.txt`, body: 'escaped\n', mode: 0o644 },
    ]);
    const r = await buildRaw(ctx.daemon, tar, { t: 'hostile-traversal' });
    hostUntouched();
    if (!refused(r)) {
      const found = await runIn('hostile-traversal', ['find', '/ctx', '-name', 'escaped*']);
      for (const line of found.split('\n').filter(Boolean)) expect(line.startsWith('/ctx/')).toBe(true);
    }
  });

  it('absolute names: refused, or made relative to the context', async () => {
    const tar = await contextTar({ Dockerfile: `FROM ${ctx.env.busybox}\nCOPY . /ctx/\n` }, [
      { name: `${host}/absolute.txt`, body: 'absolute\n', mode: 0o644 },
    ]);
    const r = await buildRaw(ctx.daemon, tar, { t: 'hostile-absolute' });
    hostUntouched();
    if (!refused(r)) {
      expect(await runIn('hostile-absolute', ['cat', `/ctx/${rel(host)}/absolute.txt`])).toBe('absolute\n');
    }
  });

  it('a file written "through" a symlink that points out is not written outside', async () => {
    const tar = await contextTar({ Dockerfile: `FROM ${ctx.env.busybox}\nCOPY . /ctx/\n` }, [
      { name: 'out', type: 'symlink', linkname: host },
      { name: 'out/planted.txt', body: 'planted\n', mode: 0o644 },
      { name: 'rel-out', type: 'symlink', linkname: `../../../../../../../..${host}` },
      { name: 'rel-out/planted2.txt', body: 'planted\n', mode: 0o644 },
    ]);
    await buildRaw(ctx.daemon, tar, { nocache: '1' });
    hostUntouched();
  });

  it('a hard link to a file outside: refused or contained; writing through it changes nothing outside', async () => {
    const tar = await contextTar({ Dockerfile: `FROM ${ctx.env.busybox}\nCOPY . /ctx/\n` }, [
      { name: 'hl', type: 'link', linkname: `../../../../../../../..${host}/victim.txt` },
      { name: 'hl', body: 'overwritten through the link\n', mode: 0o644 },
      { name: 'hl-abs', type: 'link', linkname: `${host}/secret.txt` },
    ]);
    const r = await buildRaw(ctx.daemon, tar, { t: 'hostile-hardlink', nocache: '1' });
    hostUntouched();
    if (!refused(r)) {
      const all = await runIn('hostile-hardlink', ['sh', '-c', 'cat /ctx/* 2>/dev/null; true']);
      expect(all).not.toContain(SECRET.trim());
    }
  });
});

describe('symlinks in the context that point out of it', () => {
  const links = () => [
    { name: 'dir-abs', type: 'symlink' as const, linkname: host },
    { name: 'dir-rel', type: 'symlink' as const, linkname: `../../../../../../../../../..${host}` },
    { name: 'file-abs', type: 'symlink' as const, linkname: `${host}/secret.txt` },
    { name: 'root', type: 'symlink' as const, linkname: '/' },
  ];

  it.each([
    ['COPY dir-abs/secret.txt /s', 'an absolute link to a directory'],
    ['COPY dir-rel/secret.txt /s', 'a relative link climbing to a directory'],
    ['COPY file-abs /s', 'an absolute link to a file'],
    [`COPY root${host}/secret.txt /s`, 'a link to /'],
    ['COPY dir-* /s/', 'a wildcard over links'],
  ])('%s (%s) never copies the host file', async (copy) => {
    const tar = await contextTar({ Dockerfile: `FROM ${ctx.env.busybox}\n${copy}\n` }, links());
    const r = await buildRaw(ctx.daemon, tar, { t: 'hostile-symlink', nocache: '1' });
    if (!refused(r)) {
      const out = await runIn('hostile-symlink', [
        'sh',
        '-c',
        'find /s -type f -exec cat {} + 2>/dev/null; cat /s 2>/dev/null; true',
      ]);
      expect(out).not.toContain(SECRET.trim());
    } else {
      expect(r.error ?? r.response.json?.message).not.toContain(SECRET.trim());
    }
  });

  it("resolves them as if the context were / (the context's own file of that name), as dockerd does", async () => {
    const tar = await contextTar(
      {
        Dockerfile: `FROM ${ctx.env.busybox}\nCOPY dir-abs/secret.txt /s\n`,
        [`${rel(host)}/secret.txt`]: 'the context copy\n',
      },
      links(),
    );
    const r = await buildRaw(ctx.daemon, tar, { t: 'hostile-chroot', nocache: '1' });
    expect(r.error).toBeUndefined();
    expect(await runIn('hostile-chroot', ['cat', '/s'])).toBe('the context copy\n');
  });

  it('COPY . copies the links as links, not what they point at', async () => {
    const tar = await contextTar({ Dockerfile: `FROM ${ctx.env.busybox}\nCOPY . /ctx/\n` }, links());
    const r = await buildRaw(ctx.daemon, tar, { t: 'hostile-links', nocache: '1' });
    expect(r.error).toBeUndefined();
    expect(await runIn('hostile-links', ['readlink', '/ctx/file-abs'])).toBe(`${host}/secret.txt\n`);
    expect(await runIn('hostile-links', ['sh', '-c', 'cat /ctx/file-abs 2>&1; true'])).not.toContain(SECRET.trim());
  });
});

describe('a huge context', () => {
  /** A gzip'd tar holding one file of `bytes` zeros: a few MB on the wire. */
  async function gzipBomb(bytes: number): Promise<Buffer> {
    const pack = tarStream.pack();
    const gz = zlib.createGzip({ level: 9 });
    const chunks: Buffer[] = [];
    const done = new Promise<void>((resolve, reject) => {
      gz.on('data', (c: Buffer) => chunks.push(c));
      gz.on('end', resolve);
      gz.on('error', reject);
    });
    pack.pipe(gz);
    pack.entry({ name: 'Dockerfile', mode: 0o644 }, `FROM ${ctx.env.busybox}\nRUN echo built\n`);
    const entry = pack.entry({ name: 'zeros.bin', size: bytes, mode: 0o644 });
    const zeros = Buffer.alloc(1024 * 1024);
    const src = new PassThrough();
    src.pipe(entry);
    for (let left = bytes; left > 0; left -= zeros.length) {
      if (!src.write(left >= zeros.length ? zeros : zeros.subarray(0, left)))
        await new Promise((r) => src.once('drain', r));
    }
    src.end();
    await new Promise<void>((r) => entry.on('finish', () => r()));
    pack.finalize();
    await done;
    return Buffer.concat(chunks);
  }

  const rss = () =>
    Number(/^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${ctx.daemon.proc.pid}/status`, 'utf8'))![1]) * 1024;
  const du = () => Number(execFileSync('du', ['-sb', ctx.daemon.dir], { encoding: 'utf8' }).split('\t')[0]);

  it('1 GiB expanded from 1 MB: refused or built with bounded memory, and removed after', async () => {
    const GiB = 1024 * 1024 * 1024;
    const body = await gzipBomb(GiB);
    expect(body.length).toBeLessThan(8 * 1024 * 1024);
    const rssBefore = rss();
    const duBefore = du();
    let peak = rssBefore;
    const sampler = setInterval(() => {
      try {
        peak = Math.max(peak, rss());
      } catch {}
    }, 20);
    try {
      const r = await buildRaw(ctx.daemon, body, { nocache: '1' });
      if (!refused(r)) expect(r.text).toContain('built\n');
    } finally {
      clearInterval(sampler);
    }
    // Streamed to disk, not held: far less than the gigabyte.
    expect(peak - rssBefore).toBeLessThan(256 * 1024 * 1024);
    // The extracted context is gone once the build has ended.
    await new Promise((r) => setTimeout(r, 500));
    expect(du() - duBefore).toBeLessThan(64 * 1024 * 1024);
  });

  it('a client that hangs up in the middle of a large context leaves no temp files behind', async () => {
    const duBefore = du();
    const http = await import('node:http');
    await new Promise<void>((resolve) => {
      const req = http.request({
        socketPath: ctx.daemon.socket,
        method: 'POST',
        path: '/v1.41/build',
        headers: { 'Content-Type': 'application/x-tar', 'Content-Length': String(512 * 1024 * 1024) },
      });
      req.on('error', () => resolve());
      const pack = tarStream.pack();
      // The hang-up is the point: the pack and its entry see the request's end as their error.
      pack.on('error', () => undefined);
      pack.pipe(req);
      pack.entry({ name: 'Dockerfile', mode: 0o644 }, 'FROM busybox\n');
      const entry = pack.entry({ name: 'big.bin', size: 400 * 1024 * 1024, mode: 0o644 });
      entry.on('error', () => undefined);
      let sent = 0;
      const chunk = Buffer.alloc(1024 * 1024, 7);
      const pump = (): void => {
        while (sent < 100 * 1024 * 1024) {
          sent += chunk.length;
          if (!entry.write(chunk)) {
            entry.once('drain', pump);
            return;
          }
        }
        req.destroy();
        setTimeout(resolve, 100);
      };
      pump();
    });
    // berthd notices the hang-up and removes what it had extracted.
    const deadline = Date.now() + 15_000;
    while (du() - duBefore > 16 * 1024 * 1024 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
    expect(du() - duBefore).toBeLessThan(16 * 1024 * 1024);
    expect(existsSync(ctx.daemon.socket)).toBe(true);
    expect((await ctx.daemon.request('GET', '/_ping')).status).toBe(200);
  });
});
