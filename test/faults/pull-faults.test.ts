// A pull facing a bad registry: each fault at each step of a pull (token,
// manifest, index, platform manifest, config, each layer), through a
// programmable front (harness/faulty-registry.ts) in front of a real token
// registry. Every row checks what a user would: the pull fails with a clear
// message, berthd keeps serving (another pull runs meanwhile), nothing
// half-pulled is listed, nothing is left behind, and a later pull works and
// downloads no layer blob again that it had already verified.
//
// A stall is ended by the client hanging up (dockerd has no timeout either;
// berth's own, registry-stall-timeout, has its test below): the pull must stop
// and let go of everything.
import { existsSync } from 'node:fs';
import http from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startDaemon, waitFor, type Daemon } from '../harness/daemon.js';
import { startFaultyRegistry, type Fault, type FaultyRegistry, type Seen } from '../harness/faulty-registry.js';
import { buildImage, buildLayer, pushImage, pushIndex, randomContent, type Image } from '../harness/images.js';
import { expectNoLeaks, holdings } from '../harness/leaks.js';
import { startRegistry, type Registry } from '../harness/registry.js';

// API connections close after each answer (Node 20's global agent keeps them alive):
// then a descriptor berthd holds after a row is one it kept for itself.
http.globalAgent = new http.Agent({ keepAlive: false });

type Step = 'token' | 'manifest' | 'index' | 'platform manifest' | 'config' | 'layer 1' | 'layer 2';

interface Case {
  step: Step;
  fault: Fault;
  /** What the pull's error must say. */
  message: RegExp;
}

/** The faults tried at every step, with what the error must say whatever the step. */
const FAULTS: { fault: Fault; message: RegExp }[] = [
  { fault: { kind: 'status', status: 404 }, message: /injected 404|unknown blob/ },
  { fault: { kind: 'status', status: 500 }, message: /injected 500/ },
  { fault: { kind: 'status', status: 401 }, message: /injected 401|unauthorized/ },
  {
    fault: { kind: 'reset', afterBytes: 100 },
    message: /connection reset|aborted|socket hang up|size mismatch|unexpected end|decode/,
  },
  { fault: { kind: 'stall' }, message: /client went away/ },
  { fault: { kind: 'stall', afterBytes: 100 }, message: /client went away/ },
  {
    fault: { kind: 'corrupt' },
    message: /verification failed|token that is not a valid header value|decode token|unauthorized/,
  },
  { fault: { kind: 'length', declared: 'short' }, message: /verification failed|size mismatch|decode token/ },
  { fault: { kind: 'length', declared: 'long' }, message: /size mismatch|aborted|socket hang up|connection reset/ },
  { fault: { kind: 'extra', bytes: 4096 }, message: /verification failed|size mismatch|decode token/ },
  { fault: { kind: 'extra', bytes: 'endless' }, message: /size mismatch|exceeds the|limit|decode token/ },
  { fault: { kind: 'redirect-loop' }, message: /stopped after 10 redirects/ },
];

const STEPS: Step[] = ['token', 'manifest', 'index', 'platform manifest', 'config', 'layer 1', 'layer 2'];
const CASES: Case[] = STEPS.flatMap((step) => FAULTS.map((f) => ({ step, ...f })));

const isStall = (f: Fault) => f.kind === 'stall';
const faultName = (f: Fault) =>
  f.kind === 'status'
    ? String(f.status)
    : f.kind === 'stall'
      ? `stall${f.afterBytes === undefined ? '' : ' mid-body'}`
      : f.kind === 'length'
        ? `${f.declared} Content-Length`
        : f.kind === 'extra'
          ? `extra bytes (${f.bytes})`
          : f.kind;

let registry: Registry;
let front: FaultyRegistry;
let d: Daemon;
let serial = 0;

/** A fresh image of `layers` layers of its own (nothing shared with another row), pushed as `repo:latest`. */
async function freshImage(repo: string, opts: { asIndex?: boolean; layers?: number } = {}): Promise<Image> {
  const { asIndex = false, layers = 2 } = opts;
  const n = ++serial;
  const layer = (i: number) =>
    buildLayer([{ path: `data-${i}.bin`, content: randomContent(`pull-faults-${process.pid}-${n}-${i}`, 48 * 1024) }], {
      level: 0,
    });
  const built = await Promise.all(Array.from({ length: layers }, (_, i) => layer(i + 1)));
  const image = buildImage({ layers: built, config: { Cmd: ['true'], Labels: { row: String(n) } } });
  if (asIndex) await pushIndex(registry, repo, 'latest', [{ image }]);
  else await pushImage(registry, repo, 'latest', image);
  return image;
}

