// Which stages a build needs, as BuildKit's Dockerfile frontend finds them: the
// target and, transitively, every earlier stage it names (FROM <stage>,
// COPY --from=<stage or index>, RUN --mount=from=<stage>). What nothing needs is
// never run. The names are resolved before anything runs, with the meta args
// only: a reference made of a stage's own ARG is not seen here (BuildKit reads
// `--mount` and `--from` as written too).
import { expandWord, parseMount, type Stage } from '../dockerfile/index.js';

/** The earlier stage a reference names (its AS name or its index), or undefined: an image. */
export function stageNamed(stages: readonly Stage[], ref: string, before: number): number | undefined {
  const name = ref.toLowerCase();
  if (/^\d+$/.test(name)) {
    const i = Number(name);
    return i < before ? i : undefined;
  }
  for (let i = before - 1; i >= 0; i--) if (stages[i]!.name === name) return i;
  return undefined;
}

/** The words a stage names other stages with: its FROM's, its COPYs' --from, its RUNs' mounts' from. */
function references(stage: Stage, metaEnv: string[]): string[] {
  const esc = stage.from.node.escape;
  const refs: string[] = [];
  const expand = (w: string) => {
    try {
      return expandWord(w, metaEnv, esc);
    } catch {
      return w;
    }
  };
  refs.push(expand(stage.from.image));
  for (const instr of stage.instructions) {
    if ((instr.kind === 'copy' || instr.kind === 'add') && instr.from) refs.push(instr.from);
    if (instr.kind !== 'run') continue;
    for (const raw of instr.mounts) {
      try {
        const m = parseMount(raw, expand);
        if (m.from !== undefined && m.type !== 'tmpfs') refs.push(m.from);
      } catch {
        // A malformed mount fails when its step dispatches, with the step's words.
      }
    }
  }
  return refs;
}

/** Each stage's direct dependencies: the indices of the earlier stages it names. */
export function stageDependencies(stages: readonly Stage[], metaEnv: string[]): number[][] {
  return stages.map((stage) => {
    const deps = new Set<number>();
    for (const ref of references(stage, metaEnv)) {
      const i = stageNamed(stages, ref, stage.index);
      if (i !== undefined) deps.add(i);
    }
    return [...deps].sort((a, b) => a - b);
  });
}

/** The stages the target needs, itself included, in Dockerfile order. */
export function neededStages(deps: readonly number[][], target: number): number[] {
  const seen = new Set<number>();
  const visit = (i: number) => {
    if (seen.has(i)) return;
    seen.add(i);
    for (const d of deps[i]!) visit(d);
  };
  visit(target);
  return [...seen].sort((a, b) => a - b);
}
