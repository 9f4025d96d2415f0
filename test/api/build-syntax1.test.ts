// POST /build with the Dockerfile 1.x syntax BuildKit brought, where the classic
// API can carry it (docs/buildkit/plan.md M4): here-documents in RUN and COPY,
// RUN --mount of caches, binds and tmpfs (never in a layer), COPY --chmod and
// --link, ADD --checksum; and the refusal of the mounts only a BuildKit
// session can serve (secrets, ssh).
import { Readable } from 'node:stream';
import { gunzipSync } from 'node:zlib';
import { pipeline } from 'node:stream/promises';
import tarStream from 'tar-stream';
import { beforeAll, describe, expect, it } from 'vitest';
import type { Daemon } from '../harness/daemon.js';
import { type Env, useEnv } from '../harness/env.js';
import { demuxText } from '../harness/streams.js';
import { type TarEntry, tarOf } from '../harness/tar.js';

const ctx = useEnv();
let env: Env;
let d: Daemon;

beforeAll(() => {
  env = ctx.env;
  d = ctx.daemon;
});

type Msg = { stream?: string; aux?: { ID: string }; error?: string };

async function build(dockerfile: string[], files: Record<string, string> = {}, params: Record<string, string> = {}) {
  const text = dockerfile.join('\n').replaceAll('FROM busybox', `FROM ${env.busybox}`);
  const raw = await tarOf(
    Object.entries({ Dockerfile: text, ...files }).map(([name, body]): TarEntry => ({ name, body, mode: 0o644 })),
  );
  const r = await d.request('POST', `/v1.41/build?${new URLSearchParams({ networkmode: 'none', ...params })}`, {
    raw,
    headers: { 'Content-Type': 'application/x-tar' },
  });
  const messages: Msg[] =
    r.status === 200
      ? r.text
          .split('\n')
          .filter(Boolean)
          .map((l) => JSON.parse(l) as Msg)
      : [];
  const out = messages.map((m) => m.stream ?? '').join('');
  const error = messages.find((m) => m.error)?.error;
  const id = [...messages].reverse().find((m) => m.aux)?.aux?.ID;
  return { status: r.status, text: r.text, out, error, id };
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

  it('COPY <<EOF writes a file (expanded unless the word is quoted), several heredocs into a directory, with --chmod', async () => {
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
    ]);
    expect(r.status, r.text).toBe(200);
    expect(r.error).toBeUndefined();
    const out = await runImage(r.id!, [
      'sh',
      '-c',
      'cat /etc/app.conf /etc/raw.conf; stat -c "%a %n" /etc/app.conf /bin/tools/A.sh /bin/tools/B.sh; /bin/tools/A.sh',
    ]);
    expect(out).toBe('name=berth\nname=$NAME\n644 /etc/app.conf\n755 /bin/tools/A.sh\n755 /bin/tools/B.sh\na\n');
  });

  it('an unterminated heredoc is a parse error', async () => {
    const r = await build(['FROM busybox', 'RUN <<EOF', 'echo never']);
    expect(r.status).toBe(400);
    expect(r.text).toContain('unterminated heredoc');
  });
});