/** The request a step makes, as a path pattern on the front. */
function stepPath(step: Step, repo: string, image: Image): RegExp {
  const esc = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  switch (step) {
    case 'token':
      return new RegExp(`^/token\\?.*repository%3A${esc(repo)}%3Apull`);
    case 'manifest':
    case 'index':
      return new RegExp(`^/v2/${esc(repo)}/manifests/latest$`);
    case 'platform manifest':
      return new RegExp(`^/v2/${esc(repo)}/manifests/${esc(image.digest)}$`);
    case 'config':
      return new RegExp(`^/v2/${esc(repo)}/blobs/${esc(image.configDigest)}$`);
    case 'layer 1':
      return new RegExp(`^/v2/${esc(repo)}/blobs/${esc(image.layers[0]!.digest)}$`);
    case 'layer 2':
      return new RegExp(`^/v2/${esc(repo)}/blobs/${esc(image.layers[1]!.digest)}$`);
  }
}

interface Outcome {
  status: number;
  /** The error, from the body of a failed answer or the stream's errorDetail. */
  error?: string;
}

/** A pull over the API, that `hangUp` can abandon half-way as a client does; `text` is what it has read so far. */
function startPull(ref: string): { done: Promise<Outcome>; hangUp: () => void; text: () => string } {
  const [name, tag] = [ref.slice(0, ref.lastIndexOf(':')), ref.slice(ref.lastIndexOf(':') + 1)];
  let req: http.ClientRequest;
  let text = '';
  const done = new Promise<Outcome>((resolve, reject) => {
    const path = `/v1.43/images/create?fromImage=${encodeURIComponent(name)}&tag=${encodeURIComponent(tag)}`;
    req = http.request({ socketPath: d.socket, method: 'POST', path, headers: { Host: 'localhost' } }, (res) => {
      res.on('data', (c: Buffer) => (text += c.toString()));
      res.on('error', () => resolve({ status: res.statusCode ?? 0, error: 'the client went away' }));
      res.on('end', () => {
        if (res.statusCode !== 200) return resolve({ status: res.statusCode ?? 0, error: JSON.parse(text).message });
        const last = JSON.parse(text.trim().split('\n').at(-1) ?? '{}');
        resolve({ status: 200, ...(last.error ? { error: last.error } : {}) });
      });
    });
    req.on('error', (e) => (req.destroyed ? resolve({ status: 0, error: 'the client went away' }) : reject(e)));
    req.end();
  });
  return { done, hangUp: () => req.destroy(), text: () => text };
}

const pull = (ref: string) => startPull(ref).done;

async function listed(): Promise<string[]> {
  const r = await d.request('GET', '/images/json');
  return (r.json as { RepoTags: string[] | null }[]).flatMap((i) => i.RepoTags ?? []);
}

/** Whole answers the front gave (no fault) for a path: blobs berthd had all of. */
const delivered = (path: RegExp, size: number) =>
  front.requests.filter((r: Seen) => path.test(r.path) && !r.fault && r.closed && r.bytes === size).length;

beforeAll(async () => {
  registry = await startRegistry({ auth: 'token', anonymousPull: true });
  front = await startFaultyRegistry(registry);
  d = await startDaemon();
  await freshImage('warm');
  expect((await pull(`${front.host}/warm:latest`)).error).toBeUndefined();
});

afterAll(async () => {
  front?.clear();
  await d?.cleanup();
  await front?.close();
  await registry?.stop();
});

interface Row extends Case {
  repo: string;
  image: Image;
  good: string;
}

/**
 * One row: the faulty pull and another pull run together; a stall is
 * ended by the client hanging up once the other pull is done. Resolves with
 * the faulty pull's error.
 */
