// inspect's LogPath: dockerd's json-file log, <container dir>/<id>-json.log,
// which kubelet (through cri-dockerd's link), crictl and node log shippers read
// directly. Its lines against dockerd 20.10's for the same output; partial
// entries for a long line; whole once wait answers; followed while the
// container runs; rotated with the log; resumed after berthd is SIGKILLed,
// nothing lost or doubled; `docker logs` as before.
import { existsSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { gunzipSync } from 'node:zlib';
import { beforeAll, describe, expect, it } from 'vitest';
import { waitFor, type Daemon } from '../harness/daemon.js';
import { useEnv, type Env } from '../harness/env.js';
import { demuxText } from '../harness/streams.js';

const ctx = useEnv();
let env: Env;
let d: Daemon;
beforeAll(() => {
  ({ env, daemon: d } = ctx);
});

const FIXTURE = JSON.parse(
  readFileSync(path.join(import.meta.dirname, '../../fixtures/logs/dockerd-json-file.json'), 'utf8'),
) as { cmd: string[]; lines: string[] };

/** Numbered lines until killed: line 0, line 1, … */
const NUMBERED = ['sh', '-c', 'i=0; while true; do echo "line $i"; i=$((i+1)); sleep 0.01; done'];

interface Entry {
  log: string;
  stream: string;
  time: string;
}

async function create(cmd: string[], logConfig?: Record<string, unknown>): Promise<string> {
  const r = await d.request('POST', '/containers/create', {
    body: {
      Image: env.busybox,
      Cmd: cmd,
      HostConfig: { NetworkMode: 'none', ...(logConfig ? { LogConfig: logConfig } : {}) },
    },
  });
  expect(r.status, r.text).toBe(201);
  return r.json.Id as string;
}

async function start(id: string): Promise<void> {
  const s = await d.request('POST', `/containers/${id}/start`);
  expect(s.status, s.text).toBe(204);
}

async function wait(id: string): Promise<void> {
  expect((await d.request('POST', `/containers/${id}/wait`)).status).toBe(200);
}

async function kill(id: string): Promise<void> {
  expect((await d.request('POST', `/containers/${id}/kill`)).status).toBe(204);
}

const dirOf = (id: string) => path.join(d.dataRoot, 'containers', id);
const logPathOf = async (id: string) => (await d.request('GET', `/containers/${id}/json`)).json.LogPath as string;

/** A log's files, oldest first (<log>.N[.gz] … <log>.1, <log>), read whole: by default the json-file log. */
function mirrorFiles(id: string, base = `${id}-json.log`): { name: string; lines: string[] }[] {
  const index = (n: string) => Number(/^\.(\d+)/.exec(n.slice(base.length))?.[1] ?? 0);
  return readdirSync(dirOf(id))
    .filter((n) => n.startsWith(base))
    .sort((a, b) => index(b) - index(a))
    .map((name) => {
      const raw = readFileSync(path.join(dirOf(id), name));
      const text = (name.endsWith('.gz') ? gunzipSync(raw) : raw).toString('utf8');
      return { name, lines: text.split('\n').filter(Boolean) };
    });
}

/** How many lines each of a log's files holds, oldest first: the json-file log's match conmon's records. */
const lineCounts = (id: string, base?: string) => mirrorFiles(id, base).map((f) => f.lines.length);

const entries = (id: string): Entry[] => mirrorFiles(id).flatMap((f) => f.lines.map((l) => JSON.parse(l) as Entry));

/** The stdout lines `docker logs` gives. */
async function logLines(id: string): Promise<string[]> {
  const r = await d.request('GET', `/containers/${id}/logs?stdout=1&stderr=1`);
  expect(r.status, r.text).toBe(200);
  return demuxText(r.body).split('\n').filter(Boolean);
}

/** The entries' lines, each entry a whole line here. */
const lines = (es: Entry[]) => es.map((e) => e.log.replace(/\n$/, ''));

/** Asserts "line a", "line a+1", … with no gap or repeat; returns a. */
function contiguous(ls: string[]): number {
  expect(ls.length).toBeGreaterThan(0);
  const first = Number(/^line (\d+)$/.exec(ls[0]!)?.[1]);
  expect(ls.filter((l, k) => l !== `line ${first + k}`).slice(0, 3)).toEqual([]);
  return first;
}

// Go's RFC3339Nano in UTC: the fraction's trailing zeros dropped.
const RFC3339_NANO = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d*[1-9])?Z$/;
const withoutTime = (line: string) => line.replace(/,"time":"[^"]*"}$/, '}');

