// The classic build cache: a child of the current image whose container config
// equals the step's is the step's result; with cachefrom, only the images named
// and their ancestors count, and their history can stand for steps.
import { isEngineError } from '../../errors.js';
import type { ContainerConfigFields, ImageConfig } from '../images/config.js';
import type { BuildDeps, Run, StageState, StepContext } from './build-types.js';
import { cacheKey, canonical, short } from './build-texts.js';

/** The images cachefrom names, found locally; unknown names are skipped, as dockerd does. */
export function cacheSources(deps: BuildDeps, names: string[]): string[] {
  const out: string[] = [];
  for (const n of names) {
    try {
      out.push(deps.images.find(n).id);
    } catch (e) {
      if (!isEngineError(e, 'not-found')) throw e;
    }
  }
  return out;
}

/** The sources and all their ancestors: with cachefrom, the only local images a step may take from the cache. */
export function ancestry(deps: BuildDeps, sources: string[]): Set<string> {
  const set = new Set<string>();
  for (const id of sources) {
    let row = deps.repo.find(id);
    while (row && !set.has(row.id)) {
      set.add(row.id);
      row = row.parent ? deps.repo.find(row.parent) : undefined;
    }
  }
  return set;
}

/** The step's image comes from the cache: said as dockerd says it. */
export function useCached(run: Run, st: StageState, cached: string): void {
  run.req.steps?.({ type: 'cached' });
  st.imageId = cached;
  run.emit({ stream: ' ---> Using cache\n' });
  run.emit({ stream: ` ---> ${short(cached)}\n` });
}

/**
 * The classic cache: the newest child of the current image made by the same
 * step; failing that, a cachefrom image whose history goes through the
 * current image and then this step (made into an image of its own).
 */
export async function cachedImage(
  cx: StepContext,
  st: StageState,
  probe: ContainerConfigFields,
  config: ContainerConfigFields,
): Promise<string | undefined> {
  const { run } = cx;
  if (run.req.noCache || !st.imageId) return undefined;
  const key = cacheKey(probe);
  let best: { id: string; created: string } | undefined;
  for (const id of cx.deps.repo.children(st.imageId)) {
    if (run.cacheFrom && !run.cacheFrom.ancestry.has(id)) continue;
    const row = cx.deps.repo.find(id);
    if (!row) continue;
    const cfg = JSON.parse(row.config) as ImageConfig & { container_config?: ContainerConfigFields };
    if (!cfg.container_config || cacheKey(cfg.container_config) !== key) continue;
    if (!best || row.created > best.created) best = { id, created: row.created };
  }
  if (best || !run.cacheFrom) return best?.id;
  const parent = JSON.parse(cx.deps.repo.find(st.imageId)!.config) as ImageConfig;
  const history = parent.history ?? [];
  const diffIds = parent.rootfs?.diff_ids ?? [];
  const createdBy = (probe.Cmd ?? []).join(' ');
  for (const source of run.cacheFrom.sources) {
    const row = cx.deps.repo.find(source);
    if (!row) continue;
    const img = JSON.parse(row.config) as ImageConfig;
    const h = img.history ?? [];
    const d = img.rootfs?.diff_ids ?? [];
    if (h.length <= history.length || d.length < diffIds.length) continue;
    if (!history.every((e, i) => canonical(e) === canonical(h[i]))) continue;
    if (!diffIds.every((x, i) => x === d[i])) continue;
    const step = h[history.length]!;
    if (!step.created_by || step.created_by !== createdBy) continue;
    return cx.deps.commits.restoreStep({
      parent: st.imageId,
      source,
      index: history.length,
      containerConfig: { ...probe, Image: st.imageId },
      config: { ...config, Image: st.imageId },
    });
  }
  return undefined;
}
