// `POST /build`: dockerd's classic builder. Each stage starts from an image
// (pulled when missing), each step makes the next image: RUN in a real
// container committed afterwards, COPY/ADD through a created container and
// the archive path, and the steps that only change the config without any
// container (an image config and a history entry, nothing else). The cache is
// the classic one: a child of the current image whose container config equals
// the step's is the step's result.
import { lstat, mkdtemp, readdir, rm } from 'node:fs/promises';
import path from 'node:path';
import type { Readable } from 'node:stream';
import { Readable as ReadableStream } from 'node:stream';
import tar from 'tar-stream';
import { EngineError, invalidParameter, isEngineError, messageOf } from '../../errors.js';
import type { Logger } from '../../log.js';
import type { ArchiveService } from '../archive/service.js';
import type { CommitService } from '../commit/service.js';
import type { ContainerService } from '../containers/service.js';
import {
  type ArgInstr,
  applyConfigInstruction,
  type ConfigState,
  type CopyInstr,
  commandLine,
  DEFAULT_SHELL,
  envKey,
  expandArg,
  expandCopy,
  expandWord,
  type FromInstr,
  type Instruction,
  isConfigInstruction,
  nopCommand,
  parseDockerfile,
  parseStages,
  parseTrigger,
  queryLabel,
  type RunInstr,
  type Stage,
  sourceCode,
} from '../dockerfile/index.js';
import { mergeConfig } from '../commit/instructions.js';
import type { ContainerConfigFields, ImageConfig } from '../images/config.js';
import type { PullEvent } from '../images/pull.js';
import type { ImageService } from '../images/service.js';
import { mountOverlay, unmount } from '../os/mount.js';
import { familiarString, parseReference, type Reference, withTag } from '../reference.js';
import type { AuthConfig } from '../registry/auth.js';
import type { ImageRepository } from '../store/images.js';
import { formatPlatform, hostPlatform, parsePlatform, platformMatches } from '../registry/manifest.js';
import { type BuildContext, receiveContext } from './context.js';
import { fetchUrl } from './add-url.js';
import { sourceChecksum } from './checksum.js';
import { type CopySource, resolveSources, type SourceTree } from './sources.js';
import { sourcesTar } from './sources-tar.js';

/** dockerd's predefined build args: usable without an ARG, never reported unused, kept out of the cache key. */
const PROXY_ARGS = new Set([
  'HTTP_PROXY',
  'http_proxy',
  'HTTPS_PROXY',
  'https_proxy',
  'FTP_PROXY',
  'ftp_proxy',
  'NO_PROXY',
  'no_proxy',
  'ALL_PROXY',
  'all_proxy',
]);
const DEFAULT_PATH = 'PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

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
interface StageState {
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
interface Run {
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

const short = (id: string) => id.replace(/^sha256:/, '').slice(0, 12);

export class BuildService {
  private readonly log: Logger;
  /** Build containers of scratch stages → the empty image each was made of. */
  private readonly vehicles = new Map<string, string>();

  constructor(private readonly deps: BuildDeps) {
    this.log = deps.logger.child({ component: 'build' });
  }

  /** Leftovers of builds a crash cut short: received contexts, downloads, mounted stage trees. */
  async sweep(): Promise<void> {
    for (const name of await readdir(this.deps.tmpDir)) {
      const p = path.join(this.deps.tmpDir, name);
      if (name.startsWith('from-')) unmount(p);
      await rm(p, { recursive: true, force: true }).catch((err: unknown) =>
        this.log.warn({ err, path: p }, 'removing what a build left failed'),
      );
    }
  }

