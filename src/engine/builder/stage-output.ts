// What stages built at the same time say, kept together per stage: the stage
// whose turn it is (the earliest unfinished, in Dockerfile order) speaks as it
// goes, the others are held until their turn comes, so the classic stream reads
// as a sequential build's and BuildKit's vertices come one stage at a time (its
// StepVertices follows one stage at once). When a stage fails, what it said
// comes out at once after what was already out, and nothing more after it: its
// failing step is the last one shown.
import type { BuildEvent, StepEvent } from './build-types.js';

type Said = { emit: BuildEvent } | { step: StepEvent };

export interface StageSink {
  emit(e: BuildEvent): void;
  steps(e: StepEvent): void;
}

export class StageOutput {
  private readonly held = new Map<number, Said[]>();
  private readonly finished = new Set<number>();
  private turn = 0;
  private closed = false;

  constructor(
    /** The stages to be built, in Dockerfile order. */
    private readonly order: readonly number[],
    private readonly out: StageSink,
  ) {
    for (const i of order) this.held.set(i, []);
  }

  /** Stage `i`'s own sink. */
  sink(i: number): StageSink {
    return {
      emit: (e) => this.say(i, { emit: e }),
      steps: (e) => this.say(i, { step: e }),
    };
  }

  /** Stage `i` has built: the next stages' held words come out, up to the first still building. */
  finish(i: number): void {
    this.finished.add(i);
    while (!this.closed && this.turn < this.order.length && this.finished.has(this.order[this.turn]!)) {
      this.turn++;
      const next = this.order[this.turn];
      if (next !== undefined) this.flush(next);
    }
  }

  /** Stage `i` failed: its held words come out now, and the others' never. */
  fail(i: number): void {
    if (this.closed) return;
    this.flush(i);
    this.closed = true;
  }

  private say(i: number, s: Said): void {
    if (this.closed) return;
    if (this.order[this.turn] === i) this.write(s);
    else this.held.get(i)!.push(s);
  }

  private flush(i: number): void {
    const held = this.held.get(i)!;
    this.held.set(i, []);
    for (const s of held) this.write(s);
  }

  private write(s: Said): void {
    if ('emit' in s) this.out.emit(s.emit);
    else this.out.steps(s.step);
  }
}
