// All that api/ sees of the engine.
import type { SystemService } from './system.js';

export interface Engine {
  system: SystemService;
}
