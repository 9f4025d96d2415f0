// Load: 200 API requests of every kind at once, then 50 `docker run --rm` at
// once (the docker CLI, and the same sequence over the API), twice over. No
// request may fail or get a wrong answer, and afterwards berthd holds what it
// held before: descriptors, mounts, conmons, runc states, container
// directories; its database does not grow from one round to the next.
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ApiResponse, Daemon } from '../harness/daemon.js';
import { useEnv, type Env } from '../harness/env.js';
import { expectNoLeaks, holdings, type Holdings } from '../harness/leaks.js';
import { demux } from '../harness/streams.js';
import { dropIdleConnections, openStream, settledActivity, type Activity } from './probes.js';

const ctx = useEnv();
let env: Env;
let d: Daemon;
/** Runs throughout: what inspect, top, stats and logs look at. */
let steady: string;
let configDir: string;

const json = { 'Content-Type': 'application/json' };
type Check = (r: ApiResponse) => void;
const ok =
  (status: number, more?: Check): Check =>
  (r) => {
    expect(r.status, r.text.slice(0, 300)).toBe(status);
    more?.(r);
  };
/** A refusal: the status, and Docker's {"message"}. */
const refused =
  (status: number, message: RegExp): Check =>
  (r) => {
    expect(r.status, r.text.slice(0, 300)).toBe(status);
    expect(r.json?.message).toMatch(message);
  };

/** create → start → wait → logs → rm over the API; the exit code and output must be this run's. */
async function apiRun(i: number): Promise<void> {
  const c = await d.request('POST', '/containers/create', {
    body: { Image: env.busybox, Cmd: ['sh', '-c', `echo run-${i}; exit ${i % 4}`] },
  });
  expect(c.status, c.text).toBe(201);
  const id = c.json.Id as string;
  expect((await d.request('POST', `/containers/${id}/start`)).status).toBe(204);
  expect((await d.request('POST', `/containers/${id}/wait`)).json).toEqual({ StatusCode: i % 4, Error: null });
  const logs = await d.request('GET', `/containers/${id}/logs?stdout=1&stderr=1`);
  expect(demux(logs.body)).toEqual([[1, `run-${i}\n`]]);
  expect((await d.request('DELETE', `/containers/${id}`)).status).toBe(204);
}