async function faultyPull(row: Row): Promise<string> {
  const rule = front.inject({ path: stepPath(row.step, row.repo, row.image), fault: row.fault });
  const faulty = startPull(`${front.host}/${row.repo}:latest`);
  if (isStall(row.fault)) {
    await rule.hit();
    // Stalled: berthd serves others meanwhile, then the client gives up.
    expect((await d.request('GET', '/_ping')).status).toBe(200);
    expect((await pull(row.good)).error, 'another pull, during the stall').toBeUndefined();
    faulty.hangUp();
    const held = front.requests.filter(
      (r) => r.fault === 'stall' && stepPath(row.step, row.repo, row.image).test(r.path),
    );
    await waitFor(() => held.every((r) => r.closed) || undefined, 'berthd to hang up on the stalled registry', 10_000);
    rule.remove();
    return (await faulty.done).error ?? '';
  }
  const [bad, ok] = await Promise.all([faulty.done, pull(row.good)]);
  rule.remove();
  expect(ok.error, 'another pull, at the same time').toBeUndefined();
  if (bad.status !== 200) expect(bad.status).toBeGreaterThanOrEqual(400);
  // berthd has hung up on every faulty answer, an endless one included, having read
  // no more of it than a socket's buffers hold beyond what it wanted.
  const faulted = front.requests.filter((r) => r.fault && stepPath(row.step, row.repo, row.image).test(r.path));
  await waitFor(() => faulted.every((r) => r.closed) || undefined, 'berthd to hang up on the faulty registry', 10_000);
  for (const r of faulted) expect(r.bytes).toBeLessThan(16 << 20);
  return bad.error ?? '(no error)';
}

/** The same pull once the registry behaves: it works, and downloads again no layer it had verified. */
async function goodPull(row: Row): Promise<void> {
  const blob = (digest: string) => new RegExp(`^/v2/${row.repo}/blobs/${digest}$`);
  const verified = row.image.layers.map((l) => delivered(blob(l.digest), l.size));
  const gets = row.image.layers.map((l) => front.count(blob(l.digest)));
  expect((await pull(`${front.host}/${row.repo}:latest`)).error).toBeUndefined();
  row.image.layers.forEach((l, i) => {
    const again = front.count(blob(l.digest)) - gets[i]!;
    if (verified[i]! > 0 && !isStall(row.fault))
      expect(again, `layer ${i + 1} was verified: not downloaded again`).toBe(0);
    else expect(again).toBeLessThanOrEqual(1);
  });
}

/** Runs `check` for every row, and fails once with every row that failed. */
async function eachRow(rows: Row[], check: (row: Row) => Promise<void>): Promise<void> {
  const failed: string[] = [];
  await Promise.all(
    rows.map((row) =>
      check(row).catch((e: unknown) => {
        failed.push(`${row.step}, ${faultName(row.fault)}: ${(e as Error).message}`);
      }),
    ),
  );
  expect(failed).toEqual([]);
}

// One test per step, its faults all at once: berthd meets a dozen broken pulls together.
describe.each(STEPS)('a fault at the %s', (step) => {
  it('fails that pull alone, with a clear message; nothing is left behind; the next pull reuses what was verified', async () => {
    const rows: Row[] = await Promise.all(
      CASES.filter((c) => c.step === step).map(async (c) => {
        const repo = `f${++serial}`;
        const image = await freshImage(repo, { asIndex: step === 'index' || step === 'platform manifest' });
        const goodRepo = `g${serial}`;
        await freshImage(goodRepo, { layers: 1 });
        return { ...c, repo, image, good: `${front.host}/${goodRepo}:latest` };
      }),
    );
    const before = holdings(d);

    await eachRow(rows, async (row) => {
      const error = await faultyPull(row);
      if (process.env.BERTH_FAULT_TABLE) console.log(`| ${row.step} | ${faultName(row.fault)} | ${error} |`);
      expect(error).toMatch(row.message);
    });
    expect((await d.request('GET', '/_ping')).status).toBe(200);
    const names = await listed();
    for (const row of rows) {
      expect(names, 'nothing half-pulled is listed').not.toContain(`${front.host}/${row.repo}:latest`);
      expect(names).toContain(row.good);
    }
    await expectNoLeaks(d, before);

    front.clear();
    await eachRow(rows, goodPull);
    const after = await listed();
    for (const row of rows) expect(after).toContain(`${front.host}/${row.repo}:latest`);
  });
});

