// SIGKILL of berthd in the middle of each operation that changes what is on
// disk: a pull (while downloading, while extracting, between two layers), a
// commit, a create, a start, an rm, an rmi, and with 20 containers running.
// After the restart, the interrupted operation either completed whole or left
// nothing: no partial image or layer is listed, and no mount, temp file,
// orphaned blob or layer tree, monitor or runtime state is left behind
// (holdings() against a snapshot taken before the operation, plus what the
// completed operation adds). Running containers go on running and are managed
// as before; exits that happened while berthd was down are reported with
// their real codes; and the operation can be done again.
//
// Each kill is timed by watching the operation (its progress stream, the
// files it makes) rather than by sleeping, and where it lands between two
// steps by chance, the assertions hold for either outcome.
import Database from '../../src/engine/store/sqlite.js';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { waitFor, type Daemon } from '../harness/daemon.js';
import { pull, useEnv, type Env } from '../harness/env.js';
import { largeImage, pushImage } from '../harness/images.js';
import { allowing, expectNoLeaks, holdings, mountsUnder, registryPool, type Holdings } from '../harness/leaks.js';
import { demuxText } from '../harness/streams.js';

const ctx = useEnv();
let env: Env;
let d: Daemon;
/** busybox + 4 layers of 16 MiB of random bytes (/data/large-<n>.bin). */
let large: string;
const LARGE_MIB = 64;
const LARGE_LAYERS = 4;
const MiB = 1024 * 1024;
/** For the tests that pull or commit tens of MiB several times: on a machine shared with other suites that takes a while. */
const HEAVY_MS = 180_000;

beforeAll(async () => {
  env = ctx.env;
  d = ctx.daemon;
  large = `${env.registry.host}/crash/large:latest`;
  await pushImage(env.registry, 'crash/large', 'latest', await largeImage(LARGE_MIB, LARGE_LAYERS));
});

const q = encodeURIComponent;

// ───────────────────────────────── helpers ─────────────────────────────────

/** SIGKILLs berthd once `ready` holds, polling every 2 ms (no sleep decides the moment). */
async function killWhen(ready: () => boolean | Promise<boolean>, what: string): Promise<void> {
  await waitFor(ready, what, 30_000, 2);
  await d.kill();
}

/**
 * Sends a request whose answer may never come (berthd is killed meanwhile);
 * `onData` sees the body as it arrives. Resolves with the status and body,
 * or with `cut: true` when the connection broke first.
 */
function send(
  method: string,
  urlPath: string,
  o: { body?: unknown; onData?: (text: string) => void } = {},
): Promise<{ status: number; text: string; cut: boolean }> {
  return new Promise((resolve) => {
    let text = '';
    let status = 0;
    const payload = o.body === undefined ? undefined : JSON.stringify(o.body);
    const headers: Record<string, string> = {
      Host: 'localhost',
      ...(payload ? { 'Content-Type': 'application/json', 'Content-Length': String(Buffer.byteLength(payload)) } : {}),
    };
    const req = http.request({ socketPath: d.socket, method, path: urlPath, headers, agent: false }, (res) => {
      status = res.statusCode ?? 0;
      res.setEncoding('utf8');
      res.on('data', (c: string) => {
        text += c;
        o.onData?.(c);
      });
      res.on('end', () => resolve({ status, text, cut: !res.complete }));
      res.on('error', () => resolve({ status, text, cut: true }));
      res.on('aborted', () => resolve({ status, text, cut: true }));
    });
    req.on('error', () => resolve({ status, text, cut: true }));
    req.end(payload);
  });
}

/** A pull through the API whose progress lines go to `onEvent` as they come. */
function pullStream(ref: string, onEvent: (e: { status?: string; id?: string; error?: string }) => void) {
  const i = ref.lastIndexOf(':');
  let rest = '';
  return send('POST', `/images/create?fromImage=${q(ref.slice(0, i))}&tag=${q(ref.slice(i + 1))}`, {
    onData: (chunk) => {
      const lines = (rest + chunk).split('\n');
      rest = lines.pop()!;
      for (const l of lines) if (l.trim()) onEvent(JSON.parse(l));
    },
  });
}

