// The stages a build needs (engine/builder/stage-graph.ts) and how what parallel
// stages say is ordered (stage-output.ts): the pure parts of issue 29's M5.
import { describe, expect, it } from 'vitest';
import type { BuildEvent, StepEvent } from '../../src/engine/builder/build-types.js';
import { neededStages, stageDependencies } from '../../src/engine/builder/stage-graph.js';
import { StageOutput } from '../../src/engine/builder/stage-output.js';
import { parseDockerfile, parseStages } from '../../src/engine/dockerfile/index.js';

const stagesOf = (lines: string[]) => parseStages(parseDockerfile(lines.join('\n'))).stages;

describe('the stage graph', () => {
  it('finds FROM, COPY --from (name or index) and RUN --mount=from references to earlier stages only', () => {
    const stages = stagesOf([
      'FROM busybox AS a',
      'FROM alpine AS b',
      'FROM a AS c',
      'COPY --from=1 /x /x',
      'RUN --mount=type=bind,from=A,target=/m --mount=type=cache,target=/c,from=later true',
      'FROM scratch AS later',
      'COPY --from=c /y /y',
      'FROM ${BASE}',
    ]);
    const deps = stageDependencies(stages, ['BASE=later']);
    expect(deps).toEqual([[], [], [0, 1], [2], [3]]);
    expect(neededStages(deps, 4)).toEqual([0, 1, 2, 3, 4]);
    expect(neededStages(deps, 2)).toEqual([0, 1, 2]);
    expect(neededStages(deps, 1)).toEqual([1]);
    // Without the meta arg the last FROM names an image: nothing else is needed.
    expect(neededStages(stageDependencies(stages, []), 4)).toEqual([4]);
  });

  it('reads a later stage’s name, and a stage ARG’s value, as no dependency', () => {
    const stages = stagesOf([
      'FROM busybox AS first',
      'ARG S=first',
      'COPY --from=next /a /a',
      'FROM x AS next',
      'RUN --mount=type=bind,from=$S,target=/m true',
    ]);
    expect(stageDependencies(stages, [])).toEqual([[], []]);
    expect(stageDependencies(stages, ['S=first'])).toEqual([[], [0]]);
  });
});

describe('the output of stages built at once', () => {
  it('passes the stage whose turn it is, holds the others until theirs, and on failure shows the failed one last', () => {
    const said: string[] = [];
    const out = {
      emit: (e: BuildEvent) => said.push('stream' in e ? e.stream : 'aux'),
      steps: (e: StepEvent) => said.push(`step:${e.type}`),
    };
    const o = new StageOutput([0, 2, 3], out);
    o.sink(2).emit({ stream: 'two-1' });
    o.sink(0).emit({ stream: 'zero-1' });
    o.sink(3).steps({ type: 'done' });
    expect(said).toEqual(['zero-1']);
    o.finish(2);
    expect(said).toEqual(['zero-1']);
    o.finish(0);
    // 2 had finished: its lines, then 3's held ones; 3 now speaks as it goes.
    expect(said).toEqual(['zero-1', 'two-1', 'step:done']);
    o.sink(3).emit({ stream: 'three-2' });
    expect(said.at(-1)).toBe('three-2');

    const f: string[] = [];
    const p = new StageOutput([0, 1], {
      emit: (e) => f.push('stream' in e ? e.stream : 'aux'),
      steps: () => undefined,
    });
    p.sink(0).emit({ stream: 'zero' });
    p.sink(1).emit({ stream: 'one-failing' });
    p.fail(1);
    p.sink(0).emit({ stream: 'zero-after' });
    expect(f).toEqual(['zero', 'one-failing']);
  });
});
