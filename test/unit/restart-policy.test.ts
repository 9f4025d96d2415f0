// The restart policy's decision at an exit: the whole table, and dockerd's backoff.
import { describe, expect, it } from 'vitest';
import type { RestartPolicy } from '../../src/engine/containers/config.js';
import { killEndsPolicy, MAX_DELAY_MS, restartDecision } from '../../src/engine/containers/run/restart.js';

const policy = (Name: RestartPolicy['Name'], MaximumRetryCount = 0): RestartPolicy => ({ Name, MaximumRetryCount });
const decide = (p: RestartPolicy, exitCode: number, restartCount = 0, stoppedByUser = false) =>
  restartDecision({ policy: p, exitCode, restartCount, stoppedByUser }).restart;

describe('restartDecision', () => {
  it.each([
    // policy, exit code, restarts so far, stopped by a user → restarts
    [policy(''), 1, 0, false, false],
    [policy('no'), 1, 0, false, false],
    [policy('always'), 0, 0, false, true],
    [policy('always'), 137, 5, false, true],
    [policy('always'), 0, 0, true, false],
    [policy('unless-stopped'), 0, 0, false, true],
    [policy('unless-stopped'), 1, 0, true, false],
    [policy('on-failure'), 0, 0, false, false],
    [policy('on-failure'), 1, 0, false, true],
    [policy('on-failure'), 1, 1000, false, true],
    [policy('on-failure'), 1, 0, true, false],
    [policy('on-failure', 2), 1, 0, false, true],
    [policy('on-failure', 2), 1, 1, false, true],
    [policy('on-failure', 2), 1, 2, false, false],
    [policy('on-failure', 2), 0, 0, false, false],
  ] as const)('%o, exit %i after %i restarts, stopped by a user: %s → %s', (p, code, count, byUser, expected) => {
    expect(decide(p, code, count, byUser)).toBe(expected);
  });

  it('ends unless-stopped, and only it, once the container was killed with any signal', () => {
    const killed = (p: RestartPolicy, exitCode: number) =>
      restartDecision({ policy: p, exitCode, restartCount: 0, stoppedByUser: false, manuallyStopped: true }).restart;
    expect(killed(policy('unless-stopped'), 3)).toBe(false);
    expect(killed(policy('always'), 3)).toBe(true);
    expect(killed(policy('on-failure'), 3)).toBe(true);
  });

  it.each([
    // kill signal, the container's StopSignal → the policy ends (dockerd's killWithSignal)
    ['SIGUSR1', undefined, true],
    ['SIGUSR1', 'SIGTERM', false],
    ['SIGTERM', 'SIGTERM', true],
    ['SIGTERM', 'TERM', true],
    ['SIGTERM', '15', true],
    ['SIGTERM', 'SIGUSR1', false],
    ['SIGKILL', 'SIGUSR1', true],
    ['SIGRTMIN+3', 'SIGRTMIN+3', true],
    ['SIGIOT', 'SIGABRT', true],
  ] as const)('a kill with %s, StopSignal %s, ends the policy: %s', (signal, stopSignal, ends) => {
    expect(killEndsPolicy(signal, stopSignal)).toBe(ends);
  });

  it('waits 100 ms, doubling with each restart, at most a minute', () => {
    const delay = (restartCount: number) => {
      const d = restartDecision({ policy: policy('always'), exitCode: 0, restartCount, stoppedByUser: false });
      return d.restart ? d.delayMs : undefined;
    };
    expect([0, 1, 2, 3, 9].map(delay)).toEqual([100, 200, 400, 800, 51_200]);
    expect(delay(10)).toBe(MAX_DELAY_MS);
    expect(delay(1000)).toBe(MAX_DELAY_MS);
  });
});
