// All that api/ sees of the engine.
import type { ExecService } from './containers/exec.js';
import type { ContainerService } from './containers/service.js';
import type { CommitService } from './commit/service.js';
import type { ImageService } from './images/service.js';
import type { EventBus } from './events.js';
import type { SystemService } from './system.js';

export interface Engine {
  system: SystemService;
  images: ImageService;
  containers: ContainerService;
  execs: ExecService;
  events: EventBus;
  commits: CommitService;
}
