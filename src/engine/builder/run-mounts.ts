// `RUN --mount`: the mounts of one RUN made on the host and handed to its
// container (HostConfig.Mounts), undone when the RUN is over. None of them ends
// up in the step's layer: the commit leaves out the mount points the runtime
// had to make for them (the step's `stubs`). The step's cache key holds each
// mount's options (mountKey), never what a cache, a bind or a secret holds,
// as BuildKit's.
import { copyFile, mkdir, mkdtemp, rm, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { pipeline } from 'node:stream/promises';
import { invalidParameter, isEngineError, messageOf } from '../../errors.js';
import { expandWord, mountKey, type RunInstr, type RunMount, parseMount } from '../dockerfile/index.js';
import { mountOverlay, unmount } from '../os/mount.js';
import type { StepContext } from './build-types.js';
import { type HostMount, secretMount, sshMount } from './session-mounts.js';
import { resolveSources, type SourceTree } from './sources.js';
import { sourcesTar } from './sources-tar.js';
import { baseImage } from './base-image.js';
import { sourceChecksum } from './checksum.js';
import { imageTree } from './trees.js';

/** The RUN's mounts, expanded with the step's environment, targets made absolute against the workdir. */
export function runMounts(instr: RunInstr, env: string[], workdir: string | undefined): RunMount[] {
  return instr.mounts.map((raw) => {
    const m = parseMount(raw, (w) => expandWord(w, env, instr.node.escape));
    if (m.type === 'secret' || m.type === 'ssh') return m;
    const target = path.posix.join('/', workdir || '/', m.target ?? '');
    if (target === '/') throw invalidParameter(`invalid mount target "${target}"`);
    return { ...m, target };
  });
}

/**
 * What the step's cache key holds of a mount: its options, and for a bind what
 * it binds, as BuildKit keys an exec on its inputs' content (the context's
 * files' checksum, a stage's or image's id); a cache's content never counts.
 */
export async function mountCacheKey(cx: StepContext, m: RunMount): Promise<string> {
  const key = `--mount=${mountKey(m)}`;
  if (m.type !== 'bind') return key;
  if (m.from !== undefined) return `${key},image=${await imageOf(cx, m.from)}`;
  const rel = path.posix.join('/', m.source ?? '/');
  try {
    return `${key},content=${await sourceChecksum(resolveSources(cx.run.ctx, [rel === '/' ? '.' : rel.slice(1)]))}`;
  } catch (e) {
    if (isEngineError(e)) throw invalidParameter(`failed to mount ${m.target}: ${messageOf(e)}`, e);
    throw e;
  }
}

/** A stage's image (by name or index) or an image's, pulled when missing. */
const imageOf = async (cx: StepContext, from: string) =>
  cx.run.stages.get(from.toLowerCase()) ?? (await baseImage(cx, from));

export interface PreparedMounts {
  /** For the container's HostConfig.Mounts. */
  mounts: Array<Record<string, unknown>>;
  /** Set in the RUN's environment (SSH_AUTH_SOCK). */
  env: string[];
  /** Where the mounts are in the container. */
  targets: string[];
  release(): Promise<void>;
}

/** A tree file for one RUN (a heredoc script): bound read-only at `target`. */
export interface InlineFile {
  dir: string;
  name: string;
  data: string;
  mode: number;
}

/** Makes the RUN's mounts on the host; everything made is undone by `release`, also when this throws. */
export async function prepareMounts(cx: StepContext, list: RunMount[], inline?: InlineFile): Promise<PreparedMounts> {
  const out: PreparedMounts = { mounts: [], env: [], targets: [], release: async () => undefined };
  const undo: Array<() => Promise<void> | void> = [];
  out.release = async () => {
    for (const u of undo.splice(0).reverse())
      await Promise.resolve(u()).catch((err: unknown) => cx.log.warn({ err }, 'undoing a RUN mount failed'));
  };
  const scratch = async () => {
    const dir = await mkdtemp(path.join(cx.deps.tmpDir, 'mnt-'));
    undo.push(() => rm(dir, { recursive: true, force: true }));
    return dir;
  };
  const bind = (source: string, target: string, readOnly: boolean) => {
    out.mounts.push({ Type: 'bind', Source: source, Target: target, ReadOnly: readOnly });
    out.targets.push(target);
  };
  const host = (h: HostMount | null) => {
    if (!h) return;
    undo.push(h.release);
    bind(h.source, h.target, h.readOnly);
    if (h.env && !out.env.some((e) => e.startsWith('SSH_AUTH_SOCK='))) out.env.push(h.env);
  };
  try {
    if (inline) {
      const dir = await scratch();
      await writeFile(path.join(dir, inline.name), inline.data, { mode: inline.mode });
      bind(dir, inline.dir, true);
    }
    let sshIndex = 0;
    for (const m of list) {
      cx.run.signal.throwIfAborted();
      switch (m.type) {
        case 'tmpfs':
          out.mounts.push({
            Type: 'tmpfs',
            Target: m.target,
            ...(m.size ? { TmpfsOptions: { SizeBytes: m.size } } : {}),
          });
          out.targets.push(m.target!);
          break;
        case 'cache': {
          const seed = m.from !== undefined ? await cacheSeed(cx, m, undo) : undefined;
          const held = await cx.cacheMounts.acquire(
            {
              id: m.id || m.target!,
              sharing: m.sharing ?? 'shared',
              uid: m.uid ?? 0,
              gid: m.gid ?? 0,
              mode: m.mode ?? 0o755,
              ...(seed ? { seed } : {}),
            },
            cx.run.signal,
          );
          undo.push(held.release);
          bind(held.dir, m.target!, m.readOnly);
          break;
        }
        case 'bind':
          bind(await bindSource(cx, m, undo, scratch), m.target!, m.readOnly);
          break;
        case 'secret':
          host(await secretMount(cx, m, path.join(await scratch(), 'fs')));
          break;
        case 'ssh':
          host(await sshMount(cx, m, sshIndex++, path.join(await scratch(), 'agent')));
          break;
      }
    }
    return out;
  } catch (e) {
    await out.release();
    throw e;
  }
}

/** A cache's `from` (a stage or an image) and `source` in it: what a new cache starts as, keyed by the image. */
async function cacheSeed(
  cx: StepContext,
  m: RunMount,
  undo: Array<() => Promise<void> | void>,
): Promise<{ key: string; dir: string }> {
  const from = m.from!;
  const imageId = await imageOf(cx, from);
  const temps: Array<() => Promise<void>> = [];
  undo.push(async () => {
    for (const t of temps.splice(0).reverse()) await t();
  });
  const tree = await imageTree(cx, from, temps);
  const rel = path.posix.join('/', m.source ?? '/');
  const [src] = resolveSources(tree, [rel === '/' ? '.' : rel.slice(1)]);
  if (!src?.stat.isDirectory())
    throw invalidParameter(`failed to mount ${m.target}: ${rel} is not a directory in ${from}`);
  return { key: `${imageId}:${rel}`, dir: src.abs };
}

/**
 * A bind's source on the host: a path of the context (written out for the RUN,
 * as the context is held as an index), of a stage or of an image. A writable
 * bind gets an overlay of its own whose changes are thrown away.
 */
async function bindSource(
  cx: StepContext,
  m: RunMount,
  undo: Array<() => Promise<void> | void>,
  scratch: () => Promise<string>,
): Promise<string> {
  const { run } = cx;
  const temps: Array<() => Promise<void>> = [];
  undo.push(async () => {
    for (const t of temps.splice(0).reverse()) await t();
  });
  const tree: SourceTree = m.from !== undefined ? await imageTree(cx, m.from, temps) : run.ctx;
  const rel = path.posix.join('/', m.source ?? '/');
  let source: string;
  try {
    const [src] = resolveSources(tree, [rel === '/' ? '.' : rel.slice(1)]);
    if (!src) throw invalidParameter(`${rel}: not found`);
    if (src.node) {
      // The context is an index: its part the RUN sees is written out.
      const dir = await scratch();
      await extractTo(cx, dir, sourcesTar({ sources: [src], destIsDir: true }));
      source = src.stat.isDirectory() ? dir : path.join(dir, path.posix.basename(src.rel));
    } else source = src.abs;
  } catch (e) {
    if (isEngineError(e)) throw invalidParameter(`failed to mount ${m.target}: ${messageOf(e)}`, e);
    throw e;
  }
  if (m.readOnly) return source;
  const dir = await scratch();
  if (!(await stat(source)).isDirectory()) {
    // A file: a copy of its own takes the RUN's writes.
    await copyFile(source, path.join(dir, 'file'));
    return path.join(dir, 'file');
  }
  const [upper, work, merged] = ['upper', 'work', 'merged'].map((d) => path.join(dir, d)) as [string, string, string];
  for (const d of [upper, work, merged]) await mkdir(d);
  mountOverlay({ lowerDirs: [source], upperDir: upper, workDir: work, target: merged });
  undo.push(() => void unmount(merged));
  return merged;
}

async function extractTo(cx: StepContext, dir: string, tar: NodeJS.ReadableStream): Promise<void> {
  const x = cx.deps.extractor.extract(dir, { mediaType: 'application/vnd.oci.image.layer.v1.tar' });
  await Promise.all([pipeline(tar, x.input), x.done]);
}