const listDir = (dir: string) => (existsSync(dir) ? readdirSync(dir) : []);
const sizeOf = (f: string) => {
  try {
    return statSync(f).size;
  } catch {
    return -1;
  }
};

/** The files under /data in the staged layer trees of <data-root>/layers/tmp. */
function stagedFiles(): string[] {
  const tmp = path.join(d.dataRoot, 'layers/tmp');
  const out: string[] = [];
  for (const stage of listDir(tmp)) {
    const data = path.join(tmp, stage, 'diff/data');
    for (const f of listDir(data)) out.push(path.join(data, f));
  }
  return out;
}

/** What berthd holds now, plus the idle connections its registry client may pool (whether it pulled since it started is not what these tests are about). */
function snapshot(): Holdings {
  return allowing(holdings(d), registryPool(env.registry.host));
}

/** What a container legitimately holds: its directory, its rootfs mount when mounted, and when running its monitor and runtime state. */
function containerHoldings(id: string, o: { running: boolean; mounted: boolean }): Partial<Holdings> {
  const dir = path.join(d.dataRoot, 'containers', id);
  const conmons = o.running ? [readPid(path.join(dir, 'conmon.pid'))] : [];
  return {
    containerDirs: [id],
    // A running json-file container's log is followed into its json-file copy (containers/jsonlog.ts).
    fds: o.running ? [path.join(dir, 'ctr.log'), path.join(dir, `${id}-json.log`)] : [],
    mounts: o.mounted ? [path.join(dir, 'rootfs')] : [],
    conmons: conmons.filter((p): p is number => p !== null),
    runcStates: o.running ? [id] : [],
  };
}

function readPid(file: string): number | null {
  try {
    const n = Number(readFileSync(file, 'utf8').trim());
    return Number.isInteger(n) && n > 0 ? n : null;
  } catch {
    return null;
  }
}

const isMounted = (p: string) => mountsUnder(p).includes(p);

async function images(): Promise<{ Id: string; RepoTags: string[] | null }[]> {
  const r = await d.request('GET', '/images/json?all=1');
  expect(r.status).toBe(200);
  return r.json;
}

async function createContainer(image: string, cmd: string[], extra: Record<string, unknown> = {}): Promise<string> {
  const r = await d.request('POST', '/containers/create', { body: { Image: image, Cmd: cmd, ...extra } });
  expect(r.status, r.text).toBe(201);
  return r.json.Id;
}

async function startContainer(id: string): Promise<void> {
  const s = await d.request('POST', `/containers/${id}/start`);
  expect(s.status, s.text).toBe(204);
}

/** Runs `cmd` in a fresh container of `image` to its end; returns its output (exit code 0 asserted) and removes it. */
async function runToEnd(image: string, cmd: string[]): Promise<string> {
  const id = await createContainer(image, cmd);
  await startContainer(id);
  const w = await d.request('POST', `/containers/${id}/wait`);
  const out = await logText(id);
  expect(w.json.StatusCode, out).toBe(0);
  expect((await d.request('DELETE', `/containers/${id}`)).status).toBe(204);
  return out;
}

const state = async (id: string) => (await d.request('GET', `/containers/${id}/json`)).json.State;
const logText = async (id: string) =>
  demuxText((await d.request('GET', `/containers/${id}/logs?stdout=1&stderr=1`)).body);

/** The sizes a container of the large image sees, as `wc -c` prints them. */
const LARGE_CHECK = ['sh', '-c', 'wc -c /data/large-*.bin | grep -v total'];
function expectedLargeSizes(): string {
  const total = Math.round(LARGE_MIB * MiB);
  const each = Math.floor(total / LARGE_LAYERS);
  return Array.from(
    { length: LARGE_LAYERS },
    (_, i) => `${i === LARGE_LAYERS - 1 ? total - each * (LARGE_LAYERS - 1) : each} /data/large-${i + 1}.bin`,
  ).join('\n');
}
const normalize = (s: string) =>
  s
    .trim()
    .split('\n')
    .map((l) => l.trim().replace(/\s+/g, ' '))
    .join('\n');