describe('LogPath', () => {
  it("is <id>-json.log, there from create, shown from the first start, with dockerd 20.10's lines for the same output, whole once wait answers", async () => {
    const id = await create(FIXTURE.cmd);
    const file = path.join(dirOf(id), `${id}-json.log`);
    // dockerd shows no LogPath before the first start; berth's file is there, empty, already.
    expect(await logPathOf(id)).toBe('');
    expect(statSync(file).size).toBe(0);
    expect(statSync(file).mode & 0o777).toBe(0o640);
    await start(id);
    await wait(id);
    // Read right after wait, with no retry: the exit is reported once the file is whole.
    const got = readFileSync(file, 'utf8').split('\n').filter(Boolean);
    expect(await logPathOf(id)).toBe(file);
    const byStream = (ls: string[], s: string) => ls.filter((l) => l.includes(`"stream":"${s}"`)).map(withoutTime);
    for (const s of ['stdout', 'stderr']) expect(byStream(got, s)).toEqual(byStream(FIXTURE.lines, s));
    for (const l of got) expect(JSON.parse(l).time).toMatch(RFC3339_NANO);
    // docker logs reads conmon's log as before.
    expect(demuxText((await d.request('GET', `/containers/${id}/logs?stdout=1`)).body)).toContain('nonl');
    // A second run appends, as dockerd's file (each stream in its order; conmon reads the two pipes
    // in its own order, so a stdout and a stderr line written together may come either way round).
    await start(id);
    await wait(id);
    const both = readFileSync(file, 'utf8').split('\n').filter(Boolean);
    for (const s of ['stdout', 'stderr']) expect(byStream(both, s)).toEqual(byStream([...got, ...got], s));
  });

  it('splits a line over 16 KiB into partial entries (no newline) that join back to the line', async () => {
    const id = await create(['sh', '-c', 'head -c 20000 /dev/zero | tr "\\0" x; echo; echo end']);
    await start(id);
    await wait(id);
    const es = entries(id);
    expect(es.length).toBeGreaterThan(2);
    expect(es.at(-1)!.log).toBe('end\n');
    const pieces = es.slice(0, -1);
    expect(pieces.slice(0, -1).every((e) => !e.log.endsWith('\n'))).toBe(true);
    expect(pieces.map((e) => e.log).join('')).toBe(`${'x'.repeat(20000)}\n`);
  });

  it('is written while the container runs', async () => {
    const id = await create(NUMBERED);
    await start(id);
    await waitFor(() => entries(id).length >= 30, '30 entries while it runs', 30_000);
    expect((await d.request('GET', `/containers/${id}/json`)).json.State.Running).toBe(true);
    expect(contiguous(lines(entries(id)))).toBe(0);
    await kill(id);
    await wait(id);
    expect(lines(entries(id))).toEqual(await logLines(id));
  });

  it('rotates with the log (max-size, max-file, compress): the same files, the same lines', async () => {
    for (const compress of [false, true]) {
      const Config = { 'max-size': '1k', 'max-file': '3', ...(compress ? { compress: 'true' } : {}) };
      const id = await create(NUMBERED, { Type: 'json-file', Config });
      await start(id);
      await waitFor(
        () => existsSync(path.join(dirOf(id), 'ctr.log.2.gz')) || existsSync(path.join(dirOf(id), 'ctr.log.2')),
        'two rotations',
        60_000,
      );
      await waitFor(async () => !(await logLines(id))[0]!.endsWith(' 0'), 'the first lines rotated out', 60_000);
      await kill(id);
      await wait(id);
      const files = mirrorFiles(id);
      const base = `${id}-json.log`;
      expect(files.map((f) => f.name)).toEqual(
        compress ? [`${base}.2.gz`, `${base}.1.gz`, base] : [`${base}.2`, `${base}.1`, base],
      );
      const all = lines(entries(id));
      expect(contiguous(all)).toBeGreaterThan(0);
      expect(all).toEqual(await logLines(id));
      expect(lineCounts(id)).toEqual(lineCounts(id, 'ctr.log'));
    }
  });

  it("with max-file=1 starts afresh with conmon's cap, the last file kept as <log>.1 as dockerd does", async () => {
    const id = await create(NUMBERED, { Type: 'json-file', Config: { 'max-size': '1k', 'max-file': '1' } });
    await start(id);
    await waitFor(async () => !(await logLines(id))[0]!.endsWith(' 0'), 'the log started afresh', 60_000);
    await kill(id);
    await wait(id);
    const files = mirrorFiles(id);
    expect(files.map((f) => f.name)).toEqual([`${id}-json.log.1`, `${id}-json.log`]);
    const live = files[1]!.lines.map((l) => (JSON.parse(l) as Entry).log.replace(/\n$/, ''));
    expect(live).toEqual(await logLines(id));
    contiguous(files.flatMap((f) => f.lines.map((l) => (JSON.parse(l) as Entry).log.replace(/\n$/, ''))));
  });

  it('resumes after berthd is SIGKILLed while the container writes: nothing lost, nothing twice', async () => {
    const id = await create(NUMBERED, { Type: 'json-file', Config: { 'max-size': '2k', 'max-file': '20' } });
    await start(id);
    // Past a rotation or two of the log (and so of its copy) before the crash.
    await waitFor(() => entries(id).length >= 150, '150 entries', 30_000);
    await d.kill();
    // Written while berthd is down; and a line torn by the crash, as a write cut short would leave it.
    await new Promise((r) => setTimeout(r, 700));
    writeFileSync(path.join(dirOf(id), `${id}-json.log`), '{"log":"line 9', { flag: 'a' });
    await d.restart();
    const before = (await logLines(id)).length;
    await waitFor(async () => (await logLines(id)).length >= before + 50, '50 more lines', 30_000);
    await kill(id);
    await wait(id);
    const all = lines(entries(id));
    expect(contiguous(all)).toBe(0);
    expect(all).toEqual(await logLines(id));
    expect(mirrorFiles(id).length).toBeGreaterThan(1);
    expect(lineCounts(id)).toEqual(lineCounts(id, 'ctr.log'));
  });

  it('resumes after a restart of berthd that finds it just rotated, its live file still empty', async () => {
    // A burst that passes max-size, then quiet: the rotation leaves both live files empty.
    const burst = ['sh', '-c', 'i=0; while [ $i -lt 100 ]; do echo "line $i"; i=$((i+1)); done; exec sleep 600'];
    const id = await create(burst, { Type: 'json-file', Config: { 'max-size': '1k', 'max-file': '5' } });
    await start(id);
    const live = path.join(dirOf(id), `${id}-json.log`);
    await waitFor(
      () => existsSync(`${live}.1`) && statSync(live).size === 0 && entries(id).length === 100,
      'the burst copied and the copy rotated',
      30_000,
    );
    expect(await d.stop()).toBe(0);
    await d.restart();
    await kill(id);
    await wait(id);
    expect(lineCounts(id)).toEqual(lineCounts(id, 'ctr.log'));
    expect(lines(entries(id))).toEqual(await logLines(id));
    expect(contiguous(lines(entries(id)))).toBe(0);
  });

  it('is none for local and none', async () => {
    for (const Type of ['local', 'none']) {
      const id = await create(['echo', 'hi'], { Type, Config: {} });
      await start(id);
      await wait(id);
      expect(await logPathOf(id)).toBe('');
      expect(existsSync(path.join(dirOf(id), `${id}-json.log`))).toBe(false);
    }
  });
});
