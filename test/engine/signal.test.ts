// Signals to a container's init go straight to its pid, not through runc (a
// fork of berthd per stop): only the process runc's state names, never
// another that took its pid since.
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { signalProcess } from '../../src/engine/os/spawn.js';

const startTicks = (pid: number) => {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19]);
};

describe('signalProcess', () => {
  it('signals the process that started at the given time, and no other with its pid', async () => {
    const child = spawn('sleep', ['30']);
    const exited = new Promise<NodeJS.Signals | null>((r) => child.once('exit', (_code, sig) => r(sig)));
    const pid = child.pid!;
    const start = startTicks(pid);
    // Another start time: the pid taken by some other process since.
    expect(signalProcess(pid, start + 1, 15)).toBe(false);
    expect(signalProcess(pid, start - 1, 15)).toBe(false);
    expect(child.exitCode === null && child.signalCode === null).toBe(true);
    expect(signalProcess(pid, start, 15)).toBe(true);
    expect(await exited).toBe('SIGTERM');
    // Gone (reaped by node): nothing to signal.
    expect(signalProcess(pid, start, 15)).toBe(false);
  });
});
