// Clients that go away in the middle of a stream: a logs follower, an attach
// (with and without a TTY), an attached exec, a wait, an events stream, a
// stats stream, and the docker CLI killed while following each. berthd must
// let go of everything it held for them (descriptors, inotify watches, conmon
// connections, timers, waits) and nothing else may notice: the container runs
// on, other clients keep their streams.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { waitFor, type Daemon } from '../harness/daemon.js';
import { useEnv, type Env } from '../harness/env.js';
import { holdings, leaked, type Holdings } from '../harness/leaks.js';
import { demuxText } from '../harness/streams.js';
import { activity, dropIdleConnections, openStream, settledActivity, type Activity, type RawStream } from './probes.js';

const ctx = useEnv();
let env: Env;
let d: Daemon;
/** Prints a numbered line every 50 ms for the whole file. */
let chatter: string;
/** A follower of chatter's logs open for the whole file: it must never notice the others. */
let witness: RawStream;

async function createStarted(body: Record<string, unknown>): Promise<string> {
  const c = await d.request('POST', '/containers/create', { body: { Image: env.busybox, ...body } });
  expect(c.status, c.text).toBe(201);
  const s = await d.request('POST', `/containers/${c.json.Id}/start`);
  expect(s.status, s.text).toBe(204);
  return c.json.Id;
}

const lastLine = (text: string) => Number(/line (\d+)\n$/.exec(text)?.[1] ?? -1);

interface Baseline {
  holdings: Holdings;
  activity: Activity;
}

async function baseline(): Promise<Baseline> {
  const a = await settledActivity(d);
  // The connections of those /info requests close a moment later.
  await new Promise((r) => setTimeout(r, 100));
  return { activity: a, holdings: holdings(d) };
}

/** Everything held for the vanished clients is let go of, and the rest carries on. */
async function expectReleased(base: Baseline): Promise<void> {
  let last: { a: Activity; left: string[] } | undefined;
  try {
    await waitFor(
      async () => {
        dropIdleConnections();
        const a = await activity(d);
        dropIdleConnections();
        // The /info connection itself closes a moment after the answer.
        await new Promise((r) => setTimeout(r, 20));
        const left = leaked(base.holdings, holdings(d));
        last = { a, left };
        return (
          a.tasks <= base.activity.tasks &&
          a.listeners <= base.activity.listeners &&
          a.watches <= base.activity.watches &&
          left.length === 0
        );
      },
      'berthd to let go of what it held for the vanished clients',
      20_000,
      50,
    );
  } catch (e) {
    throw new Error(`${(e as Error).message}\nbefore: ${JSON.stringify(base.activity)}\nnow: ${JSON.stringify(last)}`);
  }
  await expectUndisturbed();
}

async function expectUndisturbed(): Promise<void> {
  const c = await d.request('GET', `/containers/${chatter}/json`);
  expect(c.json.State.Running).toBe(true);
  // The witness still receives chatter's new lines.
  const seen = lastLine(demuxText(witness.received()));
  await waitFor(() => lastLine(demuxText(witness.received())) > seen, 'the witness follower to get a new line', 10_000);
  expect(witness.sock.destroyed).toBe(false);
}

beforeAll(async () => {
  ({ env, daemon: d } = ctx);
  chatter = await createStarted({ Cmd: ['sh', '-c', 'i=0; while :; do echo line $i; i=$((i+1)); sleep 0.05; done'] });
  witness = await openStream(d, 'GET', `/containers/${chatter}/logs?follow=1&stdout=1&stderr=1`);
  await witness.waitBytes(1);
  // Once of each kind, so that what berthd makes on first use (libuv's inotify
  // descriptor, the exec directories' parent, ...) is in every baseline.
  const warm = await openStream(d, 'GET', `/containers/${chatter}/logs?follow=1&stdout=1&tail=1`);
  await warm.waitBytes(1);
  warm.sock.destroy();
  const x = await d.request('POST', `/containers/${chatter}/exec`, { body: { Cmd: ['true'], AttachStdout: true } });
  await d.request('POST', `/exec/${x.json.Id}/start`, { body: {} });
});