  /**
   * Runs a build, reporting as dockerd's classic builder does. Errors before
   * the first step are thrown before anything is emitted. Returns the image id.
   */
  async build(req: BuildRequest, emit: (e: BuildEvent) => void, signal: AbortSignal): Promise<string> {
    const tags = req.tags.map((t) => familiarString(buildTag(t)));
    if (req.platform) this.checkPlatform(req.platform);
    const dir = await mkdtemp(path.join(this.deps.tmpDir, 'build-'));
    let ctx: BuildContext;
    try {
      ctx = await receiveContext({
        body: req.body,
        dir,
        ...(req.dockerfile ? { dockerfile: req.dockerfile } : {}),
        ...(req.remote ? { remote: req.remote } : {}),
        ...(req.separateDockerfile ? { separateDockerfile: req.separateDockerfile } : {}),
        signal,
        // dockerd's progress lines for a remote context (none with q).
        ...(req.quiet ? {} : { progress: downloading({ emit }) }),
      });
    } catch (e) {
      await rm(dir, { recursive: true, force: true });
      throw e;
    }
    const quiet = req.quiet;
    const out = (e: BuildEvent) => {
      if (!quiet) emit(e);
    };
    try {
      const df = parseDockerfile(ctx.dockerfile, { name: ctx.dockerfilePath });
      const { metaArgs, stages } = parseStages(df);
      let last = stages.length - 1;
      if (req.target) {
        const at = stages.findIndex((s) => s.name === req.target!.toLowerCase());
        if (at < 0) throw invalidParameter(`failed to reach build target ${req.target} in Dockerfile`);
        last = at;
      }
      const chosen = stages.slice(0, last + 1);
      const labelSteps = Object.keys(req.labels)
        .sort()
        .map((k) => queryLabel(k, req.labels[k]!));
      const total = metaArgs.length + chosen.reduce((n, s) => n + 1 + s.instructions.length, 0) + labelSteps.length;
      // dockerd writes the parser's warnings as one stderr record before the first step.
      if (df.warnings.length) out({ stream: `\u001b[91m${df.warnings.join('\n')}\n\u001b[0m` });

      const run: Run = {
        req,
        emit: out,
        signal,
        ctx,
        metaArgs: new Map(),
        used: new Set(),
        stages: new Map(),
        stageCount: stages.length,
        cacheFrom: null,
      };
      if (req.cacheFrom.length) {
        const sources = this.cacheSources(req.cacheFrom);
        run.cacheFrom = { sources, ancestry: this.ancestry(sources) };
      }
      let step = 0;
      const header = (instr: Instruction) => {
        step++;
        out({ stream: `Step ${step}/${total} : ${sourceCode(instr)}` });
        out({ stream: '\n' });
      };
      const steps = req.steps ?? (() => undefined);
      for (const a of metaArgs) {
        header(a);
        for (const { name, value } of expandArg(a, this.metaEnv(run)).args) {
          run.used.add(name);
          const given = req.buildArgs[name];
          run.metaArgs.set(name, given != null ? given : value);
        }
      }
      let imageId = '';
      for (const stage of chosen) {
        signal.throwIfAborted();
        header(stage.from);
        const st = await this.from(run, stage);
        for (const instr of stage.instructions) {
          signal.throwIfAborted();
          header(instr);
          steps({ type: 'step', kind: instr.kind, text: stepText(instr, this.env(run, st)) });
          await this.dispatch(run, st, instr);
          steps({ type: 'done' });
        }
        for (const instr of stage === chosen.at(-1) ? labelSteps : []) {
          signal.throwIfAborted();
          header(instr);
          steps({ type: 'step', kind: instr.kind, text: sourceCode(instr), synthetic: true });
          await this.dispatch(run, st, instr);
          steps({ type: 'done' });
        }
        if (!st.imageId) {
          // Only metadata on scratch and nothing else: still an image.
          st.imageId = await this.commitMeta(st, nopCommand(st.config, 'FROM scratch'), st.config);
        }
        imageId = st.imageId;
        run.stages.set(String(stage.index), imageId);
        if (stage.name) run.stages.set(stage.name, imageId);
        out({ aux: { ID: imageId } });
      }
      for (const t of tags) this.deps.images.tag(imageId, t);
      const unused = Object.keys(req.buildArgs)
        .filter((k) => !run.used.has(k) && !PROXY_ARGS.has(k))
        .sort();
      if (unused.length) out({ stream: `[Warning] One or more build-args [${unused.join(' ')}] were not consumed\n` });
      out({ stream: `Successfully built ${short(imageId)}\n` });
      for (const t of tags) out({ stream: `Successfully tagged ${t}\n` });
      if (quiet) emit({ stream: `${imageId}\n` });
      return imageId;
    } finally {
      await ctx.dispose().catch((err: unknown) => this.log.warn({ err }, 'removing a build context failed'));
    }
  }

  /**
   * Tags a built image with each name (normalised as the classic build's `t`);
   * all are checked before any is set. Returns the full names (`docker.io/library/x`).
   */
  tag(imageId: string, names: string[]): string[] {
    const refs = names.map((n) => ({ given: parseReference(n, { defaultTag: false }), ref: buildTag(n) }));
    for (const { ref } of refs) this.deps.images.tag(imageId, familiarString(ref));
    return refs.map(({ given }) => given.name + (given.tag ? `:${given.tag}` : ''));
  }

  /** Parses a Dockerfile as a build will, throwing its errors (BuildKit's frontend reports them before the context is sent). */
  checkDockerfile(text: string, name: string): void {
    parseStages(parseDockerfile(text.replace(/^\uFEFF/, ''), { name }));
  }

  /** The image's config as stored (the JSON of its id). */
  imageConfig(imageId: string): string {
    return this.deps.images.find(imageId).config;
  }

  /** The images cachefrom names, found locally; unknown names are skipped, as dockerd does. */
  private cacheSources(names: string[]): string[] {
    const out: string[] = [];
    for (const n of names) {
      try {
        out.push(this.deps.images.find(n).id);
      } catch (e) {
        if (!isEngineError(e, 'not-found')) throw e;
      }
    }
    return out;
  }

