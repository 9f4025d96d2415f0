// dockerd's human-readable container Status ("Up 3 seconds", "Exited (0) 2 minutes ago").
import type { Container } from './container.js';

/** docker/go-units HumanDuration. */
function humanDuration(ms: number): string {
  const seconds = Math.floor(ms / 1000);
  const minutes = Math.floor(ms / 60_000);
  const hours = Math.round(ms / 3_600_000);
  if (seconds < 1) return 'Less than a second';
  if (seconds === 1) return '1 second';
  if (seconds < 60) return `${seconds} seconds`;
  if (minutes === 1) return 'About a minute';
  if (minutes < 60) return `${minutes} minutes`;
  if (hours === 1) return 'About an hour';
  if (hours < 48) return `${hours} hours`;
  if (hours < 24 * 7 * 2) return `${Math.floor(hours / 24)} days`;
  if (hours < 24 * 30 * 2) return `${Math.floor(hours / 24 / 7)} weeks`;
  if (hours < 24 * 365 * 2) return `${Math.floor(hours / 24 / 30)} months`;
  return `${Math.floor(hours / 24 / 365)} years`;
}

export function statusText(
  c: Pick<Container, 'status' | 'startedAt' | 'finishedAt' | 'exitCode' | 'health'>,
  now = Date.now(),
): string {
  switch (c.status) {
    case 'running':
      return `Up ${humanDuration(now - c.startedAt)}${healthSuffix(c.health)}`;
    case 'paused':
      return `Up ${humanDuration(now - c.startedAt)} (Paused)`;
    case 'restarting':
      return `Restarting (${c.exitCode}) ${humanDuration(now - c.finishedAt)} ago`;
    case 'removing':
      return 'Removal In Progress';
    case 'dead':
      return 'Dead';
    case 'exited':
      return c.finishedAt ? `Exited (${c.exitCode}) ${humanDuration(now - c.finishedAt)} ago` : 'Created';
    default:
      return 'Created';
  }
}

/** dockerd's " (healthy)", " (unhealthy)", " (health: starting)"; nothing without checks. */
function healthSuffix(h: Container['health']): string {
  if (!h) return '';
  return ` (${h.Status === 'starting' ? 'health: starting' : h.Status})`;
}

/** Go's zero time, which dockerd shows for times that never happened. */
const ZERO_TIME = '0001-01-01T00:00:00Z';
export const isoOrZero = (ms: number) => (ms ? new Date(ms).toISOString() : ZERO_TIME);