/** The large image is either absent or whole (its files all there, their sizes right). */
async function expectWholeOrAbsent(ref: string): Promise<boolean> {
  const all = await images();
  // Nothing half made shows as a nameless entry either (every image these tests make has a name).
  expect(all.filter((i) => !i.RepoTags?.length)).toEqual([]);
  if (!all.some((i) => i.RepoTags?.includes(ref))) {
    expect((await d.request('GET', `/images/${q(ref)}/json`)).status).toBe(404);
    return false;
  }
  expect(normalize(await runToEnd(ref, LARGE_CHECK))).toBe(expectedLargeSizes());
  return true;
}

// ─────────────────────────────────── pull ───────────────────────────────────

describe('SIGKILL during a pull', () => {
  const cases: [string, (stream: { status?: string }[]) => boolean][] = [
    // The first byte counted: the blob is being written to content/ingest.
    ['while a layer downloads', (events) => events.some((e) => e.status === 'Downloading')],
    // A layer's file is being written into its staged tree under layers/tmp.
    ['while a layer is extracted', () => stagedFiles().some((f) => sizeOf(f) > 0)],
    // One layer is renamed into place, others are still coming: nothing records it yet.
    ['between two layers', (events) => events.some((e) => e.status === 'Pull complete')],
  ];
  it.each(cases)(
    '%s: leaves nothing, and the pull can be done again',
    async (_what, when) => {
      const before = snapshot();
      const events: { status?: string }[] = [];
      const pulling = pullStream(large, (e) => events.push(e));
      await killWhen(() => when(events), 'the moment to kill');
      const answer = await pulling;
      expect(answer.cut, answer.text.slice(-500)).toBe(true);
      await d.restart();

      const whole = await expectWholeOrAbsent(large);
      expect(whole).toBe(false); // killed before the record, always: see the cases
      await expectNoLeaks(d, before);

      await pull(d, large);
      expect(await expectWholeOrAbsent(large)).toBe(true);
      expect((await d.request('DELETE', `/images/${q(large)}`)).status).toBe(200);
      await expectNoLeaks(d, before);
    },
    HEAVY_MS,
  );
});

// ────────────────────────────────── commit ──────────────────────────────────

describe('SIGKILL during a commit', () => {
  /** A running container that wrote 32 MiB of random bytes and 500 small files, then idles. */
  async function writer(): Promise<string> {
    const script =
      'dd if=/dev/urandom of=/big bs=1M count=32 2>/dev/null; mkdir /many; i=0; while [ $i -lt 500 ]; do echo $i > /many/$i; i=$((i+1)); done; echo ready; exec sleep 300';
    const id = await createContainer(env.busybox, ['sh', '-c', script]);
    await startContainer(id);
    await waitFor(async () => (await logText(id)).includes('ready'), 'the writer to be ready', 30_000, 50);
    return id;
  }
  const CHECK = ['sh', '-c', 'wc -c < /big; ls /many | wc -l'];

  const cases: [string, (answered: boolean) => boolean][] = [
    // The layer's blob is being written (content/ingest) and its tree filled (layers/tmp).
    [
      'while the layer is stored',
      () =>
        listDir(path.join(d.dataRoot, 'content/ingest')).some(
          (n) => n.startsWith('new-') && sizeOf(path.join(d.dataRoot, 'content/ingest', n)) > 4 * MiB,
        ),
    ],
    // Answered: the image is recorded; its tree may still be filling in the background.
    ['right after the answer', (answered) => answered],
  ];
  it.each(cases)(
    '%s: the container runs on, and the image is whole or absent',
    async (_what, when) => {
      const id = await writer();
      const before = snapshot();
      const ref = `crash/commit:${Math.random().toString(36).slice(2, 8)}`;
      let answered = false;
      const committing = send(
        'POST',
        `/commit?container=${id}&repo=${q(ref.split(':')[0]!)}&tag=${ref.split(':')[1]}`,
      ).then((r) => {
        answered = r.status === 201;
        return r;
      });
      await killWhen(() => when(answered), 'the moment to kill');
      await committing;
      await d.restart();

      // The container was frozen for the commit: it runs on, unfrozen, as before.
      expect(await state(id)).toMatchObject({ Status: 'running', Running: true, Paused: false });
      const listed = (await images()).some((i) => i.RepoTags?.includes(ref));
      if (answered) expect(listed).toBe(true);
      await expectNoLeaks(d, before);
      if (listed) expect(await runToEnd(ref, CHECK)).toBe(`${32 * MiB}\n500\n`);

      // Commit again, and the container is still managed: logs, stop, wait.
      const again = await d.request('POST', `/commit?container=${id}&repo=crash/again`);
      expect(again.status, again.text).toBe(201);
      expect(await runToEnd('crash/again', CHECK)).toBe(`${32 * MiB}\n500\n`);
      expect(await logText(id)).toBe('ready\n');
      const waiting = d.request('POST', `/containers/${id}/wait`);
      expect((await d.request('POST', `/containers/${id}/stop?t=0`)).status).toBe(204);
      expect((await waiting).json.StatusCode).toBe(137);
      expect((await d.request('DELETE', `/containers/${id}`)).status).toBe(204);
      for (const r of listed ? [ref, 'crash/again'] : ['crash/again'])
        expect((await d.request('DELETE', `/images/${q(r)}`)).status).toBe(200);
      const clean = await expectNoLeaks(d, before);
      expect(clean.containerDirs).toEqual(before.containerDirs.filter((c) => c !== id));
    },
    HEAVY_MS,
  );
});