  /** The sources and all their ancestors: with cachefrom, the only local images a step may take from the cache. */
  private ancestry(sources: string[]): Set<string> {
    const set = new Set<string>();
    for (const id of sources) {
      let row = this.deps.repo.find(id);
      while (row && !set.has(row.id)) {
        set.add(row.id);
        row = row.parent ? this.deps.repo.find(row.parent) : undefined;
      }
    }
    return set;
  }

  private metaEnv(run: Run): string[] {
    return [...run.metaArgs].filter(([, v]) => v !== undefined).map(([k, v]) => `${k}=${v}`);
  }

  // ---------------------------------------------------------------- FROM

  private async from(run: Run, stage: Stage): Promise<StageState> {
    const instr: FromInstr = stage.from;
    if (instr.platform) this.checkPlatform(expandWord(instr.platform, this.metaEnv(run), instr.node.escape));
    const name = expandWord(instr.image, this.metaEnv(run), instr.node.escape);
    if (!name) throw invalidParameter('base name (${BASE}) should not be blank'.replace('${BASE}', instr.image));
    const scratch = name.toLowerCase() === 'scratch';
    const built = scratch ? undefined : run.stages.get(name.toLowerCase());
    const image = scratch || built ? undefined : fromName(name);
    const steps = run.req.steps ?? (() => undefined);
    steps({
      type: 'stage',
      index: stage.index,
      ...(stage.name ? { name: stage.name } : {}),
      stages: run.stageCount,
      commands: stage.instructions.length + (image ? 1 : 0),
      ...(image ? { image } : {}),
    });
    const st: StageState = {
      stage,
      imageId: null,
      config: { Env: [DEFAULT_PATH] },
      cfg: { cmdSet: false },
      args: new Map(),
    };
    if (scratch) return st;
    if (image) steps({ type: 'step', kind: 'from', text: `FROM ${image}` });
    const imageId = built ?? (await this.baseImage(run, name));
    if (image) steps({ type: 'done' });
    const config = JSON.parse(this.deps.repo.find(imageId)!.config) as ImageConfig;
    st.imageId = imageId;
    st.config = structuredClone(config.config ?? {});
    if (!st.config.Env?.some((e) => envKey(e) === 'PATH')) st.config.Env = [...(st.config.Env ?? []), DEFAULT_PATH];
    const triggers = st.config.OnBuild ?? [];
    st.config.OnBuild = null;
    if (triggers.length) {
      run.emit({ stream: `# Executing ${triggers.length} build trigger` });
      if (triggers.length > 1) run.emit({ stream: 's' });
      run.emit({ stream: '\n' });
      for (const t of triggers) await this.dispatch(run, st, parseTrigger(t));
    }
    run.emit({ stream: ` ---> ${short(st.imageId!)}\n` });
    return st;
  }

  /** An unparsable platform gets containerd's words; a foreign one is refused: berth runs the steps here. */
  private checkPlatform(platform: string): void {
    const want = parsePlatform(platform);
    const host = hostPlatform();
    if (!platformMatches(host, want))
      throw invalidParameter(`platform ${platform} is not supported: berthd builds for ${formatPlatform(host)} only`);
  }

  /** The base image: present (unless `pull`), or pulled with the credentials of its registry. */
  private async baseImage(run: Run, name: string): Promise<string> {
    const present = () => {
      try {
        return this.deps.images.find(name).id;
      } catch (e) {
        if (isEngineError(e, 'not-found')) return undefined;
        throw e;
      }
    };
    const have = present();
    // An image id is never pulled.
    if (have && (!run.req.pull || /^(sha256:)?[0-9a-f]{12,64}$/.test(name))) {
      run.req.steps?.({ type: 'cached' });
      return have;
    }
    const ref = parseReference(name);
    const auth = run.req.auths[ref.domain] ?? (ref.domain === 'docker.io' ? findDockerHub(run.req.auths) : undefined);
    try {
      await this.deps.images.pull(name, undefined, auth, (e) => run.emit({ pull: e }), { signal: run.signal });
    } catch (e) {
      if (have && run.req.pull) {
        this.log.info({ err: e, name }, 'pull of a base image failed; the local one is used');
        return have;
      }
      throw e;
    }
    return this.deps.images.find(name).id;
  }

  // ---------------------------------------------------------------- steps

  /** The environment words are expanded in: the config's Env, then the declared args with values. */
  private env(run: Run, st: StageState): string[] {
    const env = [...(st.config.Env ?? [])];
    const keys = new Set(env.map(envKey));
    for (const [k, v] of this.argValues(run, st)) if (!keys.has(k)) env.push(`${k}=${v}`);
    return env;
  }

  /** The declared args that have a value, and the proxy args given; in declaration order. */
  private argValues(run: Run, st: StageState): Array<[string, string]> {
    const out: Array<[string, string]> = [];
    for (const [k, v] of st.args) if (v !== undefined) out.push([k, v]);
    for (const k of PROXY_ARGS) {
      const v = run.req.buildArgs[k];
      if (v != null && !st.args.has(k)) out.push([k, v]);
    }
    return out;
  }

