// The classic build's shapes: what a build is asked (BuildRequest), what it says
// (BuildEvent, StepEvent), what it is made with (BuildDeps), how a RUN fails, and
// the state its steps share (a build's Run, a stage's StageState, the StepContext
// handed to each step).
import type { Duplex, Readable } from 'node:stream';
import { EngineError } from '../../errors.js';
import type { Logger } from '../../log.js';
import type { ArchiveService } from '../archive/service.js';
import type { CommitService } from '../commit/service.js';
import type { ContainerService } from '../containers/service.js';
import type { ConfigState, Instruction, Stage } from '../dockerfile/index.js';
import type { ContainerConfigFields } from '../images/config.js';
import type { PullEvent } from '../images/pull.js';
import type { ImageService } from '../images/service.js';
import type { Extractor } from '../layers/extractor.js';
import type { AuthConfig } from '../registry/auth.js';
import type { ImageRepository } from '../store/images.js';
import type { CacheMountStore } from './cache-mounts.js';
import type { BuildContext } from './context.js';

export interface BuildResources {
  memory?: number;
  memorySwap?: number;
  cpuShares?: number;
  cpusetCpus?: string;
  cpuPeriod?: number;
  cpuQuota?: number;
  shmSize?: number;
}

export interface BuildRequest {
  body: Readable;
  remote?: string;
  dockerfile?: string;
  tags: string[];
  /** Build args; null: declared by the client without a value (as dockerd: unset). */
  buildArgs: Record<string, string | null>;
  target?: string;
  /**
   * Build every stage up to the target, as dockerd's classic builder does (`POST /build`);
   * otherwise only the stages the target needs, as BuildKit does.
   */
  everyStage?: boolean;
  /** Only this machine's platform is built; others are refused. */
  platform?: string;
  labels: Record<string, string>;
  noCache: boolean;
  pull: boolean;
  rm: boolean;
  forceRm: boolean;
  quiet: boolean;
  cacheFrom: string[];
  networkMode?: string;
  extraHosts: string[];
  resources: BuildResources;
  /** X-Registry-Config: registry host → credentials, for the base images' pulls. */
  auths: Record<string, AuthConfig>;
  /**
   * The Dockerfile given apart from the context (BuildKit's session sends it from
   * a directory of its own), with the .dockerignore patterns that go with it;
   * the context's own .dockerignore is then not read.
   */
  separateDockerfile?: { name: string; text: string; ignore: string[] };
  /** Told each step as it starts, is cached, logs and ends: the structured progress BuildKit's API shows. */
  steps?: (e: StepEvent) => void;
  /**
   * The client's side of a BuildKit session, for `RUN --mount=type=secret|ssh`;
   * absent for the classic `POST /build`, which has no session to ask.
   */
  session?: BuildSession;
}

/** What a build asks of the client that started it, through BuildKit's session. */
export interface BuildSession {
  /** The secret `id`'s bytes; undefined when the client has no such secret. */
  secret(id: string): Promise<Buffer | undefined>;
  /**
   * A connection to the client's ssh agent `id` (one per connection a RUN step
   * opens to the socket it is given); rejects when the client has no such agent.
   */
  sshAgent(id: string): Promise<Duplex>;
  /** Credentials for a base image's registry (`docker.io` for Docker Hub); undefined when the client has none. */
  credentials?(domain: string): Promise<AuthConfig | undefined>;
}

/**
 * A build's progress in steps, for BuildKit's vertices (the classic stream says it
 * in text). A stage starts, then each of its steps: `step`, maybe `cached` and
 * `log`s, then `done`; a failing step gets no `done` (the build's error is its).
 */
export type StepEvent =
  | {
      type: 'stage';
      index: number;
      /** The AS name. */
      name?: string;
      /** Stages in the Dockerfile. */
      stages: number;
      /** Its instructions, and its FROM when that is an image's. */
      commands: number;
      /** The image it starts from (normalised); absent for scratch and for an earlier stage. */
      image?: string;
    }
  | {
      type: 'step';
      kind: Instruction['kind'];
      /** As BuildKit names it: the keyword upper-cased, variables expanded. */
      text: string;
      /** A step berth adds (the request's labels): BuildKit has none. */
      synthetic?: boolean;
    }
  | { type: 'cached' }
  | { type: 'log'; stream: 1 | 2; data: Buffer }
  | { type: 'done' };

export type BuildEvent = { stream: string } | { aux: { ID: string } } | { pull: PullEvent };

export interface BuildDeps {
  images: ImageService;
  repo: ImageRepository;
  containers: ContainerService;
  commits: CommitService;
  archives: ArchiveService;
  /** Where contexts are received, one temp dir per build. */
  tmpDir: string;
  /** The store of RUN --mount=type=cache directories, kept across builds and restarts. */
  cacheMountDir: string;
  /** Writes trees out (a context path a RUN binds). */
  extractor: Extractor;
  logger: Logger;
}

/** A RUN that exited non-zero: its code goes in the error record (`errorDetail.code`). */
export class StepFailed extends EngineError {
  constructor(
    message: string,
    readonly exitCode: number,
    /** The command that ran (the shell form's `/bin/sh -c …`). */
    readonly command: string[] = [],
  ) {
    super('system', message);
  }
}

/** The exit code of a failed RUN, for the stream's errorDetail. */
export const stepExitCode = (e: unknown): number | undefined => (e instanceof StepFailed ? e.exitCode : undefined);

/** The command and exit code of a failed RUN, for BuildKit's words about it. */
export const failedStep = (e: unknown): { command: string[]; exitCode: number } | undefined =>
  e instanceof StepFailed ? { command: e.command, exitCode: e.exitCode } : undefined;

/** One stage's moving state. */
export interface StageState {
  stage: Stage;
  /** The current image; null before any step on `scratch`. */
  imageId: string | null;
  config: ContainerConfigFields;
  cfg: ConfigState;
  /** ARGs declared in this stage: name → value (undefined: no value). */
  args: Map<string, string | undefined>;
  author?: string;
}

/** What a whole build shares. */
export interface Run {
  req: BuildRequest;
  emit: (e: BuildEvent) => void;
  signal: AbortSignal;
  ctx: BuildContext;
  /** Meta ARGs (before the first FROM) with their values. */
  metaArgs: Map<string, string | undefined>;
  /** Build args some ARG declared. */
  used: Set<string>;
  /** Finished stages: name or index → image id. */
  stages: Map<string, string>;
  /** Stages in the Dockerfile. */
  stageCount: number;
  /**
   * With cachefrom (dockerd's imageCache): the images named, whose history stands for steps, and the
   * local images they descend from, the only ones a local cache hit may be. Null without cachefrom.
   */
  cacheFrom: { sources: string[]; ancestry: Set<string> } | null;
}

/** What a step is handed instead of the service: its deps and log, the build it is part of. */
export interface StepContext {
  deps: BuildDeps;
  log: Logger;
  run: Run;
  /** Build containers of scratch stages → the empty image each was made of. */
  vehicles: Map<string, string>;
  cacheMounts: CacheMountStore;
}