// ────────────────────────────────── create ──────────────────────────────────

describe('SIGKILL during a create', () => {
  const containersDir = () => path.join(d.dataRoot, 'containers');
  const newDirs = (known: string[]) =>
    listDir(containersDir()).filter((n) => /^[0-9a-f]{64}$/.test(n) && !known.includes(n));
  const cases: [string, (known: string[], answered: boolean) => boolean][] = [
    // The container's directory is made; its record may or may not be written yet.
    ['once its directory is made', (known) => newDirs(known).length > 0],
    // Answered: the rootfs is being mounted and the bundle written in the background.
    ['right after the answer', (_known, answered) => answered],
    // The bundle is written: everything a create does is done.
    [
      'once its bundle is written',
      (known) => newDirs(known).some((id) => existsSync(path.join(containersDir(), id, 'config.json'))),
    ],
  ];
  it.each(cases)('%s: the container is whole or absent, and can be created again', async (_what, when) => {
    const before = snapshot();
    const known = listDir(containersDir());
    let answered = false;
    const name = `crash-create-${Math.random().toString(36).slice(2, 8)}`;
    const creating = send('POST', `/containers/create?name=${name}`, {
      body: { Image: env.busybox, Cmd: ['echo', 'made'] },
    }).then((r) => (answered = r.status === 201));
    await killWhen(() => when(known, answered), 'the moment to kill');
    await creating;
    await d.restart();

    const found = await d.request('GET', `/containers/${name}/json`);
    if (answered) expect(found.status).toBe(200);
    if (found.status === 200) {
      const id = found.json.Id as string;
      const rootfs = path.join(containersDir(), id, 'rootfs');
      await expectNoLeaks(d, allowing(before, containerHoldings(id, { running: false, mounted: isMounted(rootfs) })));
      // Whole: it starts and runs.
      await startContainer(id);
      expect((await d.request('POST', `/containers/${id}/wait`)).json.StatusCode).toBe(0);
      expect(await logText(id)).toBe('made\n');
      expect((await d.request('DELETE', `/containers/${id}`)).status).toBe(204);
    } else {
      expect(found.status).toBe(404);
      await expectNoLeaks(d, before);
    }
    // And the same create (same name) works.
    expect(normalize(await runToEnd(env.busybox, ['echo', 'again']))).toBe('again');
    const r = await d.request('POST', `/containers/create?name=${name}`, {
      body: { Image: env.busybox, Cmd: ['true'] },
    });
    expect(r.status, r.text).toBe(201);
    expect((await d.request('DELETE', `/containers/${name}`)).status).toBe(204);
    await expectNoLeaks(d, before);
  });
});

// ─────────────────────────────────── start ───────────────────────────────────

