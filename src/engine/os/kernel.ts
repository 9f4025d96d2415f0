// What the running kernel offers, where Node cannot tell.
import { existsSync } from 'node:fs';
import { native } from './native.js';

/** Whether this kernel runs x32 system calls (false off x86-64). See src/native/spawn.c. */
export function x32Abi(): boolean {
  return native.x32Abi();
}

let version: '1' | '2' | undefined;

/**
 * The cgroup version containers get: a pure v2 host has cgroup.controllers at
 * the root; hybrid and v1 hosts do not. Read once: a host does not change it
 * while berthd runs, and stats ask it on every sample.
 */
export function cgroupVersion(): '1' | '2' {
  version ??= existsSync('/sys/fs/cgroup/cgroup.controllers') ? '2' : '1';
  return version;
}
