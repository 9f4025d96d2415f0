// The container's init process as runc's state file records it, handled
// without spawning runc where runc would only read that file and act:
// released to exec its command (`runc start`), signalled (`runc kill`), its
// cgroups and state removed once it has exited (`runc delete`). Each says when
// it cannot, and runc is asked instead.
import { constants } from 'node:fs';
import { lstat, open, readFile, rm, rmdir } from 'node:fs/promises';
import path from 'node:path';
import { systemError } from '../../errors.js';
import { removeFile } from '../os/files.js';
import { signalProcess } from '../os/spawn.js';
import { checkId } from './runc.js';
import { parseRuncState, readRuncState } from './state.js';

/** What runc's init process is called (prctl) until it execs the container's command. */
const INIT_COMM = 'runc:[2:INIT]';

/** True when `pid` runs and (when given) started at `start` clock ticks, so a reused pid is not taken for it. */
export async function processAlive(pid: number, start?: number): Promise<boolean> {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => null);
  if (stat === null) return false;
  // Fields after the command (which may hold spaces) start after the last ')'.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  if (fields[0] === 'Z') return false; // a zombie runs nothing
  return start === undefined || Number(fields[19]) === start;
}

/**
 * What `runc start` does, without spawning runc (a spawn on every run): a
 * created container's init waits, blocked opening <state>/exec.fifo for
 * writing, until someone reads it; it then writes "0" and execs the command.
 * We read it and remove the fifo (runc's "running" from then on). Returns
 * false, having released nothing, when there is no such waiting init.
 */
export async function releaseInit(runcRoot: string, id: string): Promise<boolean> {
  const dir = path.join(runcRoot, id);
  const fifo = path.join(dir, 'exec.fifo');
  const [state, st] = await Promise.all([readRuncState(runcRoot, id), lstat(fifo).catch(() => null)]);
  if (
    !state?.init_process_pid ||
    !st?.isFIFO() ||
    !(await processAlive(state.init_process_pid, state.init_process_start))
  )
    return false;
  // The open blocks (in the thread pool) until the init's write end meets it.
  // Should the init die meanwhile, our own writer unblocks it after a while.
  const rescue = setTimeout(() => {
    open(fifo, constants.O_WRONLY | constants.O_NONBLOCK).then(
      (fh) => fh.close(),
      () => undefined,
    );
  }, 5000);
  try {
    const fh = await open(fifo, constants.O_RDONLY);
    try {
      const { bytesRead, buffer } = await fh.read(Buffer.alloc(1), 0, 1, null);
      if (bytesRead !== 1 || buffer[0] !== 0x30) throw systemError(`container ${id} did not start: its init is gone`);
      // As `runc start`, which reads to the end: the init closes its end of the fifo as it
      // goes to exec the container's command (it closes all its descriptors first).
      while ((await fh.read(buffer, 0, 1, null)).bytesRead > 0);
    } catch (e) {
      await fh.close();
      throw e;
    }
    // Read to its end: the fifo goes (runc's "running" from then on) as our end closes.
    await Promise.all([fh.close(), removeFile(fifo)]);
  } finally {
    clearTimeout(rescue);
  }
  return true;
}

/**
 * What `runc kill <id> <n>` does, without spawning runc (a fork of berthd,
 * on every stop, kill and forced removal): the init its state names, if it
 * still runs (its start time tells a reused pid apart, and the signal goes
 * through a pidfd of the process checked), gets the signal.
 * false: no such container, or its init has ended; undefined: runc's state
 * says too little, runc must do it.
 */
export async function signalInit(runcRoot: string, id: string, signal: number): Promise<boolean | undefined> {
  checkId(id);
  const text = await readFile(path.join(runcRoot, id, 'state.json'), 'utf8').catch(() => null);
  if (text === null) return false;
  const state = parseRuncState(text);
  if (!state?.init_process_pid || state.init_process_start === undefined) return undefined;
  try {
    return signalProcess(state.init_process_pid, state.init_process_start, signal);
  } catch (e) {
    throw systemError(`runtime: signalling container ${id}: ${(e as Error).message}`, e);
  }
}

/**
 * What `runc delete` does for a container whose init has exited — remove its
 * cgroups and its state directory — without spawning runc (a spawn on every
 * `docker run --rm`). Returns false, having changed nothing that matters,
 * when the init still lives or a cgroup still has tasks: runc must then do it.
 */
export async function reap(runcRoot: string, id: string, stateText: string): Promise<boolean> {
  const state = parseRuncState(stateText);
  if (!state?.init_process_pid || (await processAlive(state.init_process_pid, state.init_process_start))) return false;
  const cgroups = Object.values(state.cgroup_paths ?? {});
  if (!cgroups.every((p) => p.startsWith('/sys/fs/cgroup/'))) return false;
  try {
    // One per hierarchy (a dozen under cgroup v1), all at once.
    await Promise.all(
      cgroups.map((p) =>
        rmdir(p).catch((e: NodeJS.ErrnoException) => {
          if (e.code !== 'ENOENT') throw e;
        }),
      ),
    );
  } catch {
    return false;
  }
  await rm(path.join(runcRoot, id), { recursive: true, force: true });
  return true;
}

/** A created container whose init was released already (see Runtime.finishRelease): its fifo goes. */
export async function finishRelease(runcRoot: string, id: string): Promise<boolean> {
  checkId(id);
  const dir = path.join(runcRoot, id);
  const state = await readRuncState(runcRoot, id);
  const pid = state?.init_process_pid;
  if (!pid || !(await processAlive(pid, state.init_process_start))) return false;
  // runc's init names itself so until it execs the container's command.
  const comm = (await readFile(`/proc/${pid}/comm`, 'utf8').catch(() => INIT_COMM)).trim();
  if (comm === INIT_COMM) return false;
  await removeFile(path.join(dir, 'exec.fifo'));
  return true;
}
