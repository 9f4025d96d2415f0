// A container as the engine hands it out: its record in camelCase, its Config
// and HostConfig, and where its files are (lookup.ts makes it from the row);
// what its statuses mean; its events. The bottom of containers/: every other
// module may import this one, and it imports none of them but config.ts.
import type { EventBus } from '../events.js';
import type { Member } from '../network/endpoints.js';
import type { ContainerStatus } from '../store/containers.js';
import type { ContainerConfig, HostConfig } from './config.js';

export type { ContainerStatus };

/** A legacy link as recorded (links.ts): the parent knows the child (null when removed since) as alias. */
export interface LegacyLink {
  childId: string;
  childName: string | null;
  alias: string;
}

export type HealthStatus = 'starting' | 'healthy' | 'unhealthy';

/** One health check's result, as inspect's State.Health.Log shows it (health.ts). */
export interface HealthResult {
  /** RFC 3339 with nanoseconds, as Go writes a time. */
  Start: string;
  End: string;
  ExitCode: number;
  Output: string;
}

/** inspect's State.Health. */
export interface HealthState {
  Status: HealthStatus;
  FailingStreak: number;
  /** The last results, oldest first. */
  Log: HealthResult[];
}

export interface Container {
  id: string;
  name: string;
  imageId: string;
  /** The image as the create named it. */
  imageRef: string;
  /** Unix milliseconds, as are startedAt and finishedAt (0: never). */
  created: number;
  status: ContainerStatus;
  pid: number;
  exitCode: number;
  error: string;
  startedAt: number;
  finishedAt: number;
  restartCount: number;
  oomKilled: boolean;
  /**
   * Its run is being ended by stop, a forced remove or a kill with its stop
   * signal (or SIGKILL): no restart policy applies at its exit.
   */
  stoppedByUser: boolean;
  /** Killed or stopped (with any signal) since the user last started it: unless-stopped does not apply. */
  manuallyStopped: boolean;
  /** Creation order (list's before and since). */
  seq: number;
  config: ContainerConfig;
  hostConfig: HostConfig;
  /** Its read-only binds are recursively read-only where the kernel can (created through API 1.44 or later). */
  recursiveReadonlyBinds: boolean;
  /** The command run: Path and Args as inspect shows them. */
  path: string;
  args: string[];
  bundleDir: string;
  /**
   * Where its hostname, hosts and resolv.conf are (inspect's HostnamePath…):
   * its bundle, or the network donor's it took at its last start (run/netjoin.ts).
   */
  etcDir: string;
  /** The overlay mount point, runc's root.path. */
  rootfs: string;
  logPath: string;
  /** inspect's State.Health: null until it first ran with a health check (health.ts). */
  health: HealthState | null;
  /** Its legacy links (links.ts), in the order given; HostConfig.Links shows them as dockerd's inspect. */
  legacyLinks: LegacyLink[];
  /** The names other containers' links give it: /<parent>/<alias>. */
  linkNames: string[];
}

/** Statuses with a process, or one on the way back (restarting). */
export const ACTIVE: readonly ContainerStatus[] = ['running', 'paused', 'restarting'];
export const isActive = (c: Container) => ACTIVE.includes(c.status);
/** A process runs (maybe frozen). */
export const isRunning = (c: Container) => c.status === 'running' || c.status === 'paused';

/** What the container's networks are told of it; its namespace while its process runs. */
export const memberOf = (c: Container): Member => ({
  id: c.id,
  name: c.name,
  hostname: c.config.Hostname,
  ...(isRunning(c) && c.pid ? { nsPath: `/proc/${c.pid}/ns/net` } : {}),
});

/** Publishes a container event with dockerd's attributes (its labels, image, name). */
export function publish(events: EventBus, c: Container, action: string, extra: Record<string, string> = {}): void {
  events.publish('container', action, c.id, {
    ...(c.config.Labels ?? {}),
    image: c.imageRef,
    name: c.name,
    ...extra,
  });
}