describe('pulls together', () => {
  it('10 simultaneous pulls of one image: one download per blob, all 10 succeed', async () => {
    const image = await freshImage('ten', { layers: 3 });
    const before = holdings(d);
    const outcomes = await Promise.all(Array.from({ length: 10 }, () => pull(`${front.host}/ten:latest`)));
    expect(outcomes.map((o) => o.error ?? 'ok')).toEqual(Array(10).fill('ok'));
    for (const l of image.layers) expect(front.count(new RegExp(`/blobs/${l.digest}$`)), `layer ${l.digest}`).toBe(1);
    expect(front.count(new RegExp(`/blobs/${image.configDigest}$`)), 'the config').toBe(1);
    expect(front.count(/^\/v2\/ten\/manifests\/latest$/)).toBe(10);
    expect(await listed()).toContain(`${front.host}/ten:latest`);
    await expectNoLeaks(d, before);
  });

  it('a client that hangs up mid-download leaves the download to another pull of the same layer', async () => {
    const image = await freshImage('shared-a');
    // Another image on the same two layers (another config): each of its pulls waits for the same downloads.
    const other = buildImage({ layers: image.layers, config: { Cmd: ['sh'] } });
    await pushImage(registry, 'shared-a', 'other', other);
    const rule = front.inject({
      path: new RegExp(`/blobs/${image.layers[1]!.digest}$`),
      fault: { kind: 'stall', afterBytes: 1000 },
    });
    const first = startPull(`${front.host}/shared-a:latest`);
    await rule.hit();
    const second = startPull(`${front.host}/shared-a:other`);
    // It has joined the download once it has told its client about the layer.
    await waitFor(
      () => second.text().includes('Pulling fs layer') || undefined,
      'the second pull to wait for the layers',
    );
    expect((await d.request('GET', '/_ping')).status).toBe(200);
    first.hangUp();
    expect((await first.done).error).toBe('the client went away');
    rule.release();
    expect((await second.done).error).toBeUndefined();
    expect(
      front.count(new RegExp(`/blobs/${image.layers[1]!.digest}$`)),
      'the download went on for the other pull',
    ).toBe(1);
    expect(await listed()).toContain(`${front.host}/shared-a:other`);
    expect(await listed()).not.toContain(`${front.host}/shared-a:latest`);
  });

  it('a client that hangs up mid-download: berthd lets go of everything; the next pull gets the whole layer', async () => {
    const image = await freshImage('hangup');
    const layer = image.layers[1]!;
    const path = new RegExp(`/blobs/${layer.digest}$`);
    const before = holdings(d);
    const rule = front.inject({ path, fault: { kind: 'stall', afterBytes: 20_000 } });
    const pulling = startPull(`${front.host}/hangup:latest`);
    await rule.hit();
    pulling.hangUp();
    await waitFor(
      () => front.requests.filter((r) => path.test(r.path)).every((r) => r.closed) || undefined,
      'berthd to hang up on the registry',
    );
    await expectNoLeaks(d, before);
    rule.remove();
    expect((await pull(`${front.host}/hangup:latest`)).error).toBeUndefined();
    expect(delivered(path, layer.size), 'the whole layer, from its first byte').toBe(1);
  });

  it('a removal while a pull uses the same layer leaves the layer to the pull', async () => {
    const base = await freshImage('keep-a', { layers: 1 });
    expect((await pull(`${front.host}/keep-a:latest`)).error).toBeUndefined();
    const top = await buildLayer([{ path: 'top.txt', content: 'on top' }]);
    const image = buildImage({ layers: [base.layers[0]!, top], config: { Cmd: ['true'] } });
    await pushImage(registry, 'keep-b', 'latest', image);
    const rule = front.inject({ path: new RegExp(`/blobs/${top.digest}$`), fault: { kind: 'stall', afterBytes: 10 } });
    const pulling = startPull(`${front.host}/keep-b:latest`);
    await rule.hit(); // the base layer is "Already exists" for this pull
    const rmi = await d.request('DELETE', `/images/${front.host}/keep-a:latest`);
    expect(rmi.status).toBe(200);
    rule.release();
    expect((await pulling.done).error).toBeUndefined();
    const inspect = await d.request('GET', `/images/${front.host}/keep-b:latest/json`);
    const { UpperDir, LowerDir } = inspect.json.GraphDriver.Data as { UpperDir: string; LowerDir?: string };
    const dirs = [UpperDir, ...(LowerDir?.split(':') ?? [])];
    expect(dirs).toHaveLength(2);
    for (const dir of dirs) expect(existsSync(dir), `layer tree ${dir}`).toBe(true);
  });
});

