// What the running kernel offers, where Node cannot tell.
import { existsSync } from 'node:fs';
import { native } from './native.js';

/** Whether this kernel runs x32 system calls (false off x86-64). See src/native/spawn.c. */
export function x32Abi(): boolean {
  return native.x32Abi();
}

/** The cgroup version containers get: a pure v2 host has cgroup.controllers at the root; hybrid and v1 hosts do not. */
export function cgroupVersion(): '1' | '2' {
  return existsSync('/sys/fs/cgroup/cgroup.controllers') ? '2' : '1';
}