  private async dispatch(run: Run, st: StageState, instr: Instruction): Promise<void> {
    if (instr.kind === 'run') return this.runStep(run, st, instr);
    if (instr.kind === 'copy' || instr.kind === 'add') return this.copyStep(run, st, instr);
    if (instr.kind === 'arg') return this.argStep(run, st, instr);
    if (instr.kind === 'from') throw invalidParameter('FROM is not allowed here');
    if (!isConfigInstruction(instr)) throw invalidParameter(`unknown instruction: ${String(instr)}`);
    const env = this.env(run, st);
    const config = structuredClone(st.config);
    const comment = applyConfigInstruction(config, instr, env, st.cfg);
    if (instr.kind === 'maintainer') st.author = instr.name;
    if (instr.kind === 'workdir' && config.WorkingDir && !(await this.hasDir(st, config.WorkingDir)))
      return this.workdirStep(run, st, nopCommand(config, comment), config);
    await this.metaStep(run, st, nopCommand(config, comment), config);
  }

  /**
   * Whether the current image has `dir`, looked up in its layers from the top
   * one component at a time: a symbolic link on the way is never followed
   * (it would be followed on the host) and counts as there.
   */
  private async hasDir(st: StageState, dir: string): Promise<boolean> {
    if (!st.imageId) return false;
    const parts = dir.split('/').filter((p) => p && p !== '.');
    if (parts.includes('..')) return true;
    for (const layer of await this.deps.images.readyLayerDirs(st.imageId)) {
      let at = layer;
      let found = true;
      for (const part of parts) {
        at = path.join(at, part);
        const s = await lstat(at).catch((e: NodeJS.ErrnoException) => {
          if (e.code === 'ENOENT' || e.code === 'ENOTDIR') return undefined;
          throw e;
        });
        if (!s) {
          found = false;
          break;
        }
        if (s.isSymbolicLink()) return true;
        if (!s.isDirectory()) return false; // a file, or a whiteout hiding what is below
      }
      if (found) return true;
    }
    return false;
  }

  /** WORKDIR of a directory the image lacks: made in a layer, as dockerd's step makes it. */
  private async workdirStep(run: Run, st: StageState, cmd: string[], config: ContainerConfigFields): Promise<void> {
    const probe = { ...config, Cmd: cmd };
    const cached = await this.cached(run, st, probe, config);
    if (!cached) {
      const id = await this.createContainer(run, st, { ...config, Cmd: cmd });
      try {
        await this.makeDirs(id, config.WorkingDir!);
        st.imageId = await this.deps.commits.commitStep({
          container: id,
          parent: st.imageId,
          config: { ...config, Image: st.imageId ?? '' },
          containerConfig: { ...probe, Image: st.imageId ?? '' },
          ...(st.author ? { author: st.author } : {}),
        });
      } finally {
        await this.removeContainer(id);
      }
    } else {
      run.req.steps?.({ type: 'cached' });
      st.imageId = cached;
      run.emit({ stream: ' ---> Using cache\n' });
    }
    st.config = config;
    run.emit({ stream: ` ---> ${short(st.imageId!)}\n` });
  }

  private async argStep(run: Run, st: StageState, instr: ArgInstr): Promise<void> {
    const { args, comment } = expandArg(instr, this.env(run, st));
    for (const { name, value } of args) {
      run.used.add(name);
      const given = run.req.buildArgs[name];
      st.args.set(name, given != null ? given : value !== undefined ? value : run.metaArgs.get(name));
    }
    await this.metaStep(run, st, nopCommand(st.config, comment), structuredClone(st.config));
  }

  /** The step's image comes from the cache: said as dockerd says it. */
  private useCached(run: Run, st: StageState, cached: string): void {
    run.req.steps?.({ type: 'cached' });
    st.imageId = cached;
    run.emit({ stream: ' ---> Using cache\n' });
    run.emit({ stream: ` ---> ${short(cached)}\n` });
  }

  /** A step that changes only the config: a cached image, or a new one without a container. */
  private async metaStep(run: Run, st: StageState, cmd: string[], config: ContainerConfigFields): Promise<void> {
    const cached = await this.cached(run, st, { ...config, Cmd: cmd }, config);
    if (cached) {
      st.config = config;
      this.useCached(run, st, cached);
      return;
    }
    st.imageId = await this.commitMeta(st, cmd, config);
    st.config = config;
    run.emit({ stream: ` ---> ${short(st.imageId)}\n` });
  }

  /**
   * A step's image without a container. As dockerd's (made from a container
   * whose create merged the step's config over the image's), the image's
   * config is the run config merged over the parent's.
   */
  private commitMeta(st: StageState, cmd: string[], config: ContainerConfigFields): Promise<string> {
    const containerConfig = { ...config, Cmd: cmd, Image: st.imageId ?? '' };
    const parent = st.imageId ? (JSON.parse(this.deps.repo.find(st.imageId)!.config) as ImageConfig).config : undefined;
    return this.deps.commits.commitStep({
      parent: st.imageId,
      config: { ...(parent ? mergeConfig(config, parent) : config), Image: st.imageId ?? '' },
      containerConfig,
      ...(st.author ? { author: st.author } : {}),
    });
  }