describe('a client that vanishes', () => {
  it('during a logs follow, reading or stalled, leaves no descriptor, watch or wait behind', async () => {
    // Followed by no one else. The inotify watch on its log is berthd's json-file copy's as well
    // (one watch per inode, however many ask), so the followers add descriptors and tasks, not watches.
    const other = await createStarted({ Cmd: ['sh', '-c', 'while :; do echo other; sleep 0.05; done'] });
    const base = await baseline();
    const reading = await openStream(d, 'GET', `/containers/${other}/logs?follow=1&stdout=1&stderr=1&tail=5`);
    await reading.waitBytes(100);
    const stalled = await openStream(d, 'GET', `/containers/${other}/logs?follow=1&stdout=1&stderr=1&timestamps=1`);
    stalled.sock.pause();
    // While they follow, berthd holds their log descriptors: the probes can see them.
    const during = await activity(d);
    expect(during.tasks).toBeGreaterThan(base.activity.tasks);
    expect(leaked(base.holdings, holdings(d)).join()).toMatch(/container\.log|ctr\.log|\.log/);
    reading.sock.destroy();
    stalled.sock.destroy();
    await expectReleased(base);
    expect((await d.request('DELETE', `/containers/${other}?force=1`)).status).toBe(204);
  });

  it('during an attach, with and without a TTY, leaves the container running and its conmon connection closed', async () => {
    const tty = await createStarted({ Cmd: ['sh'], Tty: true, OpenStdin: true });
    const base = await baseline();
    const plain = await openStream(d, 'POST', `/containers/${chatter}/attach?stream=1&stdout=1&stderr=1`, {
      headers: { Connection: 'Upgrade', Upgrade: 'tcp' },
    });
    expect(plain.status).toBe(101);
    await plain.waitBytes(20);
    const term = await openStream(d, 'POST', `/containers/${tty}/attach?stream=1&stdin=1&stdout=1&stderr=1`, {
      headers: { Connection: 'Upgrade', Upgrade: 'tcp' },
    });
    expect(term.status).toBe(101);
    term.sock.write('echo at-$((40+2))\n');
    await waitFor(() => term.received().toString().includes('at-42'), 'the TTY to echo');
    // Each attach holds a connection to its container's conmon.
    expect(holdings(d).fds.filter((f) => f.startsWith('socket:')).length).toBeGreaterThan(
      base.holdings.fds.filter((f) => f.startsWith('socket:')).length + 1,
    );
    plain.sock.destroy();
    term.sock.destroy();
    await expectReleased(base);
    // The TTY's shell still runs and still takes input from the next client.
    expect((await d.request('GET', `/containers/${tty}/json`)).json.State.Running).toBe(true);
    const again = await openStream(d, 'POST', `/containers/${tty}/attach?stream=1&stdin=1&stdout=1`, {
      headers: { Connection: 'Upgrade', Upgrade: 'tcp' },
    });
    again.sock.write('echo again-$((40+3))\n');
    await waitFor(() => again.received().toString().includes('again-43'), 'the TTY to echo to the next client');
    again.sock.destroy();
    expect((await d.request('DELETE', `/containers/${tty}?force=1`)).status).toBe(204);
  });

  it('during an attached exec has the process killed, as dockerd does, and its conmon gone', async () => {
    const base = await baseline();
    const x = await d.request('POST', `/containers/${chatter}/exec`, {
      body: { Cmd: ['sh', '-c', 'echo started; exec sleep 1000'], AttachStdout: true, AttachStderr: true },
    });
    const s = await openStream(d, 'POST', `/exec/${x.json.Id}/start`, {
      headers: { 'Content-Type': 'application/json', Connection: 'Upgrade', Upgrade: 'tcp' },
      body: JSON.stringify({ Detach: false, Tty: false }),
    });
    await waitFor(() => demuxText(s.received()).includes('started'), 'the exec to start');
    expect(holdings(d).conmons.length).toBe(base.holdings.conmons.length + 1);
    s.sock.destroy();
    await expectReleased(base);
    const inspect = await d.request('GET', `/exec/${x.json.Id}/json`);
    expect(inspect.json).toMatchObject({ Running: false, ExitCode: 137 });
  });

  it('during a wait leaves no wait behind, however many', async () => {
    const base = await baseline();
    const waits = await Promise.all(
      Array.from({ length: 20 }, () => openStream(d, 'POST', `/containers/${chatter}/wait`)),
    );
    for (const w of waits) expect(w.status).toBe(200);
    // Twenty waits are pending: the count can tell.
    expect((await activity(d)).tasks).toBeGreaterThanOrEqual(base.activity.tasks + 20);
    for (const w of waits) w.sock.destroy();
    await expectReleased(base);
  });

  it('during an events or stats stream leaves no listener or timer behind', async () => {
    const base = await baseline();
    const events = await openStream(d, 'GET', '/events');
    const filtered = await openStream(
      d,
      'GET',
      `/events?filters=${encodeURIComponent(JSON.stringify({ container: [chatter] }))}`,
    );
    const stats = await openStream(d, 'GET', `/containers/${chatter}/stats`);
    await stats.waitBytes(100);
    expect((await activity(d)).listeners).toBe(base.activity.listeners + 2);
    events.sock.destroy();
    filtered.sock.destroy();
    stats.sock.destroy();
    await expectReleased(base);
  });

  it('when it is the docker CLI, killed while following logs, attached, or watching events and stats', async () => {
    const base = await baseline();
    const configDir = mkdtempSync(path.join(os.tmpdir(), 'berth-cli-'));
    const env_ = { ...process.env, DOCKER_HOST: d.host, DOCKER_CONFIG: configDir };
    const procs: { name: string; p: ChildProcess; out: string }[] = [
      ['logs', '-f', '--tail', '1', chatter],
      ['attach', '--no-stdin', chatter],
      ['events'],
      ['stats', chatter],
    ].map((args) => {
      const p = spawn('docker', args, { env: env_, stdio: ['ignore', 'pipe', 'pipe'] });
      const it = { name: args[0]!, p, out: '' };
      p.stdout!.on('data', (c: Buffer) => (it.out += c.toString()));
      return it;
    });
    // A start makes an event for `docker events` to print.
    const poke = await createStarted({ Cmd: ['true'] });
    await waitFor(
      () => procs.every((x) => x.out.length > 0),
      `every CLI to print something (${procs.filter((x) => !x.out).map((x) => x.name)})`,
      20_000,
    );
    for (const x of procs) x.p.kill('SIGKILL');
    await Promise.all(
      procs.map(
        (x) => new Promise((r) => (x.p.exitCode !== null || x.p.signalCode !== null ? r(null) : x.p.once('exit', r))),
      ),
    );
    rmSync(configDir, { recursive: true, force: true });
    expect((await d.request('DELETE', `/containers/${poke}?force=1`)).status).toBe(204);
    await expectReleased(base);
  });
});

describe('after every client went away', () => {
  it('the container stops normally and the follower that stayed sees the end of the stream', async () => {
    const stop = await d.request('POST', `/containers/${chatter}/stop?t=1`);
    expect(stop.status).toBe(204);
    const wait = await d.request('POST', `/containers/${chatter}/wait`);
    expect(wait.json.StatusCode).toBe(137);
    await waitFor(() => witness.complete(), 'the witness stream to end with the container');
    // The whole output, in order, without a gap.
    const numbers = demuxText(witness.received())
      .trim()
      .split('\n')
      .map((l) => Number(l.split(' ')[1]));
    expect(numbers.length).toBeGreaterThan(20);
    expect(numbers).toEqual(numbers.map((_, i) => numbers[0]! + i));
    expect((await d.request('DELETE', `/containers/${chatter}`)).status).toBe(204);
  });
});
