// What the container modules share: the daemon's parts they are given, and the
// state of the runs under way that more than one of them reads.
import type { Logger } from '../../log.js';
import type { EventBus } from '../events.js';
import type { ImageService } from '../images/service.js';
import type { Endpoints } from '../network/endpoints.js';
import type { ExitWatcher } from '../runtime/exits.js';
import type { Runtime } from '../runtime/runtime.js';
import type { ContainerRepository } from '../store/containers.js';
import type { Attachments } from './io/attach.js';
import type { Bundles } from './run/bundle.js';
import type { RealtimeBudget } from './spec/realtime.js';
import type { RuntimeNames } from './create/runtimes.js';
import type { HealthMonitor } from './health.js';
import type { JsonLogs } from './io/jsonlog.js';
import type { LogRotation } from './io/logrotation.js';
import type { Container, ContainerLookup } from './lookup.js';
import type { Waits } from './waits.js';
import type { VolumeService } from '../volumes/service.js';

export interface ContainerDeps {
  repo: ContainerRepository;
  images: ImageService;
  runtime: Runtime;
  exits: ExitWatcher;
  logger: Logger;
  /** <data-root>/containers */
  root: string;
  initPath?: string;
  /** The real-time budget given to the containers' parent cgroup before each start (realtime.ts). */
  realtime?: RealtimeBudget;
  /** The parent cgroup of containers that name none (--cgroup-parent); berth's own when absent. */
  cgroupParent?: string;
  /** Default cap on a container's log, bytes. */
  logSizeMax: number;
  events: EventBus;
  /** The container's places on networks (network/endpoints.ts). */
  endpoints: Endpoints;
  /** Volumes, and the mount points containers hold on them (volumes/service.ts). */
  volumes: VolumeService;
  /** The daemon's OCI runtimes by name (HostConfig.Runtime); runc alone when absent. */
  runtimes?: RuntimeNames;
}

export interface Shared {
  deps: ContainerDeps;
  log: Logger;
  lookup: ContainerLookup;
  waits: Waits;
  bundles: Bundles;
  /** Clients attached to containers' stdio (attach.ts). */
  attachments: Attachments;
  /** Health checks of the running containers (health.ts). */
  health: HealthMonitor;
  /** Rotation of the running containers' logs (logrotation.ts). */
  logRotation: LogRotation;
  /** json-file's file at dockerd's place, kept beside the log (jsonlog.ts). */
  jsonLogs: JsonLogs;
}

/** Publishes a container event with dockerd's attributes (its labels, image, name). */
export function publish(events: EventBus, c: Container, action: string, extra: Record<string, string> = {}): void {
  events.publish('container', action, c.id, {
    ...(c.config.Labels ?? {}),
    image: c.imageRef,
    name: c.name,
    ...extra,
  });
}
