// POST /build with the Dockerfile 1.x syntax BuildKit brought, where the classic
// API can carry it (docs/buildkit/plan.md M4): here-documents in RUN and COPY,
// RUN --mount of caches, binds and tmpfs (never in a layer), COPY --chmod and
// --link, ADD --checksum; and the refusal of the mounts only a BuildKit
// session can serve (secrets, ssh).
import { createHash } from 'node:crypto';
import { readdirSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { Readable } from 'node:stream';
import { gunzipSync } from 'node:zlib';
import { pipeline } from 'node:stream/promises';
import tarStream from 'tar-stream';
import { beforeAll, describe, expect, it } from 'vitest';
import { buildRaw } from '../harness/build.js';
import type { Daemon } from '../harness/daemon.js';
import { type Env, useEnv } from '../harness/env.js';
import { expectNoLeaks, holdings } from '../harness/leaks.js';
import { demuxText } from '../harness/streams.js';
import { type TarEntry, tarOf } from '../harness/tar.js';

const ctx = useEnv();
let env: Env;
let d: Daemon;

beforeAll(() => {
  env = ctx.env;
  d = ctx.daemon;
});

const contextOf = (dockerfile: string[], files: Record<string, string>) =>
  tarOf(
    Object.entries({
      Dockerfile: dockerfile.join('\n').replaceAll('FROM busybox', `FROM ${env.busybox}`),
      ...files,
    }).map(([name, body]): TarEntry => ({ name, body, mode: 0o644 })),
  );
const buildPath = (params: Record<string, string> = {}) =>
  `/v1.41/build?${new URLSearchParams({ networkmode: 'none', ...params })}`;

async function build(dockerfile: string[], files: Record<string, string> = {}, params: Record<string, string> = {}) {
  const b = await buildRaw(d, await contextOf(dockerfile, files), { networkmode: 'none', ...params });
  return { status: b.status, text: b.response.text, out: b.text, error: b.error, id: b.id };
}

/** A build whose stream is watched as it comes: `saw` resolves once `text` was in it, `done` with all of it. */
function streamBuild(raw: Buffer): { saw(text: string): Promise<void>; done: Promise<string> } {
  let text = '';
  const waiters: Array<() => void> = [];
  const done = new Promise<string>((resolve, reject) => {
    const req = http.request(
      { socketPath: d.socket, method: 'POST', path: buildPath(), headers: { 'Content-Type': 'application/x-tar' } },
      (res) => {
        res.setEncoding('utf8');
        res.on('data', (c: string) => {
          text += c;
          for (const w of waiters.splice(0)) w();
        });
        res.on('end', () => resolve(text));
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end(raw);
  });
  const saw = async (t: string) => {
    while (!text.includes(t)) {
      const more = new Promise<void>((resolve) => waiters.push(resolve));
      await Promise.race([more, done]);
      if (!text.includes(t) && (await Promise.race([done.then(() => true), Promise.resolve(false)])))
        throw new Error(`the build ended without ${t}: ${text}`);
    }
  };
  return { saw, done };
}

/** The image's command output (its CMD, or `cmd`). */
async function runImage(image: string, cmd: string[]): Promise<string> {
  const c = await d.request('POST', '/containers/create', { body: { Image: image, Cmd: cmd } });
  expect(c.status, c.text).toBe(201);
  const id = c.json.Id as string;
  await d.request('POST', `/containers/${id}/start`);
  await d.request('POST', `/containers/${id}/wait`);
  const logs = await d.request('GET', `/containers/${id}/logs?stdout=1&stderr=1`);
  await d.request('DELETE', `/containers/${id}?force=1`);
  return demuxText(logs.body);
}

/** A tar's entries as name → bytes. */
async function tarFiles(tar: NodeJS.ReadableStream | Buffer): Promise<Map<string, Buffer>> {
  const out = new Map<string, Buffer>();
  const x = tarStream.extract();
  x.on('entry', (h, body, next) => {
    const chunks: Buffer[] = [];
    body.on('data', (c: unknown) => chunks.push(c as Buffer));
    body.on('end', () => {
      out.set(h.name, Buffer.concat(chunks));
      next();
    });
  });
  await pipeline(Buffer.isBuffer(tar) ? Readable.from([tar]) : tar, x);
  return out;
}

/** The paths of each of the image's last `n` layers (through `docker save`'s tar). */
async function layerPaths(image: string, n: number): Promise<string[][]> {
  const r = await d.request('GET', `/images/${image}/get`);
  const saved = await tarFiles(r.body);
  const manifest = JSON.parse(saved.get('manifest.json')!.toString()) as Array<{ Layers: string[] }>;
  const out: string[][] = [];
  for (const name of manifest[0]!.Layers.slice(-n)) {
    const layer = saved.get(name)!;
    out.push([...(await tarFiles(layer[0] === 0x1f ? gunzipSync(layer) : layer)).keys()].sort());
  }
  return out;
}

describe('POST /build: here-documents', () => {
  it('RUN <<EOF runs its body with the shell; <<-EOF drops tabs; a #! body runs as a script; RUN <<EOF bash-style hands the bodies to the command', async () => {
    const r = await build([
      'FROM busybox',
      'ARG WHO=world',
      'RUN <<EOF',
      'echo "hello $WHO" > /one',
      'echo second line >> /one',
      'EOF',
      'RUN <<-EOT',
      '\techo tabbed > /two',
      '\tEOT',
      'RUN <<EOF',
      '#!/bin/sh -e',
      'echo "script $0" > /three',
      'EOF',
      'RUN cat <<A >/four && cat <<B >>/four',
      'first $WHO',
      'A',
      'second',
      'B',
      'RUN sh <<EOF',
      'echo from-stdin > /five',
      'EOF',
      'CMD ["cat", "/one", "/two", "/three", "/four", "/five"]',
    ]);
    expect(r.status, r.text).toBe(200);
    expect(r.error).toBeUndefined();
    expect(await runImage(r.id!, ['cat', '/one', '/two', '/three', '/four', '/five'])).toBe(
      'hello world\nsecond line\ntabbed\nscript /dev/pipes/EOF\nfirst world\nsecond\nfrom-stdin\n',
    );
    // Each step's layer holds its file alone: the script's mount point under /dev is not in it.
    expect(await layerPaths(r.id!, 5)).toEqual([['one'], ['two'], ['three'], ['four'], ['five']]);
  });

  it('COPY <<EOF writes a file (expanded unless the word is quoted), several heredocs into a directory, with --chmod; ADD <<EOF', async () => {
    const r = await build([
      'FROM busybox',
      'ARG NAME=berth',
      'COPY <<EOF /etc/app.conf',
      'name=$NAME',
      'EOF',
      "COPY <<'EOF' /etc/raw.conf",
      'name=$NAME',
      'EOF',
      'COPY --chmod=0755 <<A.sh <<B.sh /bin/tools/',
      '#!/bin/sh',
      'echo a',
      'A.sh',
      'echo b',
      'B.sh',
      'ADD <<EOF /etc/added',
      'added $NAME',
      'EOF',
    ]);
    expect(r.status, r.text).toBe(200);
    expect(r.error).toBeUndefined();
    const out = await runImage(r.id!, [
      'sh',
      '-c',
      'cat /etc/app.conf /etc/raw.conf /etc/added; stat -c "%a %n" /etc/app.conf /bin/tools/A.sh /bin/tools/B.sh; /bin/tools/A.sh',
    ]);
    expect(out).toBe(
      'name=berth\nname=$NAME\nadded berth\n644 /etc/app.conf\n755 /bin/tools/A.sh\n755 /bin/tools/B.sh\na\n',
    );
  });

  it('an unterminated heredoc is a parse error', async () => {
    const r = await build(['FROM busybox', 'RUN <<EOF', 'echo never']);
    expect(r.status).toBe(400);
    expect(r.text).toContain('unterminated heredoc');
  });
});

describe('POST /build: RUN --mount', () => {
  it('type=cache: kept across builds, shared by id, private gets its own when in use, never in the layer', async () => {
    const first = await build([
      'FROM busybox',
      'RUN --mount=type=cache,target=/cache,id=syntax1-c echo one >> /cache/log && cat /cache/log > /seen1',
    ]);
    expect(first.status, first.text).toBe(200);
    expect(first.error).toBeUndefined();
    // Another build (its RUN not cached: a different command) sees what the first left, through the id.
    const second = await build([
      'FROM busybox',
      'RUN --mount=type=cache,target=/other,id=syntax1-c --mount=type=cache,target=/p1,id=syntax1-p,sharing=private --mount=type=cache,target=/p2,id=syntax1-p,sharing=private \\',
      '  echo two >> /other/log && cat /other/log > /seen2 && touch /p1/x && ls /p2 > /p2seen',
    ]);
    expect(second.status, second.text).toBe(200);
    expect(second.error).toBeUndefined();
    expect(await runImage(second.id!, ['cat', '/seen2', '/p2seen'])).toBe('one\ntwo\n');
    // The layer holds what the command wrote outside the mounts, and not the mount points.
    expect((await layerPaths(second.id!, 1))[0]).toEqual(['p2seen', 'seen2']);
  });

  it('type=cache,sharing=locked: a build waits while another holds the cache; shared does not', async () => {
    // Build A holds the cache (a marker in it) for up to 3 s, less if B tells it to go on; B looks for the marker.
    const dockerfile = (sharing: string, cmd: string) => [
      'FROM busybox',
      `RUN --mount=type=cache,target=/c,id=syntax1-lock-${sharing},sharing=${sharing} ${cmd}`,
    ];
    for (const [sharing, seen] of [
      ['locked', 'alone'],
      ['shared', 'overlapped'],
    ] as const) {
      const hold = `touch /c/held; echo holding-${sharing}; i=0; while [ $i -lt 30 ] && ! [ -e /c/go ]; do sleep 0.1; i=$((i+1)); done; rm -f /c/held /c/go`;
      const holder = streamBuild(await contextOf(dockerfile(sharing, hold), {}));
      // Its output, not the step header that names it too (the stream is JSON: the newline escaped).
      await holder.saw(`holding-${sharing}\\n`);
      const other = await build(
        dockerfile(sharing, '(test -e /c/held && echo overlapped || echo alone) > /seen; touch /c/go'),
      );
      expect(await holder.done).toContain('Successfully built');
      expect(other.error).toBeUndefined();
      expect(await runImage(other.id!, ['cat', '/seen'])).toBe(`${seen}\n`);
    }
  });

  it('type=cache,from=,source=: a new cache starts as a copy of that stage’s directory', async () => {
    const r = await build([
      'FROM busybox AS seed',
      'RUN mkdir -p /seed && echo seeded > /seed/f && chown 7:8 /seed/f',
      'FROM busybox',
      'RUN --mount=type=cache,target=/c,id=syntax1-seed,from=seed,source=/seed stat -c "%u:%g $(cat /c/f)" /c/f > /got && echo more > /c/g',
      'RUN --mount=type=cache,target=/c,id=syntax1-seed,from=seed,source=/seed ls /c > /again',
    ]);
    expect(r.status, r.text).toBe(200);
    expect(r.error).toBeUndefined();
    expect(await runImage(r.id!, ['cat', '/got', '/again'])).toBe('7:8 seeded\nf\ng\n');
  });

  it('the cache key holds the mount options: the same command with another target runs again', async () => {
    const dockerfile = (target: string) => ['FROM busybox', `RUN --mount=type=tmpfs,target=${target} echo ran`];
    const a = await build(dockerfile('/t1'));
    const again = await build(dockerfile('/t1'));
    const other = await build(dockerfile('/t2'));
    expect([a.status, again.status, other.status]).toEqual([200, 200, 200]);
    expect(again.out).toContain('Using cache');
    expect(other.out).not.toContain('Using cache');
    expect(other.out).toContain('ran');
    // A bind's content counts, as BuildKit keys an exec on its inputs: a changed context file runs the step again.
    const bound = (text: string) =>
      build(['FROM busybox', 'RUN --mount=source=dep.txt,target=/dep.txt cat /dep.txt'], { 'dep.txt': text });
    expect((await bound('v1\n')).out).toContain('v1');
    expect((await bound('v1\n')).out).toContain('Using cache');
    const changed = await bound('v2\n');
    expect(changed.out).not.toContain('Using cache');
    expect(changed.out).toContain('v2');
  });

  it('type=bind: the context read-only by default, rw changes thrown away; from a stage; type=tmpfs is a tmpfs', async () => {
    const held = holdings(d);
    const r = await build(
      [
        'FROM busybox AS tools',
        'RUN echo tool > /tool.txt',
        'FROM busybox',
        'RUN --mount=target=/ctx (echo x > /ctx/new 2>/dev/null && echo writable || echo read-only) > /ro && cat /ctx/sub/a.txt > /a',
        'RUN --mount=type=bind,source=sub,target=/ctx,rw echo changed > /ctx/a.txt && cat /ctx/a.txt > /rw',
        'RUN --mount=type=bind,from=tools,source=/tool.txt,target=/t.txt cat /t.txt > /tool',
        'RUN --mount=type=tmpfs,target=/scratch,size=1m grep " /scratch " /proc/mounts | cut -d" " -f3 > /fs && echo data > /scratch/f',
        'RUN --mount=type=bind,source=sub,target=/ctx cat /ctx/a.txt > /after',
      ],
      { 'sub/a.txt': 'from context\n' },
    );
    expect(r.status, r.text).toBe(200);
    expect(r.error).toBeUndefined();
    expect(await runImage(r.id!, ['cat', '/ro', '/a', '/rw', '/tool', '/fs', '/after'])).toBe(
      'read-only\nfrom context\nchanged\ntool\ntmpfs\nfrom context\n',
    );
    expect(await layerPaths(r.id!, 5)).toEqual([['a', 'ro'], ['rw'], ['tool'], ['fs'], ['after']]);
    // Nothing the mounts needed is left: no mount, no directory of the build's.
    await expectNoLeaks(d, held, 20_000);
    expect(readdirSync(path.join(d.dataRoot, 'builds'))).toEqual([]);
  });

  it('type=secret and type=ssh need a BuildKit session: refused by the classic API, saying so', async () => {
    for (const type of ['secret,id=tok', 'ssh']) {
      const r = await build(['FROM busybox', `RUN --mount=type=${type} echo never`]);
      expect(r.status, r.text).toBe(200);
      expect(r.error).toMatch(/^RUN --mount=type=(secret|ssh) needs the client's BuildKit session/);
      expect(r.out).not.toMatch(/^never$/m);
    }
  });
});

describe('POST /build: RUN --network', () => {
  it('none cuts a RUN off a build that has the host’s network; host is refused to a build that was not given it', async () => {
    const r = await build(
      [
        'FROM busybox',
        'RUN --network=none ls /sys/class/net > /none',
        'RUN ls /sys/class/net | grep -vx lo | wc -l > /host',
      ],
      {},
      { networkmode: 'host' },
    );
    expect(r.status, r.text).toBe(200);
    expect(r.error).toBeUndefined();
    const [none, host] = (await runImage(r.id!, ['cat', '/none', '/host'])).split('\n');
    expect(none).toBe('lo');
    expect(Number(host)).toBeGreaterThan(0);
    const refused = await build(['FROM busybox', 'RUN --network=host true']);
    expect(refused.error).toBe('network.host is not allowed');
  });
});

describe('POST /build: ADD --checksum, COPY --link', () => {
  it('ADD --checksum verifies the download: a mismatch fails in BuildKit’s words', async () => {
    const body = 'downloaded\n';
    const server = http.createServer((_req, res) => res.end(body));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/file.txt`;
    try {
      const sum = `sha256:${createHash('sha256').update(body).digest('hex')}`;
      const ok = await build(['FROM busybox', `ADD --checksum=${sum} ${url} /got`, 'COPY --link a /a'], {
        a: 'linked\n',
      });
      expect(ok.status, ok.text).toBe(200);
      expect(ok.error).toBeUndefined();
      expect(await runImage(ok.id!, ['cat', '/got', '/a'])).toBe('downloaded\nlinked\n');
      const wrong = `sha256:${'0'.repeat(64)}`;
      const bad = await build(['FROM busybox', `ADD --checksum=${wrong} ${url} /got`]);
      expect(bad.error).toBe(`digest mismatch for ${url}: ${sum} (expected: ${wrong})`);
      const local = await build(['FROM busybox', `ADD --checksum=${sum} a /a`], { a: 'x' });
      expect(local.error).toBe('checksum requires HTTP(S) sources');
    } finally {
      server.close();
    }
  });
});

describe('POST /build: platform args and the syntax directive', () => {
  it('TARGETPLATFORM, TARGETARCH, BUILDPLATFORM… are predefined meta args: in FROM, and in a stage once declared', async () => {
    const arch = process.arch === 'x64' ? 'amd64' : process.arch;
    const r = await build([
      '# syntax=docker/dockerfile:1',
      'FROM busybox AS base-linux',
      'FROM base-$TARGETOS',
      'ARG TARGETPLATFORM TARGETARCH BUILDOS TARGETVARIANT',
      'RUN echo "$TARGETPLATFORM|$TARGETARCH|$BUILDOS|$TARGETVARIANT|$BUILDARCH" > /p',
    ]);
    expect(r.status, r.text).toBe(200);
    expect(r.error).toBeUndefined();
    expect(await runImage(r.id!, ['cat', '/p'])).toBe(`linux/${arch}|${arch}|linux||\n`);
  });
});
