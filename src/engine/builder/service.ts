// `POST /build`: dockerd's classic builder. Each stage starts from an image
// (pulled when missing), each step makes the next image: RUN in a real
// container committed afterwards, COPY/ADD through a created container and
// the archive path, and the steps that only change the config without any
// container (an image config and a history entry, nothing else). The cache is
// the classic one: a child of the current image whose container config equals
// the step's is the step's result.
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import path from 'node:path';
import { invalidParameter } from '../../errors.js';
import type { Logger } from '../../log.js';
import { builtinSyntax, expandArg, parseDockerfile, parseStages, queryLabel, sourceCode } from '../dockerfile/index.js';
import { type ImageTree, openImageTree } from '../images/image-tree.js';
import { unmount } from '../os/mount.js';
import { familiarString, parseReference } from '../reference.js';
import { checkPlatform } from './base-image.js';
import { ancestry, cacheSources } from './build-cache.js';
import { CacheMountStore } from './cache-mounts.js';
import type { BuildDeps, BuildEvent, BuildRequest, Run, StepContext } from './build-types.js';
import { buildTag, downloading, short } from './build-texts.js';
import { type BuildContext, receiveContext } from './context.js';
import { buildStage } from './stage.js';
import { neededStages, stageDependencies } from './stage-graph.js';
import { StageOutput } from './stage-output.js';
import { STAGES_AT_ONCE, scheduleStages } from './stage-schedule.js';
import { metaEnv, PROXY_ARGS, platformArgs } from './step-env.js';

export class BuildService {
  private readonly log: Logger;
  /** Build containers of scratch stages → the empty image each was made of. */
  private readonly vehicles = new Map<string, string>();
  private readonly cacheMounts: CacheMountStore;

  constructor(private readonly deps: BuildDeps) {
    this.log = deps.logger.child({ component: 'build' });
    this.cacheMounts = new CacheMountStore(deps.cacheMountDir);
  }

  /** Leftovers of builds a crash cut short: received contexts, downloads, mounted stage trees. */
  async sweep(): Promise<void> {
    for (const name of await readdir(this.deps.tmpDir)) {
      const p = path.join(this.deps.tmpDir, name);
      // Stage trees (from-) and RUN mounts (mnt-: overlays, secrets' tmpfs) may still be mounted.
      if (name.startsWith('from-')) unmount(p);
      if (name.startsWith('mnt-')) for (const m of ['fs', 'merged']) unmount(path.join(p, m));
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
    if (req.platform) checkPlatform(req.platform);
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
      const labelSteps = Object.keys(req.labels)
        .sort()
        .map((k) => queryLabel(k, req.labels[k]!));
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
        const sources = cacheSources(this.deps, req.cacheFrom);
        run.cacheFrom = { sources, ancestry: ancestry(this.deps, sources) };
      }
      const automatic = platformArgs(req.platform);
      for (const [k, v] of automatic) run.metaArgs.set(k, v);
      const cx: StepContext = {
        deps: this.deps,
        log: this.log,
        run,
        vehicles: this.vehicles,
        cacheMounts: this.cacheMounts,
      };
      // The step count needs the stages the target needs, found with the meta ARGs' values: their own
      // headers wait for it.
      const metaHeaders: string[] = [];
      for (const a of metaArgs) {
        metaHeaders.push(sourceCode(a));
        for (const { name, value } of expandArg(a, metaEnv(run)).args) {
          run.used.add(name);
          const given = req.buildArgs[name];
          run.metaArgs.set(name, given != null ? given : (value ?? automatic.get(name)));
        }
      }
      const graph = stageDependencies(stages, metaEnv(run));
      const order = req.everyStage ? stages.slice(0, last + 1).map((s) => s.index) : neededStages(graph, last);
      const firstStep = new Map<number, number>();
      let total = metaArgs.length;
      for (const i of order) {
        firstStep.set(i, total + 1);
        total += 1 + stages[i]!.instructions.length;
      }
      total += labelSteps.length;
      metaHeaders.forEach((text, n) => {
        out({ stream: `Step ${n + 1}/${total} : ${text}` });
        out({ stream: '\n' });
      });
      const builtIds = new Map<number, string>();
      const output = new StageOutput(order, { emit: out, steps: req.steps ?? (() => undefined) });
      const built = await scheduleStages(
        { order, deps: graph, max: STAGES_AT_ONCE, signal, failed: (i) => output.fail(i) },
        async (i, stageSignal) => {
          const sink = output.sink(i);
          const view: Run = {
            ...run,
            req: { ...req, steps: sink.steps },
            emit: sink.emit,
            signal: stageSignal,
            stages: new Map(),
          };
          // A stage sees the stages it names, as they built.
          for (const d of graph[i]!) {
            const id = builtIds.get(d)!;
            view.stages.set(String(d), id);
            if (stages[d]!.name) view.stages.set(stages[d]!.name!, id);
          }
          const id = await buildStage({ ...cx, run: view }, stages[i]!, {
            first: firstStep.get(i)!,
            total,
            labels: i === last ? labelSteps : [],
          });
          builtIds.set(i, id);
          output.finish(i);
          return id;
        },
      );
      const imageId = built.get(last)!;
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

  /**
   * Parses a Dockerfile as a BuildKit build will, throwing its errors (BuildKit's
   * frontend reports them before the context is sent), a `# syntax=` naming
   * another frontend than docker/dockerfile:1 among them. Returns the syntax
   * named, which berth's own 1.x syntax stands for.
   */
  checkDockerfile(text: string, name: string): { syntax?: string } {
    const df = parseDockerfile(text.replace(/^\uFEFF/, ''), { name });
    parseStages(df);
    const syntax = builtinSyntax(df.directives);
    return syntax ? { syntax } : {};
  }

  /** A built image's files, for BuildKit's local and tar exporters; the caller releases the tree. */
  async files(imageId: string): Promise<ImageTree> {
    return openImageTree(await this.deps.images.readyLayerDirs(imageId), this.deps.tmpDir);
  }

  /** The image's config as stored (the JSON of its id). */
  imageConfig(imageId: string): string {
    return this.deps.images.find(imageId).config;
  }
}
