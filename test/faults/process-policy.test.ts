// berthd's policy for a fault that no request handled (a bug, by definition:
// nothing a client or a registry sends may get there): log it with the
// requests in flight and exit with 70, leaving containers running; the next
// start takes them over. The fault is injected into the real process by a
// preloaded script (NODE_OPTIONS=--require), on SIGUSR2.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { startDaemon, waitFor, type Daemon } from '../harness/daemon.js';
import { pull } from '../harness/env.js';
import { busyboxImage, pushImage } from '../harness/images.js';
import { startRegistry, type Registry } from '../harness/registry.js';

const dir = mkdtempSync(path.join(os.tmpdir(), 'berth-fault-'));
const preload = path.join(dir, 'inject.cjs');
writeFileSync(
  preload,
  `process.on('SIGUSR2', () => setImmediate(() => { throw new Error('injected fault'); }));\n` +
    `process.on('SIGUSR1', () => setImmediate(() => { Promise.reject(new Error('injected rejection')); }));\n`,
);

let registry: Registry;
let d: Daemon;
let image: string;

beforeAll(async () => {
  registry = await startRegistry();
  await pushImage(registry, 'busybox', 'latest', await busyboxImage());
  d = await startDaemon({ env: { NODE_OPTIONS: `--require ${preload}` } });
  image = `${registry.host}/busybox:latest`;
  await pull(d, image);
});
afterAll(async () => {
  await d?.restart().catch(() => undefined);
  const list = await d?.request('GET', '/containers/json?all=1').catch(() => undefined);
  for (const c of (list?.json as { Id: string }[] | undefined) ?? [])
    await d.request('DELETE', `/containers/${c.Id}?force=1`);
  await d?.cleanup();
  await registry?.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** Opens GET /events and leaves it streaming; resolves once the head has come. */
function openEvents(): Promise<http.ClientRequest> {
  return new Promise((resolve, reject) => {
    const req = http.get({ socketPath: d.socket, path: '/events', headers: { Host: 'x' } }, (res) => {
      res.on('error', () => undefined);
      res.resume();
      resolve(req);
    });
    req.on('error', () => undefined);
    setTimeout(() => reject(new Error('no events head')), 10_000).unref();
  });
}

/** Parsed log lines of berthd's stderr. */
const logLines = () =>
  d
    .stderr()
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as Record<string, any>);

it.each([
  ['an exception thrown from a callback', 'SIGUSR2', 'injected fault', 'uncaughtException'],
  ['a rejection nobody awaited', 'SIGUSR1', 'injected rejection', 'unhandledRejection'],
] as const)(
  '%s: logged with what was in flight, exit 70, containers live on',
  async (_what, signal, message, origin) => {
    const c = await d.request('POST', '/containers/create', {
      body: { Image: image, Cmd: ['sh', '-c', 'sleep 3; exit 3'] },
    });
    expect((await d.request('POST', `/containers/${c.json.Id}/start`)).status).toBe(204);
    const events = await openEvents();
    const exited = new Promise<number | null>((r) => d.proc.once('exit', (code) => r(code)));
    d.proc.kill(signal);
    expect(await exited).toBe(70);
    events.destroy();

    const fatal = logLines().find((l) => l.level === 60 && l.err?.message === message);
    expect(fatal, d.stderr().slice(-2000)).toBeDefined();
    expect(fatal!.origin).toBe(origin);
    expect(fatal!.inflight).toEqual(
      expect.arrayContaining([expect.objectContaining({ method: 'GET', url: '/events', reqId: expect.any(String) })]),
    );

    // The container outlived the daemon; its exit, while nobody watched, is found at the next start.
    await d.restart();
    const wait = await d.request('POST', `/containers/${c.json.Id}/wait`);
    expect(wait.json.StatusCode).toBe(3);
    await waitFor(
      async () => (await d.request('GET', `/containers/${c.json.Id}/json`)).json.State.Status === 'exited',
      'the exit',
    );
    expect((await d.request('DELETE', `/containers/${c.json.Id}`)).status).toBe(204);
  },
);
