// POST /build against a real berthd and runc: the classic builder's stream as
// dockerd 20.10 writes it (notes captured from a real dockerd), stages and
// --target, COPY --from, the cache, ARG/ENV, ONBUILD, failing RUNs and a
// build its client abandons.
import http from 'node:http';
import { beforeAll, describe, expect, it } from 'vitest';
import type { Daemon } from '../harness/daemon.js';
import { useEnv, type Env } from '../harness/env.js';
import { type TarEntry, tarOf } from '../harness/tar.js';

const ctx = useEnv();
let env: Env;
let d: Daemon;

beforeAll(() => {
  env = ctx.env;
  d = ctx.daemon;
});

type Msg = { stream?: string; aux?: { ID: string }; error?: string; errorDetail?: { code?: number; message: string } };

/** A context tar of `files` (name → content). */
const context = (files: Record<string, string>): Promise<Buffer> =>
  tarOf(Object.entries(files).map(([name, body]): TarEntry => ({ name, body, mode: 0o644 })));

async function build(
  files: Record<string, string>,
  params: Record<string, string | string[]> = {},
): Promise<{ status: number; messages: Msg[]; text: string; out: string; id?: string }> {
  const sp = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) for (const x of Array.isArray(v) ? v : [v]) sp.append(k, x);
  const r = await d.request('POST', `/v1.41/build?${sp}`, {
    raw: await context(files),
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
  const id = messages.findLast((m) => m.aux)?.aux?.ID;
  return { status: r.status, messages, text: r.text, out, ...(id ? { id } : {}) };
}

const df = (lines: string[]) => lines.join('\n').replace('FROM busybox', `FROM ${env.busybox}`);
const inspect = async (image: string) => (await d.request('GET', `/v1.41/images/${image}/json`)).json;
const containerCount = async () => (await d.request('GET', '/containers/json?all=1')).json.length as number;

async function runImage(image: string, cmd?: string[]): Promise<string> {
  const c = await d.request('POST', '/containers/create', { body: { Image: image, ...(cmd ? { Cmd: cmd } : {}) } });
  expect(c.status, c.text).toBe(201);
  const id = c.json.Id as string;
  await d.request('POST', `/containers/${id}/start`);
  await d.request('POST', `/containers/${id}/wait`);
  const logs = await d.request('GET', `/containers/${id}/logs?stdout=1&stderr=1`);
  await d.request('DELETE', `/containers/${id}?force=1`);
  // Strip the multiplexing headers.
  const b = logs.body;
  let text = '';
  for (let i = 0; i + 8 <= b.length; ) {
    const n = b.readUInt32BE(i + 4);
    text += b.subarray(i + 8, i + 8 + n).toString();
    i += 8 + n;
  }
  return text;
}

describe('POST /build', () => {
  it('builds a 5-step Dockerfile in dockerd’s stream, then again all from the cache', async () => {
    const files = {
      Dockerfile: df(['FROM busybox', 'COPY a.txt /a.txt', 'RUN echo built > /b.txt', 'ENV FOO=bar', 'CMD ["cat", "/a.txt"]']),
      'a.txt': 'hello\n',
    };
    const before = await containerCount();
    const cold = await build(files, { t: 'simple:1' });
    expect(cold.status, cold.text).toBe(200);
    const s = cold.messages.map((m) => m.stream);
    expect(s[0]).toBe(`Step 1/5 : FROM ${env.busybox}`);
    expect(s[1]).toBe('\n');
    expect(s[2]).toMatch(/^ ---> [0-9a-f]{12}\n$/);
    expect(s[3]).toBe('Step 2/5 : COPY a.txt /a.txt');
    expect(cold.out).toMatch(/Step 3\/5 : RUN echo built > \/b.txt\n ---> Running in [0-9a-f]{12}\nRemoving intermediate container [0-9a-f]{12}\n ---> [0-9a-f]{12}\n/);
    expect(cold.out).toContain('Step 5/5 : CMD ["cat", "/a.txt"]\n');
    expect(cold.id).toMatch(/^sha256:[0-9a-f]{64}$/);
    expect(cold.out).toMatch(new RegExp(`Successfully built ${cold.id!.slice(7, 19)}\nSuccessfully tagged simple:1\n$`));
    expect(await containerCount()).toBe(before);

    const img = await inspect('simple:1');
    expect(img.Config.Cmd).toEqual(['cat', '/a.txt']);
    expect(img.Config.Env).toContain('FOO=bar');
    expect(img.ContainerConfig.Cmd).toEqual(['/bin/sh', '-c', '#(nop) ', 'CMD ["cat" "/a.txt"]']);
    const history = (await d.request('GET', '/images/simple:1/history')).json as Array<{ CreatedBy: string; Size: number }>;
    expect(history[0]!.CreatedBy).toBe('/bin/sh -c #(nop)  CMD ["cat" "/a.txt"]');
    expect(history[1]!.CreatedBy).toBe('/bin/sh -c #(nop)  ENV FOO=bar');
    expect(history[2]!.CreatedBy).toBe('/bin/sh -c echo built > /b.txt');
    expect(history[3]!.CreatedBy).toMatch(/^\/bin\/sh -c #\(nop\) COPY file:[0-9a-f]{64} in \/a.txt $/);
    expect(await runImage('simple:1')).toBe('hello\n');
    expect(await runImage('simple:1', ['cat', '/b.txt'])).toBe('built\n');

    const warm = await build(files, { t: 'simple:1' });
    expect(warm.out.match(/ ---> Using cache\n/g)?.length).toBe(4);
    expect(warm.id).toBe(cold.id);

    // A changed file invalidates its COPY and every step after it.
    const changed = await build({ ...files, 'a.txt': 'changed\n' });
    expect(changed.out).not.toContain('Using cache');
    expect(changed.out).toContain('Running in');
    expect(await runImage(changed.id!)).toBe('changed\n');
  });
});
