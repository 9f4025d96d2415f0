// syscall-probe (syscall-probe.c) for a container to run through a bind
// mount: built static with the host's gcc, once per test file.
//
//   const probe = await buildSyscallProbe();   // probe.dir holds syscall-probe
//   ... HostConfig: { Binds: [`${probe.dir}:/probe:ro`] }, Cmd: ['/probe/syscall-probe', 'keyctl']
//   await probe.remove();
import { execFile } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';

const SOURCE = path.join(import.meta.dirname, 'syscall-probe.c');

export interface SyscallProbe {
  /** The directory holding the `syscall-probe` binary. */
  dir: string;
  remove(): Promise<void>;
}

export async function buildSyscallProbe(): Promise<SyscallProbe> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'berth-probe-'));
  try {
    await promisify(execFile)('gcc', ['-static', '-O2', '-Wall', '-o', path.join(dir, 'syscall-probe'), SOURCE]);
  } catch (e) {
    await rm(dir, { recursive: true, force: true });
    throw e;
  }
  return { dir, remove: () => rm(dir, { recursive: true, force: true }) };
}