describe('what a failed pull leaves for image removal', () => {
  it('answers 404 for the image a failed pull never recorded', async () => {
    const image = await freshImage('never');
    const rule = front.inject({
      path: new RegExp(`/blobs/${image.layers[1]!.digest}$`),
      fault: { kind: 'status', status: 404 },
    });
    expect((await pull(`${front.host}/never:latest`)).error).toMatch(/unknown blob/);
    rule.remove();
    const r = await d.request('DELETE', `/images/${front.host}/never:latest`);
    expect(r.status).toBe(404);
    expect(r.json.message).toBe(`No such image: ${front.host}/never:latest`);
  });

  it('rmi -f of an image a stopped container uses untags it and keeps it for the container (no 500)', async () => {
    await freshImage('used', { layers: 1 });
    expect((await pull(`${front.host}/used:latest`)).error).toBeUndefined();
    const id = (await d.request('GET', `/images/${front.host}/used:latest/json`)).json.Id as string;
    const c = await d.request('POST', '/containers/create', {
      body: { Image: `${front.host}/used:latest`, Cmd: ['true'] },
    });
    expect(c.status).toBe(201);
    try {
      const r = await d.request('DELETE', `/images/${id}?force=1`);
      expect(r.status).toBe(200);
      expect(r.json).toEqual([
        { Untagged: `${front.host}/used:latest` },
        { Untagged: expect.stringMatching(/used@sha256:/) },
      ]);
      expect((await d.request('GET', `/images/${id}/json`)).status).toBe(200);
      expect((await d.request('GET', `/containers/${c.json.Id}/json`)).json.Image).toBe(id);
    } finally {
      await d.request('DELETE', `/containers/${c.json.Id}?force=1`);
    }
    expect((await d.request('DELETE', `/images/${id}`)).status).toBe(200);
  });
});

describe('a registry that stops sending, with registry-stall-timeout', () => {
  let quick: Daemon;
  beforeAll(async () => {
    quick = await startDaemon({ args: ['--registry-stall-timeout', '1'] });
  });
  afterAll(async () => {
    await quick?.cleanup();
  });

  it.each([
    ['no answer', 'manifest', { kind: 'stall' }, /timeout awaiting response headers after 1s/],
    ['a body that stops', 'layer 2', { kind: 'stall', afterBytes: 1000 }, /registry stalled: no data for 1s/],
  ] as const)(
    '%s fails the pull after the timeout, and nothing is left behind',
    async (_what, step, fault, message) => {
      const repo = `stall-${step.replace(' ', '')}`;
      const image = await freshImage(repo);
      const before = holdings(quick);
      const rule = front.inject({ path: stepPath(step, repo, image), fault: fault as Fault });
      try {
        const r = await quick.request('POST', `/images/create?fromImage=${front.host}/${repo}&tag=latest`);
        const error = r.status === 200 ? JSON.parse(r.text.trim().split('\n').at(-1)!).error : r.json.message;
        expect(error).toMatch(message);
      } finally {
        rule.remove();
        front.clear();
      }
      await expectNoLeaks(quick, before);
    },
  );
});

it('a shutdown during a stalled pull does not wait for the registry', async () => {
  const stopping = await startDaemon();
  const image = await freshImage('shutdown');
  const rule = front.inject({
    path: stepPath('layer 1', 'shutdown', image),
    fault: { kind: 'stall', afterBytes: 1000 },
  });
  try {
    const pulling = stopping
      .request('POST', `/images/create?fromImage=${front.host}/shutdown&tag=latest`)
      .catch(() => undefined);
    await rule.hit();
    const started = Date.now();
    expect(await stopping.stop()).toBe(0);
    // Far below the 60 s registry-stall-timeout it would otherwise wait out.
    expect(Date.now() - started).toBeLessThan(20_000);
    await pulling;
  } finally {
    rule.remove();
    front.clear();
    await stopping.cleanup();
  }
});
