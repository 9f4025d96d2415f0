// The restart policy's decision when a container's process exits: whether it
// runs again, and after how long; and which kills end the policy. Pure:
// exits.ts and lifecycle.ts act on it. After moby's restartmanager and
// daemon/kill.go: its "exit on next" is our stoppedByUser, its
// HasBeenManuallyStopped our manuallyStopped.
import { signalNumber } from '../../signals.js';
import type { RestartPolicy } from '../config.js';

export interface ExitFacts {
  policy: RestartPolicy;
  exitCode: number;
  /** Restarts so far under the policy (inspect's RestartCount). */
  restartCount: number;
  /** The exit came from stop, a forced remove, or a kill with the stop signal: no policy applies. */
  stoppedByUser: boolean;
  /** Killed (with any signal) or stopped since the user's last start: unless-stopped does not apply. */
  manuallyStopped?: boolean;
}

export type RestartDecision = { restart: false } | { restart: true; delayMs: number };

/** The first delay; each restart doubles it, up to MAX_DELAY_MS (dockerd's backoff). */
const FIRST_DELAY_MS = 100;
export const MAX_DELAY_MS = 60_000;

export function restartDecision(e: ExitFacts): RestartDecision {
  if (e.stoppedByUser || !restarts(e)) return { restart: false };
  return { restart: true, delayMs: Math.min(FIRST_DELAY_MS * 2 ** e.restartCount, MAX_DELAY_MS) };
}

function restarts({ policy, exitCode, restartCount, manuallyStopped }: ExitFacts): boolean {
  switch (policy.Name) {
    case 'always':
      return true;
    case 'unless-stopped':
      return !manuallyStopped;
    case 'on-failure':
      return exitCode !== 0 && (policy.MaximumRetryCount === 0 || restartCount < policy.MaximumRetryCount);
    default:
      return false;
  }
}

/**
 * Whether a kill with `signal` ends the restart policy at the next exit:
 * SIGKILL and the container's own StopSignal do, and so does every signal
 * when the container has none of its own (dockerd's killWithSignal). Any
 * other signal leaves the policy to act on the exit it may cause.
 */
export function killEndsPolicy(signal: string, stopSignal: string | undefined): boolean {
  const n = signalNumber(signal);
  return !stopSignal || n === signalNumber('SIGKILL') || n === signalNumber(stopSignal);
}
