// All that api/ sees of the engine.
import type { ExecService } from './containers/exec.js';
import type { ContainerService } from './containers/service.js';
import type { CommitService } from './images/commit.js';
import type { PullingImageService } from './images/pull.js';
import type { EventBus } from './events.js';
import type { SystemService } from './system.js';

export interface Engine {
  system: SystemService;
  images: PullingImageService;
  containers: ContainerService;
  execs: ExecService;
  events: EventBus;
  commits: CommitService;
}

// Containers: the view handed out, the bodies' schemas, and Docker's wording of a status.
export type { AttachSession } from './containers/attach.js';
export type { ContainerConfig, HostConfig } from './containers/config.js';
export { CreateBodySchema, ExecCreateSchema } from './containers/config.js';
export type { ExecInstance, ExecService } from './containers/exec.js';
export type { Container } from './containers/lookup.js';
export type { ContainerService } from './containers/service.js';
export { isoOrZero, statusText } from './containers/status.js';
export type { WaitCondition, WaitResult } from './containers/waits.js';