  /**
   * The classic cache: the newest child of the current image made by the same
   * step; failing that, a cachefrom image whose history goes through the
   * current image and then this step (made into an image of its own).
   */
  private async cached(
    run: Run,
    st: StageState,
    probe: ContainerConfigFields,
    config: ContainerConfigFields,
  ): Promise<string | undefined> {
    if (run.req.noCache || !st.imageId) return undefined;
    const key = cacheKey(probe);
    let best: { id: string; created: string } | undefined;
    for (const id of this.deps.repo.children(st.imageId)) {
      if (run.cacheFrom && !run.cacheFrom.ancestry.has(id)) continue;
      const row = this.deps.repo.find(id);
      if (!row) continue;
      const cfg = JSON.parse(row.config) as ImageConfig & { container_config?: ContainerConfigFields };
      if (!cfg.container_config || cacheKey(cfg.container_config) !== key) continue;
      if (!best || row.created > best.created) best = { id, created: row.created };
    }
    if (best || !run.cacheFrom) return best?.id;
    const parent = JSON.parse(this.deps.repo.find(st.imageId)!.config) as ImageConfig;
    const history = parent.history ?? [];
    const diffIds = parent.rootfs?.diff_ids ?? [];
    const createdBy = (probe.Cmd ?? []).join(' ');
    for (const source of run.cacheFrom.sources) {
      const row = this.deps.repo.find(source);
      if (!row) continue;
      const img = JSON.parse(row.config) as ImageConfig;
      const h = img.history ?? [];
      const d = img.rootfs?.diff_ids ?? [];
      if (h.length <= history.length || d.length < diffIds.length) continue;
      if (!history.every((e, i) => canonical(e) === canonical(h[i]))) continue;
      if (!diffIds.every((x, i) => x === d[i])) continue;
      const step = h[history.length]!;
      if (!step.created_by || step.created_by !== createdBy) continue;
      return this.deps.commits.restoreStep({
        parent: st.imageId,
        source,
        index: history.length,
        containerConfig: { ...probe, Image: st.imageId },
        config: { ...config, Image: st.imageId },
      });
    }
    return undefined;
  }

  private hostConfig(run: Run): Record<string, unknown> {
    const r = run.req.resources;
    return {
      ...(run.req.networkMode ? { NetworkMode: run.req.networkMode } : {}),
      ...(run.req.extraHosts.length ? { ExtraHosts: run.req.extraHosts } : {}),
      ...(r.shmSize ? { ShmSize: r.shmSize } : {}),
      ...(r.memory ? { Memory: r.memory } : {}),
      ...(r.memorySwap ? { MemorySwap: r.memorySwap } : {}),
      ...(r.cpuShares ? { CpuShares: r.cpuShares } : {}),
      ...(r.cpusetCpus ? { CpusetCpus: r.cpusetCpus } : {}),
      ...(r.cpuPeriod ? { CpuPeriod: r.cpuPeriod } : {}),
      ...(r.cpuQuota ? { CpuQuota: r.cpuQuota } : {}),
    };
  }

  private async createContainer(run: Run, st: StageState, config: ContainerConfigFields): Promise<string> {
    // A scratch stage's first container step needs an image to make a container of: an empty one, made
    // for it and removed with the container (the step's image has no parent, as dockerd's).
    const vehicle = st.imageId
      ? undefined
      : await this.deps.commits.commitStep({ parent: null, config: {}, containerConfig: {} });
    try {
      const { Id } = await this.deps.containers.create({
        config: { ...(config as Record<string, unknown>), Image: st.imageId ?? vehicle, Entrypoint: [] } as never,
        hostConfig: this.hostConfig(run) as never,
      });
      if (vehicle) this.vehicles.set(Id, vehicle);
      return Id;
    } catch (e) {
      if (vehicle) await this.removeVehicle(vehicle);
      throw e;
    }
  }

  private async removeContainer(id: string): Promise<void> {
    await this.deps.containers
      .remove(id, { force: true, volumes: true })
      .catch((err: unknown) => this.log.warn({ err, id }, 'removing a build container failed'));
    const vehicle = this.vehicles.get(id);
    this.vehicles.delete(id);
    if (vehicle) await this.removeVehicle(vehicle);
  }

  private async removeVehicle(id: string): Promise<void> {
    await this.deps.images
      .remove(id, { force: true })
      .catch((err: unknown) => this.log.warn({ err, id }, 'removing the empty image of a scratch step failed'));
  }

  // ---------------------------------------------------------------- RUN