describe('SIGKILL during a start', () => {
  const cases: [string, (id: string) => boolean][] = [
    // conmon runs `runc create`: the runtime's state directory appears.
    ['while the runtime creates it', (id) => existsSync(path.join(d.execRoot, 'runc', id))],
    // Created and monitored: conmon's pid file is written; the process is released next.
    ['once its monitor is up', (id) => existsSync(path.join(d.dataRoot, 'containers', id, 'conmon.pid'))],
    // Released: the process runs (its output is in the log); the run may not be recorded yet.
    ['once its process runs', (id) => sizeOf(path.join(d.dataRoot, 'containers', id, 'ctr.log')) > 0],
  ];
  it.each(cases)('%s: the container ends up running and managed, or created and startable', async (_what, when) => {
    const before = snapshot();
    const id = await createContainer(env.busybox, ['sh', '-c', 'echo started; exec sleep 300']);
    await waitFor(() => existsSync(path.join(d.dataRoot, 'containers', id, 'config.json')), 'the bundle');
    const starting = send('POST', `/containers/${id}/start`);
    await killWhen(() => when(id), 'the moment to kill');
    const answer = await starting;
    await d.restart();

    const s = await state(id);
    if (answer.status === 204) expect(s.Status).toBe('running');
    expect(['running', 'created']).toContain(s.Status);
    const rootfs = path.join(d.dataRoot, 'containers', id, 'rootfs');
    await expectNoLeaks(
      d,
      allowing(before, containerHoldings(id, { running: s.Status === 'running', mounted: isMounted(rootfs) })),
    );
    if (s.Status === 'created') {
      await startContainer(id);
    }
    await waitFor(async () => (await logText(id)) === 'started\n', 'its output');
    expect(await state(id)).toMatchObject({ Status: 'running', Running: true });
    const waiting = d.request('POST', `/containers/${id}/wait`);
    expect((await d.request('POST', `/containers/${id}/stop?t=0`)).status).toBe(204);
    expect((await waiting).json.StatusCode).toBe(137);
    expect((await d.request('DELETE', `/containers/${id}`)).status).toBe(204);
    await expectNoLeaks(d, before);
  });
});

describe('a start whose record a crash cut short', () => {
  // The moment between releasing the process and recording the run is too
  // short to hit from outside: made by hand, from a run recorded as created.
  const unrecord = (id: string) => {
    const db = new Database(path.join(d.dataRoot, 'berth.db'));
    db.prepare("UPDATE containers SET status = 'created', pid = 0, started_at = 0 WHERE id = ?").run(id);
    db.close();
  };

  it("adopts a process that runs as the container's run", async () => {
    const before = snapshot();
    const id = await createContainer(env.busybox, ['sh', '-c', 'echo started; exec sleep 300']);
    await startContainer(id);
    const pid = (await state(id)).Pid;
    await d.kill();
    unrecord(id);
    await d.restart();
    expect(await state(id)).toMatchObject({ Status: 'running', Running: true, Pid: pid });
    expect(await logText(id)).toBe('started\n');
    const waiting = d.request('POST', `/containers/${id}/wait`);
    expect((await d.request('POST', `/containers/${id}/kill`)).status).toBe(204);
    expect((await waiting).json.StatusCode).toBe(137);
    expect((await d.request('DELETE', `/containers/${id}`)).status).toBe(204);
    await expectNoLeaks(d, before);
  });

  it('records the exit of a process that ended while berthd was down', async () => {
    const before = snapshot();
    const id = await createContainer(env.busybox, ['sh', '-c', 'read x; exit 7'], { OpenStdin: true });
    await startContainer(id);
    const pid = (await state(id)).Pid as number;
    await d.kill();
    unrecord(id);
    // Its stdin (held by conmon) never ends; killed from outside it exits 137.
    process.kill(pid, 'SIGKILL');
    await waitFor(() => existsSync(path.join(d.execRoot, 'exits', id)), 'the exit to be recorded by conmon');
    await d.restart();
    expect(await state(id)).toMatchObject({ Status: 'exited', Running: false, ExitCode: 137 });
    expect((await d.request('POST', `/containers/${id}/wait`)).json.StatusCode).toBe(137);
    expect((await d.request('DELETE', `/containers/${id}`)).status).toBe(204);
    await expectNoLeaks(d, before);
  });
});

// ──────────────────────────────────── rm ────────────────────────────────────

