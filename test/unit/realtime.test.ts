// Whether berthd can give its containers' parent cgroup a real-time budget
// (--cpu-rt-period, --cpu-rt-runtime), judged from a cgroup tree as dockerd's
// validateCPURealtimeOptions judges the host's.
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { scratchDir } from '../harness/tmp.js';
import { realtimeBudgetProblem } from '../../src/engine/containers/spec/realtime.js';

/** A cgroup root holding `files` (paths under it). */
function cgroupRoot(files: string[]): string {
  const root = scratchDir('berth-cgroup-');
  for (const f of files) {
    mkdirSync(path.dirname(path.join(root, f)), { recursive: true });
    writeFileSync(path.join(root, f), '');
  }
  return root;
}

describe('realtimeBudgetProblem', () => {
  const budget = { period: 1_000_000, runtime: 950_000 };

  it('has none with no budget asked, whatever the host', () => {
    expect(realtimeBudgetProblem({ period: 0, runtime: 0 }, cgroupRoot(['cgroup.controllers']))).toBeUndefined();
  });

  it('has none on cgroup v1 with real-time group scheduling', () => {
    expect(
      realtimeBudgetProblem(budget, cgroupRoot(['cpu/cpu.rt_period_us', 'cpu/cpu.rt_runtime_us'])),
    ).toBeUndefined();
  });

  it("refuses cgroup v2 and a kernel without it, in dockerd's words", () => {
    expect(realtimeBudgetProblem(budget, cgroupRoot(['cgroup.controllers']))).toBe(
      'daemon-scoped cpu-rt-period and cpu-rt-runtime are not implemented for cgroup v2',
    );
    expect(realtimeBudgetProblem({ period: 0, runtime: 1 }, cgroupRoot(['cpu/cpu.shares']))).toBe(
      'daemon-scoped cpu-rt-period and cpu-rt-runtime are not supported by the kernel',
    );
  });
});