  private async runStep(run: Run, st: StageState, instr: RunInstr): Promise<void> {
    const cmd = commandLine(instr.args, instr.json, st.config) ?? [];
    // As dockerd: the declared build args in use prefix the cached command (`|N k=v … cmd`); the proxy args do not.
    const declared = this.argValues(run, st).filter(([k]) => st.args.has(k));
    const envKeys = new Set((st.config.Env ?? []).map(envKey));
    const keyArgs = declared
      .filter(([k]) => !envKeys.has(k))
      .map(([k, v]) => `${k}=${v}`)
      .sort();
    const saveCmd = keyArgs.length ? [`|${keyArgs.length}`, ...keyArgs, ...cmd] : cmd;
    const probe: ContainerConfigFields = { ...st.config, Cmd: saveCmd, Entrypoint: null };
    const cached = await this.cached(run, st, probe, st.config);
    if (cached) {
      this.useCached(run, st, cached);
      return;
    }
    const env = this.env(run, st);
    const id = await this.createContainer(run, st, { ...st.config, Env: env, Cmd: cmd });
    if (run.signal.aborted) {
      await this.removeContainer(id);
      run.signal.throwIfAborted();
    }
    run.emit({ stream: ` ---> Running in ${short(id)}\n` });
    let removed = false;
    const remove = async () => {
      if (removed) return;
      removed = true;
      await this.removeContainer(id);
      run.emit({ stream: `Removing intermediate container ${short(id)}\n` });
    };
    try {
      const code = await this.runContainer(run, id);
      if (code !== 0) {
        if (run.req.forceRm) await remove();
        throw new StepFailed(`The command '${cmd.join(' ')}' returned a non-zero code: ${code}`, code, cmd);
      }
      const imageId = await this.deps.commits.commitStep({
        container: id,
        parent: st.imageId,
        config: { ...st.config, Image: st.imageId ?? '' },
        containerConfig: { ...probe, Image: st.imageId ?? '' },
        ...(st.author ? { author: st.author } : {}),
      });
      if (run.req.rm || run.req.forceRm) await remove();
      st.imageId = imageId;
      run.emit({ stream: ` ---> ${short(imageId)}\n` });
    } catch (e) {
      // A cancelled build leaves nothing behind, whatever rm says.
      if (run.signal.aborted) await this.removeContainer(id);
      throw e;
    }
  }

  /** Starts the container, streams its output into the build's, and returns its exit code. */
  private async runContainer(run: Run, id: string): Promise<number> {
    const { containers } = this.deps;
    await containers.start(id);
    const follow = new AbortController();
    const reading = (async () => {
      for await (const entry of containers.logs(id, {
        follow: true,
        stdout: true,
        stderr: true,
        signal: follow.signal,
      })) {
        run.req.steps?.({ type: 'log', stream: entry.stream === 'stderr' ? 2 : 1, data: entry.line });
        const text = entry.line.toString('utf8');
        run.emit({ stream: entry.stream === 'stderr' ? `\u001b[91m${text}\u001b[0m` : text });
      }
    })();
    const stop = () => void containers.kill(id, 'SIGKILL').catch(() => undefined);
    run.signal.addEventListener('abort', stop, { once: true });
    if (run.signal.aborted) stop(); // it went while the container was starting
    try {
      const result = await containers.wait(id, 'not-running');
      follow.abort();
      await reading;
      run.signal.throwIfAborted();
      return result.StatusCode;
    } finally {
      follow.abort();
      await reading.catch(() => undefined);
      run.signal.removeEventListener('abort', stop);
    }
  }

  // ---------------------------------------------------------------- COPY / ADD