describe('SIGKILL during an rm', () => {
  const cases: [string, boolean, 'sent' | 'answered' | 'exited'][] = [
    // A stopped container whose writable layer is large: the deletion goes on after the answer.
    ['of a stopped container, right after the answer', false, 'answered'],
    ['of a stopped container, as it is asked', false, 'sent'],
    // rm -f of a running one: killed once its process is gone, before the record goes.
    ['-f of a running container, once its process is gone', true, 'exited'],
  ];
  it.each(cases)('%s: the container is gone entirely, or still there whole', async (_what, running, moment) => {
    const before = snapshot();
    const script =
      'mkdir /many; i=0; while [ $i -lt 1000 ]; do echo $i > /many/$i; i=$((i+1)); done; dd if=/dev/urandom of=/big bs=1M count=16 2>/dev/null; echo done' +
      (running ? '; exec sleep 300' : '');
    const id = await createContainer(env.busybox, ['sh', '-c', script]);
    await startContainer(id);
    await waitFor(async () => (await logText(id)).includes('done'), 'the writes', 30_000, 50);
    if (!running) expect((await d.request('POST', `/containers/${id}/wait`)).json.StatusCode).toBe(0);
    const pid = (await state(id)).Pid as number;
    let answered = false;
    const removing = send('DELETE', `/containers/${id}${running ? '?force=1' : ''}`).then(
      (r) => (answered = r.status === 204),
    );
    const gone = (p: number) =>
      !existsSync(`/proc/${p}`) || readFileSync(`/proc/${p}/stat`, 'utf8').split(' ')[2] === 'Z';
    await killWhen(
      () => (moment === 'sent' ? true : moment === 'answered' ? answered : gone(pid)),
      'the moment to kill',
    );
    await removing;
    await d.restart();

    const found = await d.request('GET', `/containers/${id}/json`);
    if (answered) expect(found.status).toBe(404);
    if (found.status === 200) {
      // Still there: stopped (an rm -f's kill took effect while berthd was down), and removable.
      expect(found.json.State).toMatchObject({ Running: false });
      expect((await d.request('DELETE', `/containers/${id}`)).status).toBe(204);
    } else {
      expect(found.status).toBe(404);
    }
    await expectNoLeaks(d, before);
  });
});

// ──────────────────────────────────── rmi ────────────────────────────────────

describe('SIGKILL during an rmi', () => {
  // Answered: the layer trees and blobs are being deleted in the background.
  it(
    'right after the answer: the image is gone entirely, and can be pulled again',
    async () => {
      const before = snapshot();
      await pull(d, large);
      let answered = false;
      const removing = send('DELETE', `/images/${q(large)}`).then((r) => (answered = r.status === 200));
      await killWhen(() => answered, 'the answer');
      await removing;
      await d.restart();

      expect(await expectWholeOrAbsent(large)).toBe(false);
      await expectNoLeaks(d, before);
      // It can be pulled again.
      await pull(d, large);
      expect(await expectWholeOrAbsent(large)).toBe(true);
      expect((await d.request('DELETE', `/images/${q(large)}`)).status).toBe(200);
      await expectNoLeaks(d, before);
    },
    HEAVY_MS,
  );
});

// ─────────────────────────────── 20 containers ───────────────────────────────

