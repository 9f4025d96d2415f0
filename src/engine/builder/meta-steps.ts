// The steps that change only the config (an image and a history entry, no
// container), ARG, and WORKDIR, which makes its directory in a layer when the
// image lacks it.
import { lstat } from 'node:fs/promises';
import path from 'node:path';
import { type ArgInstr, expandArg, nopCommand } from '../dockerfile/index.js';
import { mergeConfig } from '../commit/instructions.js';
import type { ContainerConfigFields, ImageConfig } from '../images/config.js';
import { cachedImage, useCached } from './build-cache.js';
import type { StageState, StepContext } from './build-types.js';
import { short } from './build-texts.js';
import { makeDirs } from './copy-step.js';
import { createContainer, removeContainer } from './run-step.js';
import { stepEnv } from './step-env.js';

/**
 * Whether the current image has `dir`, looked up in its layers from the top
 * one component at a time: a symbolic link on the way is never followed
 * (it would be followed on the host) and counts as there.
 */
export async function hasDir(cx: StepContext, st: StageState, dir: string): Promise<boolean> {
  if (!st.imageId) return false;
  const parts = dir.split('/').filter((p) => p && p !== '.');
  if (parts.includes('..')) return true;
  for (const layer of await cx.deps.images.readyLayerDirs(st.imageId)) {
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
export async function workdirStep(
  cx: StepContext,
  st: StageState,
  cmd: string[],
  config: ContainerConfigFields,
): Promise<void> {
  const { run } = cx;
  const probe = { ...config, Cmd: cmd };
  const cached = await cachedImage(cx, st, probe, config);
  if (cached) {
    useCached(run, st, cached);
    st.config = config;
    return;
  }
  const id = await createContainer(cx, st, { ...config, Cmd: cmd });
  try {
    await makeDirs(cx, id, config.WorkingDir!);
    st.imageId = await cx.deps.commits.commitStep({
      container: id,
      parent: st.imageId,
      config: { ...config, Image: st.imageId ?? '' },
      containerConfig: { ...probe, Image: st.imageId ?? '' },
      ...(st.author ? { author: st.author } : {}),
    });
  } finally {
    await removeContainer(cx, id);
  }
  st.config = config;
  run.emit({ stream: ` ---> ${short(st.imageId)}\n` });
}

export async function argStep(cx: StepContext, st: StageState, instr: ArgInstr): Promise<void> {
  const { run } = cx;
  const { args, comment } = expandArg(instr, stepEnv(run, st));
  for (const { name, value } of args) {
    run.used.add(name);
    const given = run.req.buildArgs[name];
    st.args.set(name, given != null ? given : value !== undefined ? value : run.metaArgs.get(name));
  }
  await metaStep(cx, st, nopCommand(st.config, comment), structuredClone(st.config));
}

/** A step that changes only the config: a cached image, or a new one without a container. */
export async function metaStep(
  cx: StepContext,
  st: StageState,
  cmd: string[],
  config: ContainerConfigFields,
): Promise<void> {
  const { run } = cx;
  const cached = await cachedImage(cx, st, { ...config, Cmd: cmd }, config);
  if (cached) {
    st.config = config;
    useCached(run, st, cached);
    return;
  }
  st.imageId = await commitMeta(cx, st, cmd, config);
  st.config = config;
  run.emit({ stream: ` ---> ${short(st.imageId)}\n` });
}

/**
 * A step's image without a container. As dockerd's (made from a container
 * whose create merged the step's config over the image's), the image's
 * config is the run config merged over the parent's.
 */
export function commitMeta(
  cx: StepContext,
  st: StageState,
  cmd: string[],
  config: ContainerConfigFields,
): Promise<string> {
  const containerConfig = { ...config, Cmd: cmd, Image: st.imageId ?? '' };
  const parent = st.imageId ? (JSON.parse(cx.deps.repo.find(st.imageId)!.config) as ImageConfig).config : undefined;
  return cx.deps.commits.commitStep({
    parent: st.imageId,
    config: { ...(parent ? mergeConfig(config, parent) : config), Image: st.imageId ?? '' },
    containerConfig,
    ...(st.author ? { author: st.author } : {}),
  });
}