/** The 200 requests: every kind of call, with what each must answer. */
function mixedRequests(round: number): (() => Promise<void>)[] {
  const call =
    (
      method: string,
      p: string,
      check: Check,
      o: { body?: unknown; raw?: string | Buffer; headers?: Record<string, string> } = {},
    ) =>
    async () =>
      check(await d.request(method, p, o));
  const kinds: [number, () => Promise<void>][] = [
    [
      15,
      call(
        'GET',
        '/_ping',
        ok(200, (r) => expect(r.text).toBe('OK')),
      ),
    ],
    [
      10,
      call(
        'GET',
        '/v1.41/version',
        ok(200, (r) => expect(r.json.ApiVersion).toBe('1.47')),
      ),
    ],
    [
      10,
      call(
        'GET',
        '/info',
        ok(200, (r) => expect(r.json.Images).toBe(1)),
      ),
    ],
    [
      10,
      call(
        'GET',
        '/images/json',
        ok(200, (r) => expect(r.json[0].RepoTags).toEqual([env.busybox])),
      ),
    ],
    [
      10,
      call(
        'GET',
        '/containers/json?all=1',
        ok(200, (r) => expect(r.json.some((c: { Id: string }) => c.Id === steady)).toBe(true)),
      ),
    ],
    [
      10,
      call(
        'GET',
        `/containers/${steady}/json`,
        ok(200, (r) => expect(r.json.State.Running).toBe(true)),
      ),
    ],
    [
      10,
      call(
        'GET',
        `/containers/${steady}/top`,
        ok(200, (r) => expect(JSON.stringify(r.json.Processes)).toMatch(/sleep/)),
      ),
    ],
    [
      10,
      call(
        'GET',
        `/containers/${steady}/stats?stream=0`,
        ok(200, (r) => expect(r.json.pids_stats.current).toBeGreaterThan(0)),
      ),
    ],
    [
      10,
      call(
        'GET',
        `/containers/${steady}/logs?stdout=1&tail=1`,
        ok(200, (r) => expect(demux(r.body)).toEqual([[1, 'steady\n']])),
      ),
    ],
    [
      10,
      call(
        'GET',
        `/events?since=0&until=${Math.floor(Date.now() / 1000) + 1}&filters=${encodeURIComponent('{"container":["steady"]}')}`,
        ok(200, (r) => {
          expect(
            r.text
              .trim()
              .split('\n')
              .map((l) => JSON.parse(l).Action),
          ).toEqual(['create', 'start']);
        }),
      ),
    ],
    [40, () => apiRun(round * 1000 + Math.floor(Math.random() * 1000))],
    // Refusals: each a 4xx with its message, never a 500, nothing created.
    [
      5,
      call('POST', '/containers/create', refused(400, /^invalid JSON: /), {
        raw: '{"Image":',
        headers: json,
      }),
    ],
    [5, call('POST', '/containers/create', refused(404, /^No such image: nope:1$/), { body: { Image: 'nope:1' } })],
    [
      5,
      call('POST', '/containers/create?name=-x', refused(400, /^Invalid container name/), {
        body: { Image: env.busybox },
      }),
    ],
    [
      5,
      call('POST', '/containers/create', refused(400, /must be 'application\/json'/), {
        raw: '{}',
        headers: { 'Content-Type': 'text/plain' },
      }),
    ],
    [
      5,
      call('POST', '/containers/create', refused(413, /larger than the 4 MiB/), {
        raw: Buffer.alloc(5 << 20, 0x20),
        headers: json,
      }),
    ],
    [
      5,
      call('POST', '/containers/create', refused(400, /nested deeper/), {
        raw: `{"X":${'['.repeat(500)}${']'.repeat(500)}}`,
        headers: json,
      }),
    ],
    [5, call('GET', '/containers/nope/json', refused(404, /^No such container: nope$/))],
    [5, call('GET', '/containers/json?filters=notjson', refused(400, /filters/))],
    [5, call('GET', '/v9.99/info', refused(400, /too new/))],
    [5, call('DELETE', `/containers/${steady}`, refused(409, /cannot remove a running container/))],
    [5, call('GET', '/no/such/route', refused(404, /^page not found$/))],
  ];
  const out = kinds.flatMap(([n, f]) => Array.from({ length: n }, () => f));
  expect(out).toHaveLength(200);
  return out;
}

/** `docker run --rm` with the CLI; its output and exit code must be this run's. */
function cliRun(i: number): Promise<void> {
  return new Promise((resolve, reject) => {
    execFile(
      'docker',
      ['run', '--rm', env.busybox, 'sh', '-c', `echo cli-${i}; exit ${i % 3}`],
      { env: { ...process.env, DOCKER_HOST: d.host, DOCKER_CONFIG: configDir }, timeout: 60_000 },
      (err, stdout, stderr) => {
        try {
          expect({ code: err ? (err as { code?: number }).code : 0, stdout, stderr }).toEqual({
            code: i % 3,
            stdout: `cli-${i}\n`,
            stderr: '',
          });
          resolve();
        } catch (e) {
          reject(e);
        }
      },
    );
  });
}

/** What `docker run --rm` does, over the API: create, attach, start, wait, remove. */
async function attachedApiRun(i: number): Promise<void> {
  const c = await d.request('POST', '/containers/create', {
    body: {
      Image: env.busybox,
      Cmd: ['sh', '-c', `echo att-${i}; exit ${i % 5}`],
      AttachStdout: true,
      AttachStderr: true,
    },
  });
  expect(c.status, c.text).toBe(201);
  const id = c.json.Id as string;
  const a = await openStream(d, 'POST', `/containers/${id}/attach?stream=1&stdout=1&stderr=1`, {
    headers: { Connection: 'Upgrade', Upgrade: 'tcp' },
  });
  expect(a.status).toBe(101);
  const waited = d.request('POST', `/containers/${id}/wait?condition=next-exit`);
  expect((await d.request('POST', `/containers/${id}/start`)).status).toBe(204);
  expect((await waited).json.StatusCode).toBe(i % 5);
  await new Promise<void>((r) => (a.sock.readableEnded ? r() : a.sock.once('end', () => r())));
  expect(demux(a.received())).toEqual([[1, `att-${i}\n`]]);
  a.sock.destroy();
  expect((await d.request('DELETE', `/containers/${id}`)).status).toBe(204);
}