  private async copyStep(run: Run, st: StageState, instr: CopyInstr): Promise<void> {
    const CMD = instr.kind.toUpperCase();
    const env = this.env(run, st);
    const { sources: patterns, dest: destWord, chown: chownSpec } = expandCopy(instr, env);
    const temps: Array<() => Promise<void>> = [];
    try {
      // As dockerd 20.10, --from is not expanded.
      const tree: SourceTree = instr.from ? await this.imageTree(run, instr.from, temps) : run.ctx;
      const sources: CopySource[] = [];
      const local = patterns.filter((p) => !/^https?:\/\//.test(p));
      try {
        if (instr.kind === 'add') {
          for (const url of patterns.filter((p) => /^https?:\/\//.test(p))) {
            const dir = await mkdtemp(path.join(this.deps.tmpDir, 'add-'));
            temps.push(() => rm(dir, { recursive: true, force: true }));
            sources.push(await fetchUrl(url, dir, run.signal, downloading(run)));
          }
        }
        if (local.length || instr.kind === 'copy')
          sources.unshift(...resolveSources(tree, instr.kind === 'copy' ? patterns : local));
      } catch (e) {
        throw invalidParameter(`${CMD} failed: ${messageOf(e)}`, e);
      }
      if (!sources.length) throw invalidParameter(`${CMD} failed: no source files were specified`);
      const sum = await sourceChecksum(sources);
      const text = `${CMD} ${sum} in ${destWord} `;
      const probe: ContainerConfigFields = { ...st.config, Cmd: [...shellOf(st.config), `#(nop) ${text}`] };
      const cached = await this.cached(run, st, probe, st.config);
      if (cached) {
        this.useCached(run, st, cached);
        return;
      }
      const id = await this.createContainer(run, st, { ...st.config, Cmd: probe.Cmd });
      try {
        const chown = chownSpec ? await this.owner(id, chownSpec) : undefined;
        const dest = destWord.startsWith('/')
          ? destWord
          : path.posix.join('/', st.config.WorkingDir || '/', destWord) + (destWord.endsWith('/') ? '/' : '');
        const single = sources.length === 1 && !patterns.some(hasWildcard) ? sources[0]! : undefined;
        let destIsDir = dest.endsWith('/') || !single || single.stat.isDirectory();
        if (!destIsDir && (await this.isDir(id, dest))) destIsDir = true;
        if (single?.unnamed && destIsDir) throw invalidParameter(`cannot determine filename for source ${patterns[0]}`);
        const dir = destIsDir ? dest : path.posix.dirname(dest);
        await this.makeDirs(id, dir, chown);
        await this.deps.archives.put(
          id,
          dir,
          sourcesTar({
            sources,
            destIsDir,
            ...(destIsDir ? {} : { destName: path.posix.basename(dest) }),
            ...(chown ? { chown } : {}),
            extractArchives: instr.kind === 'add',
          }),
          { noOverwriteDirNonDir: false, copyUIDGID: false },
        );
        st.imageId = await this.deps.commits.commitStep({
          container: id,
          parent: st.imageId,
          config: { ...st.config, Image: st.imageId ?? '' },
          containerConfig: { ...probe, Image: st.imageId ?? '' },
          ...(st.author ? { author: st.author } : {}),
        });
      } catch (e) {
        if (isEngineError(e) && !/^(COPY|ADD) failed/.test(e.message) && e.kind === 'invalid')
          throw invalidParameter(`${CMD} failed: ${e.message}`, e);
        throw e;
      } finally {
        await this.removeContainer(id);
      }
      run.emit({ stream: ` ---> ${short(st.imageId)}\n` });
    } finally {
      for (const t of temps.reverse()) await t().catch(() => undefined);
    }
  }

  /** A finished stage's or an image's filesystem, mounted read-only for COPY --from. */
  private async imageTree(run: Run, from: string, temps: Array<() => Promise<void>>): Promise<SourceTree> {
    const id = run.stages.get(from.toLowerCase()) ?? (await this.baseImage(run, from));
    const dirs = await this.deps.images.readyLayerDirs(id);
    if (dirs.length === 1) return { root: dirs[0]!, excluded: () => false, image: true };
    const target = await mkdtemp(path.join(this.deps.tmpDir, 'from-'));
    if (dirs.length === 0) {
      temps.push(() => rm(target, { recursive: true, force: true }));
      return { root: target, excluded: () => false, image: true };
    }
    mountOverlay({ lowerDirs: dirs, target });
    temps.push(async () => {
      unmount(target);
      await rm(target, { recursive: true, force: true });
    });
    return { root: target, excluded: () => false, image: true };
  }

  private async isDir(id: string, p: string): Promise<boolean> {
    try {
      const s = await this.deps.archives.stat(id, p);
      return (s.mode & 0x80000000) !== 0; // Go's os.ModeDir
    } catch (e) {
      if (isEngineError(e, 'not-found')) return false;
      throw e;
    }
  }

  /** Creates the missing directories of `dir` in the container (owned by `chown` when given, as dockerd). */
  private async makeDirs(id: string, dir: string, chown?: { uid: number; gid: number }): Promise<void> {
    const parts = dir.split('/').filter(Boolean);
    let k = parts.length;
    while (k > 0 && !(await this.isDir(id, `/${parts.slice(0, k).join('/')}`))) k--;
    if (k === parts.length) return;
    const pack = tar.pack();
    for (let i = k; i < parts.length; i++) {
      pack.entry({
        name: `${parts.slice(k, i + 1).join('/')}/`,
        type: 'directory',
        mode: 0o755,
        uid: chown?.uid ?? 0,
        gid: chown?.gid ?? 0,
        mtime: new Date(),
      });
    }
    pack.finalize();
    await this.deps.archives.put(id, `/${parts.slice(0, k).join('/')}`, ReadableStream.from(pack), {
      noOverwriteDirNonDir: false,
      copyUIDGID: false,
    });
  }

  /** --chown: numbers as they are, names looked up in the container's /etc/passwd and /etc/group. */
  private async owner(id: string, spec: string): Promise<{ uid: number; gid: number }> {
    const [user = '', group] = spec.split(':');
    const lookup = async (file: string, name: string, what: string): Promise<number> => {
      if (/^\d+$/.test(name)) return Number(name);
      const text = await this.readFile(id, file).catch(() => '');
      const line = text.split('\n').find((l) => l.split(':')[0] === name);
      if (!line)
        throw invalidParameter(`unable to convert uid/gid chown string to host mapping: no such ${what}: ${name}`);
      return Number(line.split(':')[2]);
    };
    const uid = await lookup('/etc/passwd', user, 'user');
    let gid = uid;
    if (group !== undefined) gid = await lookup('/etc/group', group, 'group');
    else if (!/^\d+$/.test(user)) {
      const text = await this.readFile(id, '/etc/passwd').catch(() => '');
      gid = Number(
        text
          .split('\n')
          .find((l) => l.split(':')[0] === user)
          ?.split(':')[3] ?? uid,
      );
    }
    return { uid, gid };
  }

  private async readFile(id: string, file: string): Promise<string> {
    const { tar: archive } = await this.deps.archives.get(id, file);
    const extract = tar.extract();
    const chunks: Buffer[] = [];
    const done = new Promise<void>((resolve, reject) => {
      extract.on('entry', (_h, stream, next) => {
        stream.on('data', (c: unknown) => chunks.push(c as Buffer));
        stream.on('end', next);
        stream.resume();
      });
      extract.on('finish', resolve);
      extract.on('error', reject);
    });
    archive.pipe(extract);
    await done;
    return Buffer.concat(chunks).toString('utf8');
  }
}

/** A `t` of a build: a name, `:latest` when it has no tag; never a digest. */
function buildTag(t: string): Reference {
  const ref = parseReference(t, { defaultTag: false });
  if (ref.digest) throw invalidParameter(`invalid reference format: ${t} is a digest reference`);
  return ref.tag ? ref : withTag(ref, 'latest');
}

/** A base image as BuildKit's FROM vertex names it: the full name, its tag or digest only when given. */
function fromName(name: string): string {
  try {
    const ref = parseReference(name, { defaultTag: false });
    return ref.name + (ref.tag ? `:${ref.tag}` : '') + (ref.digest ? `@${ref.digest}` : '');
  } catch {
    return name;
  }
}

/** A step as BuildKit's vertex names it: the keyword upper-cased and, but in RUN, variables expanded. */
function stepText(instr: Instruction, env: string[]): string {
  const code = sourceCode(instr);
  const [word = '', ...rest] = code.split(' ');
  let text = [word.toUpperCase(), ...rest].join(' ');
  if (instr.kind !== 'run' && text.includes('$')) {
    try {
      text = expandWord(text, env, instr.node.escape);
    } catch {
      // As BuildKit's processCmdEnv: the text as written when it does not expand.
    }
  }
  return text;
}

function findDockerHub(auths: Record<string, AuthConfig>): AuthConfig | undefined {
  return auths['https://index.docker.io/v1/'] ?? auths['index.docker.io'] ?? auths['registry-1.docker.io'];
}

const hasWildcard = (p: string) => /[*?[]/.test(p);

function shellOf(config: ContainerConfigFields): string[] {
  return config.Shell?.length ? [...config.Shell] : [...DEFAULT_SHELL];
}

/** dockerd's "Downloading" progress records for a download the build makes, at most a few a second. */
function downloading(run: { emit: (e: BuildEvent) => void }): (current: number, total: number | null) => void {
  let last = 0;
  return (current, total) => {
    const now = Date.now();
    if (now - last < 100 && (total === null || current < total)) return;
    last = now;
    run.emit({ pull: { status: 'Downloading', layer: true, current, ...(total !== null ? { total } : {}) } });
  };
}

/** JSON with sorted keys: history entries compare by content. */
function canonical(v: unknown): string {
  if (!v || typeof v !== 'object') return JSON.stringify(v ?? null);
  const o = v as Record<string, unknown>;
  return `{${Object.keys(o)
    .sort()
    .map((k) => `${JSON.stringify(k)}:${canonical(o[k])}`)
    .join(',')}}`;
}

/** What two steps' configs must share for one to stand for the other (dockerd's compare). */
function cacheKey(c: ContainerConfigFields): string {
  const sortObj = (o: Record<string, unknown> | null | undefined) =>
    o && Object.keys(o).length ? Object.keys(o).sort() : null;
  return JSON.stringify([
    c.Cmd ?? null,
    c.Entrypoint?.length ? c.Entrypoint : null,
    c.Env ?? null,
    c.Labels && Object.keys(c.Labels).length ? Object.entries(c.Labels).sort() : null,
    sortObj(c.ExposedPorts as Record<string, unknown> | null | undefined),
    sortObj(c.Volumes as Record<string, unknown> | null | undefined),
    c.WorkingDir ?? '',
    c.User ?? '',
    c.OnBuild?.length ? c.OnBuild : null,
    c.StopSignal ?? '',
    c.Healthcheck ?? null,
    c.Shell?.length ? c.Shell : null,
  ]);
}
