// The trees a step reads from other than the context: a finished stage's or an
// image's filesystem, mounted read-only on the host for the step's time.
import { mkdtemp, rm } from 'node:fs/promises';
import path from 'node:path';
import { mountOverlay, unmount } from '../os/mount.js';
import { baseImage } from './base-image.js';
import type { StepContext } from './build-types.js';
import type { SourceTree } from './sources.js';

/** A finished stage's or an image's filesystem, mounted read-only (COPY --from, RUN --mount=from=); `temps` gets its undoing. */
export async function imageTree(cx: StepContext, from: string, temps: Array<() => Promise<void>>): Promise<SourceTree> {
  const { run } = cx;
  const id = run.stages.get(from.toLowerCase()) ?? (await baseImage(cx, from));
  const dirs = await cx.deps.images.readyLayerDirs(id);
  if (dirs.length === 1) return { root: dirs[0]!, excluded: () => false, image: true };
  const target = await mkdtemp(path.join(cx.deps.tmpDir, 'from-'));
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