describe('SIGKILL with 20 containers running', () => {
  let trigger: string;
  beforeAll(() => {
    trigger = mkdtempSync(path.join(os.tmpdir(), 'berth-trigger-'));
  });
  afterAll(() => rmSync(trigger, { recursive: true, force: true }));

  it(
    'keeps the running ones running and managed, and reports the exits that happened meanwhile with their codes',
    async () => {
      const before = snapshot();
      // Ten run on; ten wait for a file that appears only while berthd is dead, then exit with their own code.
      const run = async (cmd: string[], extra: Record<string, unknown> = {}) => {
        const id = await createContainer(env.busybox, cmd, extra);
        await startContainer(id);
        return id;
      };
      const lasting = await Promise.all(
        Array.from({ length: 10 }, (_, i) => run(['sh', '-c', `echo lasting-${i}; exec sleep 300`])),
      );
      const ending = await Promise.all(
        Array.from({ length: 10 }, async (_, i) => {
          const code = i + 1;
          const script = `echo ending-${i}; while [ ! -e /trigger/go ]; do sleep 0.05; done; echo bye-${i}; exit ${code}`;
          return { id: await run(['sh', '-c', script], { HostConfig: { Binds: [`${trigger}:/trigger:ro`] } }), code };
        }),
      );
      await Promise.all(lasting.map((id) => waitFor(async () => (await logText(id)).includes('lasting'), 'output')));
      await Promise.all(ending.map(({ id }) => waitFor(async () => (await logText(id)).includes('ending'), 'output')));
      const pids = new Map<string, number>();
      for (const id of lasting) pids.set(id, (await state(id)).Pid);
      await d.kill();

      // While berthd is down: ten exit with codes 1..10, and one lasting container is killed from outside.
      writeFileSync(path.join(trigger, 'go'), '');
      const victim = lasting.pop()!;
      process.kill(pids.get(victim)!, 'SIGKILL');
      const exitFile = (id: string) => path.join(d.execRoot, 'exits', id);
      await waitFor(
        () => [...ending.map((e) => e.id), victim].every((id) => existsSync(exitFile(id))),
        'the exits to be recorded by conmon',
        20_000,
        20,
      );
      await d.restart();

      for (const [i, { id, code }] of ending.entries()) {
        expect(await state(id)).toMatchObject({ Status: 'exited', Running: false, ExitCode: code });
        expect((await d.request('POST', `/containers/${id}/wait`)).json.StatusCode).toBe(code);
        expect(await logText(id)).toBe(`ending-${i}\nbye-${i}\n`);
      }
      expect(await state(victim)).toMatchObject({ Status: 'exited', ExitCode: 137 });
      for (const id of lasting)
        expect(await state(id)).toMatchObject({ Status: 'running', Running: true, Pid: pids.get(id) });
      // Managed as before: logs, wait, stop, kill.
      const waits = lasting.map((id) => d.request('POST', `/containers/${id}/wait`));
      for (const [i, id] of lasting.entries()) expect(await logText(id)).toBe(`lasting-${i}\n`);
      const stops = await Promise.all(
        lasting.map((id, i) => d.request('POST', i % 2 ? `/containers/${id}/stop?t=0` : `/containers/${id}/kill`)),
      );
      expect(stops.map((r) => r.status)).toEqual(lasting.map(() => 204));
      expect((await Promise.all(waits)).map((w) => w.json.StatusCode)).toEqual(lasting.map(() => 137));
      const removals = await Promise.all(
        [...lasting, victim, ...ending.map((e) => e.id)].map((id) => d.request('DELETE', `/containers/${id}`)),
      );
      expect(removals.map((r) => r.status)).toEqual(removals.map(() => 204));
      await expectNoLeaks(d, before);
    },
    HEAVY_MS,
  );

  it('restarts, at the next start, containers whose restart policy came due while berthd was down', async () => {
    const before = snapshot();
    const policy = { HostConfig: { RestartPolicy: { Name: 'always' } } };
    // One whose process dies while berthd is down; one recorded as exited (its restart had failed).
    const dying = await createContainer(env.busybox, ['sh', '-c', 'echo run; exec sleep 300'], policy);
    const failed = await createContainer(env.busybox, ['sh', '-c', 'echo run; exec sleep 300'], policy);
    for (const id of [dying, failed]) await startContainer(id);
    const pids = [(await state(dying)).Pid as number, (await state(failed)).Pid as number];
    await d.kill();
    for (const pid of pids) process.kill(pid, 'SIGKILL');
    await waitFor(
      () => [dying, failed].every((id) => existsSync(path.join(d.execRoot, 'exits', id))),
      'the exits to be recorded by conmon',
    );
    const db = new Database(path.join(d.dataRoot, 'berth.db'));
    db.prepare("UPDATE containers SET status = 'exited', exit_code = 137, pid = 0 WHERE id = ?").run(failed);
    db.close();
    await d.restart();
    for (const [i, id] of [dying, failed].entries()) {
      await waitFor(async () => (await state(id)).Status === 'running', 'the restart');
      expect((await state(id)).Pid).not.toBe(pids[i]);
      await waitFor(async () => (await logText(id)) === 'run\nrun\n', "the second run's output");
    }
    for (const id of [dying, failed]) expect((await d.request('DELETE', `/containers/${id}?force=1`)).status).toBe(204);
    await expectNoLeaks(d, before);
  });
});
