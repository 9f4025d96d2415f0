// The restart policy's decision when a container's process exits: whether it
// runs again, and after how long. Pure: exits.ts acts on it.
import type { RestartPolicy } from './config.js';

export interface ExitFacts {
  policy: RestartPolicy;
  exitCode: number;
  /** Restarts so far under the policy (inspect's RestartCount). */
  restartCount: number;
  /** The exit came from stop, kill or a forced remove. */
  stoppedByUser: boolean;
}

export type RestartDecision = { restart: false } | { restart: true; delayMs: number };

/** The first delay; each restart doubles it, up to MAX_DELAY_MS (dockerd's backoff). */
const FIRST_DELAY_MS = 100;
export const MAX_DELAY_MS = 60_000;

export function restartDecision(e: ExitFacts): RestartDecision {
  if (e.stoppedByUser || !restarts(e)) return { restart: false };
  return { restart: true, delayMs: Math.min(FIRST_DELAY_MS * 2 ** e.restartCount, MAX_DELAY_MS) };
}

function restarts({ policy, exitCode, restartCount }: ExitFacts): boolean {
  switch (policy.Name) {
    case 'always':
    case 'unless-stopped':
      return true;
    case 'on-failure':
      return exitCode !== 0 && (policy.MaximumRetryCount === 0 || restartCount < policy.MaximumRetryCount);
    default:
      return false;
  }
}
