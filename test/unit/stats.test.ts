// The host CPU time of a stats sample: whole nanoseconds, as the clients decode it.
import { describe, expect, it } from 'vitest';
import { systemCpuNanosOf } from '../../src/engine/containers/io/stats.js';

const procStat = (ticks: number[]) => `cpu  ${ticks.join(' ')} 0 0 0\ncpu0 1 2 3 4 5 6 7 0 0 0\n`;

describe('system_cpu_usage', () => {
  it('is the first line’s user…softirq ticks in nanoseconds, guest columns left out', () => {
    expect(systemCpuNanosOf(procStat([383133, 0, 82523, 96345, 3700, 0, 981, 4684]))).toBe(5_666_820_000_000);
  });

  it('is a whole number for every tick count: a fraction fails the docker CLI’s decode (it prints EOF)', () => {
    // Ticks over 100 times 1e9 gave 2029999999.9999998 for 203, and a fraction for 3 to 7 in a
    // hundred tick counts (so for some hours of a host's uptime, and not others).
    expect(systemCpuNanosOf(procStat([203, 0, 0, 0, 0, 0, 0]))).toBe(2_030_000_000);
    const fractional: number[] = [];
    for (let t = 0; t < 100_000 && fractional.length < 4; t += 1) {
      if (!Number.isInteger(systemCpuNanosOf(procStat([t, 0, 0, 0, 0, 0, 0])))) fractional.push(t);
    }
    expect(fractional).toEqual([]);
  });
});
