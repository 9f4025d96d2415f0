// The runtime layer against the real kernel, conmon and runc: a busybox
// rootfs on overlay, bundles from buildSpec, exits via inotify, logs from
// conmon's k8s-file. Every container, mount and conmon is removed even when a
// test fails.
import { execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import {
  copyFileSync,
  existsSync,
  mkdirSync,
  readFileSync,
  readdirSync,
  rmdirSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { appendFile, mkdir, mkdtemp, readFile, rename, rm, symlink, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import ts from 'typescript';
import { gzipSync } from 'node:zlib';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { buildSpec, type SpecInput } from '../../src/engine/containers/spec/spec.js';
import { prepareRootfs, releaseRootfs } from '../../src/engine/layers/rootfs-mounts.js';
import { isMountPoint } from '../../src/engine/os/mount.js';
import { RuntimeCreateError } from '../../src/engine/runtime/errors.js';
import { ExitWatcher } from '../../src/engine/runtime/exits.js';
import { compressRotated, lockLog, shiftLogs } from '../../src/engine/runtime/logfiles.js';
import { readLog, type LogEntry, type ReadLogOptions } from '../../src/engine/runtime/logs.js';
import { Runtime } from '../../src/engine/runtime/runtime.js';
import { parseRuncState, type RuncState } from '../../src/engine/runtime/state.js';
import { isEngineError } from '../../src/errors.js';
import { createLogger } from '../../src/log.js';

const RUNC = '/usr/sbin/runc';
const CONMON = '/usr/bin/conmon';
const CGROUP_PARENT = '/berth-test';
const REPO = path.resolve(import.meta.dirname, '../..');

let root: string;
let runtime: Runtime;
let exits: ExitWatcher;
let busyboxLayer: string;
let extraLayer: string;
const debugRecords: Record<string, unknown>[] = [];
const cleanups: (() => Promise<unknown> | unknown)[] = [];

/** Runs every registered cleanup, newest first; one failing does not stop the others. */
async function cleanUp(): Promise<void> {
  for (const fn of cleanups.splice(0).reverse()) {
    try {
      await fn();
    } catch (e) {
      console.error('cleanup:', e);
    }
  }
}

/** A busybox userland as an image layer: the static binary plus one symlink per applet. */
function makeBusyboxLayer(dir: string): void {
  for (const d of ['bin', 'proc', 'sys', 'dev', 'etc', 'tmp', 'root'])
    mkdirSync(path.join(dir, d), { recursive: true });
  copyFileSync('/bin/busybox', path.join(dir, 'bin/busybox'));
  const applets = execFileSync('/bin/busybox', ['--list'], { encoding: 'utf8' }).split('\n');
  for (const name of applets.filter((n) => n && n !== 'busybox' && !n.includes('/'))) {
    symlinkSync('busybox', path.join(dir, 'bin', name));
  }
}

beforeAll(async () => {
  root = await mkdtemp(path.join(os.tmpdir(), 'berth-rt-'));
  busyboxLayer = path.join(root, 'layers/busybox');
  extraLayer = path.join(root, 'layers/extra');
  makeBusyboxLayer(busyboxLayer);
  mkdirSync(path.join(extraLayer, 'etc'), { recursive: true });
  writeFileSync(path.join(extraLayer, 'etc/motd'), 'from the top layer\n');
  const logger = createLogger('debug', { write: (s: string) => void debugRecords.push(JSON.parse(s)) });
  runtime = new Runtime({ runcPath: RUNC, conmonPath: CONMON, execRoot: path.join(root, 'run'), logger });
  exits = new ExitWatcher(path.join(root, 'exits'));
  await exits.start();
});

afterEach(cleanUp);

afterAll(async () => {
  await cleanUp();
  exits?.close();
  for (const hierarchy of readdirSync('/sys/fs/cgroup')) {
    const dir = path.join('/sys/fs/cgroup', hierarchy, CGROUP_PARENT);
    if (existsSync(dir)) rmdirSync(dir);
  }
  if (root) await rm(root, { recursive: true, force: true });
});

interface Ctr {
  id: string;
  dir: string;
  rootfs: string;
  logPath: string;
  pid: number;
  conmonPid: number;
  createMs: number;
}

const newId = () => `t${randomBytes(12).toString('hex')}`;

/** Mounts a rootfs and writes a bundle for it; registers their removal. */
async function bundle(id: string, over: Partial<SpecInput>): Promise<{ dir: string; rootfs: string }> {
  const dir = path.join(root, 'containers', id);
  const rootfs = path.join(dir, 'rootfs');
  await mkdir(dir, { recursive: true });
  cleanups.push(() => releaseRootfs(rootfs));
  await prepareRootfs({
    lowerDirs: [extraLayer, busyboxLayer],
    upperDir: path.join(dir, 'upper'),
    workDir: path.join(dir, 'work'),
    target: rootfs,
  });
  await writeFile(path.join(dir, 'hostname'), `${over.hostname ?? 'berthtest'}\n`);
  await writeFile(path.join(dir, 'hosts'), '127.0.0.1\tlocalhost\n');
  const spec = buildSpec({
    env: ['PATH=/bin', 'HOME=/root'],
    cwd: '/',
    hostname: 'berthtest',
    rootfsPath: rootfs,
    networkMode: 'none',
    cgroupsPath: `${CGROUP_PARENT}/${id}`,
    hostsFiles: { hostname: path.join(dir, 'hostname'), hosts: path.join(dir, 'hosts') },
    args: ['true'],
    ...over,
  });
  await writeFile(path.join(dir, 'config.json'), JSON.stringify(spec));
  return { dir, rootfs };
}

/** Creates (not starts) a container; its runtime record and conmon go away at cleanup. */
async function create(over: Partial<SpecInput>, id = newId()): Promise<Ctr> {
  const { dir, rootfs } = await bundle(id, over);
  cleanups.push(() => runtime.delete(id, true));
  cleanups.push(() => killConmon(dir));
  const logPath = path.join(dir, 'ctr.log');
  const t0 = performance.now();
  const { pid, conmonPid } = await runtime.create({ id, bundleDir: dir, logPath, exitDir: exits.exitDir });
  return { id, dir, rootfs, logPath, pid, conmonPid, createMs: performance.now() - t0 };
}

async function killConmon(dir: string): Promise<void> {
  const pid = await runtime.conmonPid(dir);
  if (pid !== null) process.kill(pid, 'SIGKILL');
}

/** create + start + the exit conmon reports, with each step's duration. */
async function run(over: Partial<SpecInput>) {
  const c = await create(over);
  const exited = exits.waitExit(c.id);
  const t0 = performance.now();
  await runtime.start(c.id);
  const startMs = performance.now() - t0;
  const exitCode = await exited;
  const exitMs = performance.now() - t0 - startMs;
  return { ...c, exitCode, startMs, exitMs };
}

async function collect(file: string, o: ReadLogOptions = {}): Promise<LogEntry[]> {
  const out: LogEntry[] = [];
  for await (const e of readLog(file, o)) out.push(e);
  return out;
}

const text = (entries: LogEntry[], stream?: string) =>
  entries
    .filter((e) => !stream || e.stream === stream)
    .map((e) => e.line.toString())
    .join('');

const sh = (script: string) => ['sh', '-c', script];

describe('overlay rootfs', () => {
  it('mounts 120 lower layers (topmost first) and unmounts, tolerating a second release', async () => {
    // Long layer paths: 120 of them cannot fit in one page of mount options.
    const layersDir = path.join(root, 'overlay-layers-with-a-deliberately-long-directory-name');
    const lowers: string[] = [];
    for (let i = 0; i < 120; i++) {
      const dir = path.join(layersDir, randomBytes(32).toString('hex'), 'diff');
      mkdirSync(dir, { recursive: true });
      writeFileSync(path.join(dir, `f${i}`), String(i));
      writeFileSync(path.join(dir, 'common'), String(i));
      lowers.push(dir);
    }
    expect(lowers.join(':').length).toBeGreaterThan(4096);
    const target = path.join(root, 'ov120/merged');
    cleanups.push(() => releaseRootfs(target));
    await prepareRootfs({
      lowerDirs: lowers,
      upperDir: path.join(root, 'ov120/upper'),
      workDir: path.join(root, 'ov120/work'),
      target,
    });
    expect(isMountPoint(target)).toBe(true);
    expect(readFileSync(path.join(target, 'common'), 'utf8')).toBe('0');
    expect(readFileSync(path.join(target, 'f119'), 'utf8')).toBe('119');
    expect(readdirSync(target)).toHaveLength(121);
    writeFileSync(path.join(target, 'written'), 'x');
    expect(existsSync(path.join(root, 'ov120/upper/written'))).toBe(true);
    // Mounting again is a no-op, not a second overlay on top.
    await prepareRootfs({
      lowerDirs: lowers,
      upperDir: path.join(root, 'ov120/upper'),
      workDir: path.join(root, 'ov120/work'),
      target,
    });
    await releaseRootfs(target);
    expect(isMountPoint(target)).toBe(false);
    expect(existsSync(path.join(target, 'common'))).toBe(false);
    await releaseRootfs(target);
    await releaseRootfs(path.join(root, 'no/such/dir'));
  });

  it('mounts a short layer list with plain paths', async () => {
    const target = path.join(root, 'ov2/merged');
    cleanups.push(() => releaseRootfs(target));
    await prepareRootfs({
      lowerDirs: [extraLayer, busyboxLayer],
      upperDir: path.join(root, 'ov2/upper'),
      workDir: path.join(root, 'ov2/work'),
      target,
    });
    const info = readFileSync('/proc/self/mountinfo', 'utf8')
      .split('\n')
      .find((l) => l.split(' ')[4] === target)!;
    expect(info).toContain(`lowerdir=${extraLayer}:${busyboxLayer}`);
    expect(readFileSync(path.join(target, 'etc/motd'), 'utf8')).toBe('from the top layer\n');
  });
});

describe('containers through conmon and runc', () => {
  it('runs echo hello: exit 0, hello in the log as stdout', async () => {
    const r = await run({ args: ['echo', 'hello'] });
    expect(r.exitCode).toBe(0);
    const entries = await collect(r.logPath);
    expect(entries.map((e) => [e.stream, e.line.toString()])).toEqual([['stdout', 'hello\n']]);
    expect(Math.abs(entries[0]!.time.getTime() - Date.now())).toBeLessThan(10_000);
    expect(await runtime.state(r.id)).toMatchObject({ status: 'stopped', pid: 0 });
  });

  it('reports the exit status of sh -c "exit 3"', async () => {
    expect((await run({ args: sh('exit 3') })).exitCode).toBe(3);
  });

  it('reports each run of a container id that is created again, and lists exits found on disk', async () => {
    const first = await run({ args: sh('exit 5') });
    expect(first.exitCode).toBe(5);
    await runtime.delete(first.id);
    const again = await create({ args: sh('exit 6') }, first.id);
    expect(await exits.readExit(again.id)).toBeNull(); // create cleared the old status
    const exited = exits.waitExit(again.id);
    await runtime.start(again.id);
    expect(await exited).toBe(6);
    const offline = new ExitWatcher(exits.exitDir); // a daemon that was not watching
    expect(await offline.pending()).toContainEqual({ id: again.id, exitCode: 6 });
  });

  it("fails create for a missing command with dockerd's message and exit code 127, leaving nothing behind", async () => {
    const id = newId();
    const err = await create({ args: ['nope'] }, id).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(RuntimeCreateError);
    const e = err as RuntimeCreateError;
    expect(e.message).toBe(
      'OCI runtime create failed: runc create failed: unable to start container process: exec: "nope": executable file not found in $PATH: unknown',
    );
    expect(e.code).toBe(127);
    expect(isEngineError(e, 'invalid')).toBe(true);
    expect(await runtime.state(id)).toBeNull();
    expect(await runtime.conmonPid(path.join(root, 'containers', id))).toBeNull();
    expect(existsSync(path.join(runtime.socketDir, id))).toBe(false);
  });

  it('gives 126 for a command that is not executable', async () => {
    const err = (await create({ args: ['/etc/motd'] }).catch((e: unknown) => e)) as RuntimeCreateError;
    expect(err).toBeInstanceOf(RuntimeCreateError);
    expect(err.code).toBe(126);
    expect(err.message).toMatch(/^OCI runtime create failed: .*permission denied: unknown$/);
  });

  it('reports 137 for a container killed by SIGKILL, after running, pausing and resuming', async () => {
    const c = await create({ args: ['sleep', '100'] });
    expect(await runtime.state(c.id)).toMatchObject({ status: 'created', pid: c.pid });
    const exited = exits.waitExit(c.id);
    await runtime.start(c.id);
    expect(await runtime.state(c.id)).toMatchObject({ status: 'running', pid: c.pid });
    await runtime.pause(c.id);
    expect((await runtime.state(c.id))?.status).toBe('paused');
    await runtime.resume(c.id);
    expect(await runtime.kill(c.id, 'KILL')).toBe(true);
    expect(await exited).toBe(137);
    expect(await exits.readExit(c.id)).toBe(137);
    // Nothing left to signal: told, not thrown (the exit is what the caller waits for).
    expect(await runtime.kill(c.id, 'SIGTERM')).toBe(false);
    await runtime.delete(c.id);
    expect(await runtime.state(c.id)).toBeNull();
    await expect(runtime.start(c.id)).rejects.toThrow(`No such container: ${c.id}`);
  });

  it('logs stdout and stderr with their stream tags, joining partial lines', async () => {
    const r = await run({
      args: sh('echo out1; echo err1 >&2; printf "par"; sleep 0.05; printf "tial\\n"; printf "no newline" >&2'),
    });
    expect(r.exitCode).toBe(0);
    const entries = await collect(r.logPath);
    expect(text(entries, 'stdout')).toBe('out1\npartial\n');
    expect(text(entries, 'stderr')).toBe('err1\nno newline');
    expect(entries.map((e) => e.line.toString())).toEqual(['out1\n', 'err1\n', 'partial\n', 'no newline']);
    const raw = readFileSync(r.logPath, 'utf8');
    expect(raw).toMatch(/ stdout P par\n/);
    expect(text(await collect(r.logPath, { stdout: false }))).toBe('err1\nno newline');
    expect(text(await collect(r.logPath, { tail: 2 }))).toBe('partial\nno newline');
  });

  it('runs the command as pid 1 with its own hostname and /etc files', async () => {
    const r = await run({ args: sh('echo $$; hostname; cat /etc/hostname /etc/motd'), hostname: 'ctrhost' });
    expect(r.exitCode).toBe(0);
    expect(text(await collect(r.logPath))).toBe('1\nctrhost\nctrhost\nfrom the top layer\n');
  });

  it('runs catatonit as pid 1 with --init', async () => {
    const r = await run({ args: sh('echo $$; tr "\\0" " " < /proc/1/cmdline'), Init: true });
    expect(r.exitCode).toBe(0);
    const [pid, cmdline] = text(await collect(r.logPath)).split('\n');
    expect(pid).not.toBe('1');
    expect(cmdline).toMatch(/^\/dev\/init -- sh -c/);
  });

  it('keeps a read-only rootfs read-only', async () => {
    const r = await run({ args: sh('touch /x'), ReadonlyRootfs: true });
    expect(r.exitCode).toBe(1);
    expect(text(await collect(r.logPath), 'stderr')).toMatch(/Read-only file system/);
    expect((await run({ args: sh('touch /x') })).exitCode).toBe(0);
  });

  it('has the default capabilities, masked paths and no access to other devices', async () => {
    const r = await run({
      args: sh(
        'grep CapEff /proc/self/status; cat /proc/kcore | wc -c; head -c1 /dev/zero | wc -c; mknod /tmp/mem c 1 1 && cat /tmp/mem',
      ),
    });
    const out = text(await collect(r.logPath));
    expect(out).toMatch(/CapEff:\s+00000000a80425fb/);
    expect(out).toMatch(/^0$/m); // /proc/kcore is masked
    expect(out).toMatch(/^1$/m); // /dev/zero is allowed
    expect(text(await collect(r.logPath), 'stderr')).toMatch(/Operation not permitted/);
  });

  it('puts the memory limit into the container cgroup', async () => {
    const limit = 64 * 1024 * 1024;
    const c = await create({ args: ['sleep', '100'], Memory: limit });
    await runtime.start(c.id);
    const line = readFileSync(`/proc/${c.pid}/cgroup`, 'utf8')
      .split('\n')
      .find((l) => /^\d+:memory:/.test(l))!;
    const cgroup = line.split(':')[2]!;
    expect(cgroup).toBe(`${CGROUP_PARENT}/${c.id}`);
    expect(Number(readFileSync(`/sys/fs/cgroup/memory${cgroup}/memory.limit_in_bytes`, 'utf8'))).toBe(limit);
    expect(Number(readFileSync(`/sys/fs/cgroup/memory${cgroup}/memory.memsw.limit_in_bytes`, 'utf8'))).toBe(2 * limit);
    const exited = exits.waitExit(c.id);
    await runtime.kill(c.id, 9);
    expect(await exited).toBe(137);
  });

  it("reads runc's state without its config, whatever strings the config holds", async () => {
    // Text that would look like the state's own keys, were it not inside a string.
    const tricky = 'X=","rootless":true,"cgroup_paths":{"cpu":"/elsewhere"},"config":{"init_process_pid":1}';
    const c = await create({ args: ['sleep', '100'], env: ['PATH=/bin', tricky] });
    const text = await readFile(path.join(root, 'run', 'runc', c.id, 'state.json'), 'utf8');
    const whole = JSON.parse(text) as RuncState;
    const read = parseRuncState(text);
    expect(read?.init_process_pid).toBe(c.pid);
    expect(read?.init_process_start).toBe(whole.init_process_start);
    expect(read?.cgroup_paths).toEqual(whole.cgroup_paths);
    expect(read?.cgroup_paths?.cpu).toBe(`/sys/fs/cgroup/cpu${CGROUP_PARENT}/${c.id}`);
    // Another layout is read whole.
    expect(parseRuncState('{"init_process_pid":7,"init_process_start":9}')).toEqual({
      init_process_pid: 7,
      init_process_start: 9,
    });
    expect(parseRuncState('not json')).toBeNull();
    // What berthd does with it: the signal reaches the init without runc.
    const exited = exits.waitExit(c.id);
    await runtime.start(c.id);
    expect(await runtime.kill(c.id, 9)).toBe(true);
    expect(await exited).toBe(137);
    expect(await runtime.kill(c.id, 9)).toBe(false);
  });

  it('leaves conmon running when the process that spawned it exits', async () => {
    const id = newId();
    const { dir } = await bundle(id, { args: ['sleep', '100'] });
    cleanups.push(() => runtime.delete(id, true));
    cleanups.push(() => killConmon(dir));
    const script = await compileRuntimeForChild();
    const opts = { id, bundleDir: dir, logPath: path.join(dir, 'ctr.log'), exitDir: exits.exitDir };
    const env = { runcPath: RUNC, conmonPath: CONMON, execRoot: path.join(root, 'run') };
    const child = spawn(process.execPath, [script, JSON.stringify({ opts, env })], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    const code = await new Promise((resolve) => child.on('exit', resolve));
    expect(code).toBe(0);
    const { conmonPid } = JSON.parse(out) as { conmonPid: number };
    expect(await runtime.conmonPid(dir)).toBe(conmonPid);
    const stat = readFileSync(`/proc/${conmonPid}/stat`, 'utf8');
    const [ppid, , sid] = stat
      .slice(stat.lastIndexOf(')') + 2)
      .split(' ')
      .slice(1, 4)
      .map(Number);
    expect(ppid).not.toBe(child.pid);
    expect(sid).toBe(conmonPid); // its own session
    expect(await runtime.state(id)).toMatchObject({ status: 'running' });
    const exited = exits.waitExit(id);
    await runtime.kill(id, 'SIGKILL');
    expect(await exited).toBe(137);
  });

  it('creates, starts and sees `true` exit, seven times in a row', async () => {
    const runs = [];
    for (let i = 0; i < 7; i++) runs.push(await run({ args: ['true'] }));
    const total = runs.map((r) => r.createMs + r.startMs + r.exitMs).sort((a, b) => a - b);
    const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
    const forks = debugRecords.filter((r) => r.msg === 'container created').map((r) => r.conmonForkMs as number);
    const figures = {
      conmonForkMs: median(forks),
      createMs: median(runs.map((r) => r.createMs)),
      startMs: median(runs.map((r) => r.startMs)),
      exitSeenMs: median(runs.map((r) => r.exitMs)),
      totalMedianMs: median(total),
      totalMinMs: total[0],
    };
    console.log(
      'runtime latency (median of 7):',
      JSON.stringify(figures, (_k, v: unknown) => (typeof v === 'number' ? Math.round(v * 10) / 10 : v)),
    );
    // Speed is the benchmarks' business (bench/), never a timed assertion that load can fail.
    expect(runs.every((r) => r.exitCode === 0)).toBe(true);
  });
});

/** A container (created, not started) running `script`, its log capped by conmon at logSizeMax (0: never). */
async function createLogging(
  script: string,
  logSizeMax: number,
): Promise<{ id: string; dir: string; logPath: string }> {
  const id = newId();
  const { dir } = await bundle(id, { args: sh(script) });
  cleanups.push(() => runtime.delete(id, true));
  cleanups.push(() => killConmon(dir));
  const logPath = path.join(dir, 'ctr.log');
  await runtime.create({ id, bundleDir: dir, logPath, exitDir: exits.exitDir, logSizeMax });
  return { id, dir, logPath };
}

/** Follows the log, each line into `seen`, until stop(). */
function follow(logPath: string): { seen: string[]; stop: () => Promise<void> } {
  const ctl = new AbortController();
  const seen: string[] = [];
  const reading = (async () => {
    for await (const e of readLog(logPath, { follow: true, signal: ctl.signal })) seen.push(e.line.toString());
  })();
  return {
    seen,
    stop: async () => {
      ctl.abort();
      await reading;
    },
  };
}

describe('log reader', () => {
  const ts = (s: number) => `2024-05-01T10:00:${String(s).padStart(2, '0')}.000000001+02:00`;
  const rec = (s: number, stream: string, tag: string, content: string) => `${ts(s)} ${stream} ${tag} ${content}\n`;

  it('joins pieces across interleaved streams, and tails whole entries', async () => {
    const file = path.join(root, 'synthetic.log');
    await writeFile(
      file,
      rec(1, 'stdout', 'F', 'one') +
        rec(2, 'stdout', 'P', 'tw') +
        rec(3, 'stderr', 'F', 'err') +
        rec(4, 'stdout', 'F', 'o') +
        rec(5, 'stderr', 'P', 'tail') +
        'garbage line\n' +
        rec(6, 'stdout', 'F', 'three'),
    );
    const all = await collect(file);
    expect(all.map((e) => e.line.toString())).toEqual(['one\n', 'err\n', 'two\n', 'three\n', 'tail']);
    expect(all[2]!.timeText).toBe(ts(2));
    expect(all[2]!.time.toISOString()).toBe('2024-05-01T08:00:02.000Z');
    expect(all[2]!.timeNano).toBe(BigInt(Date.UTC(2024, 4, 1, 8, 0, 2)) * 1_000_000n + 1n);
    const lines = async (o: ReadLogOptions) => (await collect(file, o)).map((e) => e.line.toString());
    // An unfinished line counts at its last piece: older than "three".
    expect(await lines({ tail: 1 })).toEqual(['three\n']);
    expect(await lines({ tail: 2 })).toEqual(['three\n', 'tail']);
    expect(await lines({ tail: 3 })).toEqual(['two\n', 'three\n', 'tail']);
    expect(await lines({ tail: 4 })).toEqual(['err\n', 'two\n', 'three\n', 'tail']);
    expect(await lines({ tail: 0 })).toEqual([]);
    expect(await lines({ tail: 100 })).toEqual(['one\n', 'err\n', 'two\n', 'three\n', 'tail']);
    const at = (s: number) => new Date(Date.UTC(2024, 4, 1, 8, 0, s));
    expect(await lines({ since: at(3) })).toEqual(['err\n', 'three\n', 'tail']);
    expect(await lines({ until: at(3) })).toEqual(['one\n', 'two\n']);
    // As dockerd: the tail is taken over both streams, then one is left out.
    expect(await lines({ stderr: false, tail: 2 })).toEqual(['three\n']);
    expect(await collect(path.join(root, 'missing.log'))).toEqual([]);
  });

  it('reads timestamps of one second by their fraction as a full parse does, and drops malformed ones', async () => {
    const file = path.join(root, 'second.log');
    const second = '2024-05-01T10:00:07';
    const lines = [
      `${second}.5+02:00 stdout F a`,
      `${second}.123456789+02:00 stdout F b`,
      `${second}.01+02:00 stdout F c`,
      // The same second in another zone, then back: each is its own instant.
      `${second}.01Z stdout F d`,
      `${second}.02+02:00 stdout F e`,
      // Malformed beside a remembered second: ten digits, none, a letter, no dot.
      `${second}.1234567890+02:00 stdout F x`,
      `${second}.+02:00 stdout F x`,
      `${second}.12a+02:00 stdout F x`,
      `${second}+02:00 stdout F f`,
    ];
    await writeFile(file, lines.map((l) => `${l}\n`).join(''));
    const all = await collect(file);
    const base = BigInt(Date.UTC(2024, 4, 1, 8, 0, 7)) * 1_000_000n;
    const utc = BigInt(Date.UTC(2024, 4, 1, 10, 0, 7)) * 1_000_000n;
    expect(all.map((e) => [e.line.toString(), e.timeNano])).toEqual([
      ['a\n', base + 500_000_000n],
      ['b\n', base + 123_456_789n],
      ['c\n', base + 10_000_000n],
      ['d\n', utc + 10_000_000n],
      ['e\n', base + 20_000_000n],
      ['f\n', base],
    ]);
  });

  it('follows appends and a rotation, and drains when stopped', async () => {
    const file = path.join(root, 'follow.log');
    await writeFile(file, rec(1, 'stdout', 'F', 'a'));
    const ctl = new AbortController();
    const seen: string[] = [];
    const reading = (async () => {
      for await (const e of readLog(file, { follow: true, signal: ctl.signal })) seen.push(e.line.toString());
    })();
    const until = async (n: number) => {
      for (let i = 0; i < 200 && seen.length < n; i++) await new Promise((r) => setTimeout(r, 10));
    };
    await until(1);
    await appendFile(file, rec(2, 'stdout', 'P', 'b1'));
    await appendFile(file, rec(3, 'stdout', 'F', 'b2'));
    await until(2);
    // conmon's rotation: the new file is written as .tmp and renamed over the log.
    await appendFile(file, rec(4, 'stdout', 'F', 'c'));
    await writeFile(`${file}.tmp`, rec(5, 'stdout', 'F', 'd'));
    await rename(`${file}.tmp`, file);
    await until(4);
    await appendFile(file, rec(6, 'stdout', 'F', 'e'));
    ctl.abort();
    await reading;
    expect(seen).toEqual(['a\n', 'b1b2\n', 'c\n', 'd\n', 'e\n']);
  });

  it('reads rotated files oldest first (gzipped or not), tails across them, joins a line cut by a rotation', async () => {
    const file = path.join(root, 'rotated/ctr.log');
    await mkdir(path.dirname(file), { recursive: true });
    await writeFile(`${file}.2.gz`, gzipSync(rec(1, 'stdout', 'F', 'one') + rec(2, 'stdout', 'F', 'two')));
    await writeFile(`${file}.1`, rec(3, 'stdout', 'F', 'three') + rec(4, 'stdout', 'P', 'fo'));
    // A plain file wins over its .gz (which may be half written).
    await writeFile(`${file}.1.gz`, 'not gzip');
    await writeFile(file, rec(5, 'stdout', 'F', 'ur') + rec(6, 'stderr', 'F', 'five'));
    const lines = async (o: ReadLogOptions) => (await collect(file, o)).map((e) => e.line.toString());
    expect(await lines({})).toEqual(['one\n', 'two\n', 'three\n', 'four\n', 'five\n']);
    expect(await lines({ tail: 1 })).toEqual(['five\n']);
    expect(await lines({ tail: 4 })).toEqual(['two\n', 'three\n', 'four\n', 'five\n']);
    expect(await lines({ tail: 10 })).toEqual(['one\n', 'two\n', 'three\n', 'four\n', 'five\n']);
    expect(await lines({ since: new Date(Date.UTC(2024, 4, 1, 8, 0, 2)) })).toEqual([
      'two\n',
      'three\n',
      'four\n',
      'five\n',
    ]);
    // While the live file is renamed away (conmon not yet reopened), the newest rotated one is the live one.
    await rm(file);
    expect(await lines({ tail: 2 })).toEqual(['three\n', 'fo']);
  });

  it("rotates a real container's log by renaming and asking conmon to reopen: nothing lost, in order", async () => {
    const { id, dir, logPath } = await createLogging(
      // Slowed now and then, so that rotations come while it writes.
      'i=0; while [ $i -lt 20000 ]; do echo "line $i"; i=$((i+1)); [ $((i % 400)) -eq 0 ] && sleep 0.05; done; echo last',
      0,
    );
    const { seen, stop } = follow(logPath);
    const exited = exits.waitExit(id);
    await runtime.start(id);
    let done = false;
    void exited.then(() => (done = true));
    let rotations = 0;
    while (!done) {
      // As logrotation.ts: compressed only once conmon has reopened (it writes into none of them then).
      if (existsSync(logPath) && rotations % 2) await compressRotated(logPath);
      await lockLog(logPath, () => shiftLogs(logPath, 4));
      rotations++;
      await runtime.reopenLog(dir);
      await new Promise((r) => setTimeout(r, 30));
    }
    expect(await exited).toBe(0);
    await stop();
    const expected = [...Array.from({ length: 20000 }, (_, i) => `line ${i}\n`), 'last\n'];
    expect(seen.length).toBe(expected.length);
    expect(seen.every((l, i) => l === expected[i])).toBe(true);
    expect(rotations).toBeGreaterThan(3);
    // Three rotated files at most beside the live one (max-file 4), the newest lines among them.
    const files = readdirSync(dir).filter((n) => n.startsWith('ctr.log'));
    expect(files.filter((n) => n !== 'ctr.log').length).toBeLessThanOrEqual(3);
    const kept = (await collect(logPath)).map((e) => e.line.toString());
    expect(kept.at(-1)).toBe('last\n');
    const first = expected.indexOf(kept[0]!);
    expect(kept.every((l, i) => l === expected[first + i])).toBe(true);
  });

  it('follows a real container log through conmon rotations (--log-size-max)', async () => {
    const { id, logPath } = await createLogging(
      'i=0; while [ $i -lt 300 ]; do echo "line $i ................................"; i=$((i+1)); done',
      4096,
    );
    const followed = follow(logPath);
    const exited = exits.waitExit(id);
    await runtime.start(id);
    expect(await exited).toBe(0);
    await followed.stop();
    const seen = followed.seen.map((l) => Number(/line (\d+)/.exec(l)![1]));
    expect(seen.at(-1)).toBe(299);
    expect(seen.every((n, i) => i === 0 || n > seen[i - 1]!)).toBe(true);
    expect(readFileSync(logPath).length).toBeLessThanOrEqual(4096);
  });
});

/**
 * The runtime modules compiled to plain JS (their imports already name .js
 * files), with a script that creates and starts one container and exits.
 */
async function compileRuntimeForChild(): Promise<string> {
  const out = path.join(root, 'child');
  const sources = [
    'src/errors.ts',
    'src/paths.ts',
    'src/engine/steps.ts',
    'src/engine/os/native.ts',
    'src/engine/os/spawn.ts',
    'src/engine/os/files.ts',
    'src/engine/os/seqpacket.ts',
  ];
  for (const rel of [
    ...sources,
    'src/engine/runtime/runtime.ts',
    'src/engine/runtime/runc.ts',
    'src/engine/runtime/init.ts',
    'src/engine/runtime/ctl.ts',
    'src/engine/runtime/conmon.ts',
    'src/engine/runtime/errors.ts',
    'src/engine/runtime/proc.ts',
    'src/engine/runtime/exec.ts',
    'src/engine/runtime/sealed.ts',
    'src/engine/runtime/state.ts',
  ]) {
    const js = ts.transpileModule(await readFile(path.join(REPO, rel), 'utf8'), {
      compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022 },
    }).outputText;
    await mkdir(path.dirname(path.join(out, rel)), { recursive: true });
    await writeFile(path.join(out, rel.replace(/\.ts$/, '.js')), js);
  }
  await writeFile(path.join(out, 'package.json'), '{"type":"module"}');
  await symlink(path.join(REPO, 'src/native'), path.join(out, 'src/native')); // the addon, found from the package root
  const script = path.join(out, 'create.js');
  await writeFile(
    script,
    `import { Runtime } from './src/engine/runtime/runtime.js';
const quiet = { child: () => quiet, debug() {}, info() {}, warn() {}, error() {} };
const { opts, env } = JSON.parse(process.argv[2]);
const rt = new Runtime({ ...env, logger: quiet });
const res = await rt.create(opts);
await rt.start(opts.id);
process.stdout.write(JSON.stringify(res));
`,
  );
  return script;
}