/** The database file alone (without its write-ahead log), when the snapshot was taken. */
const dbFiles = new WeakMap<Holdings, number>();
const dbFile = (h: Holdings) => dbFiles.get(h)!;
function sized(h: Holdings): Holdings {
  dbFiles.set(h, statSync(path.join(d.dataRoot, 'berth.db')).size);
  return h;
}

interface Snapshot {
  holdings: Holdings;
  activity: Activity;
}

async function snapshot(): Promise<Snapshot> {
  const activity = await settledActivity(d);
  await new Promise((r) => setTimeout(r, 100));
  return { activity, holdings: holdings(d) };
}

async function round(n: number): Promise<{ apiMs: number; runMs: number }> {
  let t = Date.now();
  await Promise.all(mixedRequests(n).map((f) => f()));
  const apiMs = Date.now() - t;
  t = Date.now();
  await Promise.all([
    ...Array.from({ length: 30 }, (_, i) => cliRun(n * 100 + i)),
    ...Array.from({ length: 20 }, (_, i) => attachedApiRun(n * 100 + i)),
  ]);
  return { apiMs, runMs: Date.now() - t };
}

beforeAll(async () => {
  ({ env, daemon: d } = ctx);
  configDir = mkdtempSync(path.join(os.tmpdir(), 'berth-cli-'));
  const c = await d.request('POST', '/containers/create?name=steady', {
    body: { Image: env.busybox, Cmd: ['sh', '-c', 'echo steady; exec sleep 1000'] },
  });
  steady = c.json.Id;
  await d.request('POST', `/containers/${steady}/start`);
  // Once of each, so that what is made on first use is in the baseline.
  await apiRun(0);
  await cliRun(0);
  await attachedApiRun(0);
});

afterAll(() => rmSync(configDir, { recursive: true, force: true }));

describe('under load', () => {
  it('answers 200 mixed requests and 50 parallel `docker run --rm` right, twice, and holds nothing more after', async () => {
    const before = await snapshot();
    const first = await round(1);
    const afterFirst = sized(await expectNoLeaks(d, before.holdings, 30_000));
    const second = await round(2);
    dropIdleConnections();
    const after = sized(await expectNoLeaks(d, before.holdings, 30_000));
    const activity = await settledActivity(d);
    expect(activity.tasks).toBeLessThanOrEqual(before.activity.tasks);
    expect(activity.listeners).toBe(before.activity.listeners);
    console.log(
      `load: round 1 ${first.apiMs} ms for 200 requests, ${first.runMs} ms for 50 runs; round 2 ${second.apiMs} ms, ${second.runMs} ms; ` +
        `fds ${before.holdings.fds.length} → ${after.fds.length}; db+wal ${before.holdings.dbBytes} → ${afterFirst.dbBytes} → ${after.dbBytes} bytes (db ${dbFile(afterFirst)} → ${dbFile(after)})`,
    );
    expect(after.fds.length).toBeLessThanOrEqual(before.holdings.fds.length);
    // Rows come and go: the second round reuses the pages of the first, and the
    // write-ahead log stays at what a checkpoint lets it reach (1,000 pages).
    expect(dbFile(after) - dbFile(afterFirst)).toBeLessThanOrEqual(64 * 1024);
    expect(after.dbBytes - dbFile(after)).toBeLessThan(16 * 1024 * 1024);
    expect((await d.request('GET', '/containers/json?all=1')).json).toHaveLength(1);
    // About 30 s on an idle machine; the budget is for a busy one.
  }, 180_000);
});
