// A build's progress as BuildKit's Control/Status streams it (docs/buildkit/protocol.md
// §5): vertices (one per step, named in BuildKit's words), their status rows
// ("transferring context: 34B") and their logs (a RUN's output, sent before the
// vertex completes, or buildx's printers show it as `#0`). The builder's step
// events (engine StepEvent) become vertices here.
import { randomBytes } from 'node:crypto';
import type { PullEvent, StepEvent } from '../../engine/index.js';
import type { Msg } from './proto/wire.js';

const timestamp = (ms = Date.now()): Msg => ({ seconds: BigInt(Math.floor(ms / 1000)), nanos: (ms % 1000) * 1e6 });

/**
 * How long after a vertex's start its first log is held back. buildx's printers
 * number a vertex when they first print it, at most every 100 ms (and on a
 * 150 ms tick); a log they read in the same round as its vertex's start prints
 * as `#0`. The hold delays only what the client sees, never the build.
 */
const FIRST_LOG_HOLD_MS = 150;

/** How often a byte-counting row is updated. */
const ROW_EVERY_MS = 100;

/** One job's StatusResponse messages: kept for a late Status call, and handed to the ones listening, in order. */
export class StatusFeed {
  private readonly history: Msg[] = [];
  private readonly listeners = new Set<(m: Msg | undefined) => void>();
  /** Messages held back (behind a held log), with the time each may go. */
  private readonly held: Array<{ m: Msg; at: number }> = [];
  private timer: NodeJS.Timeout | undefined;
  private ending = false;
  private ended = false;
  private onDrained: Array<() => void> = [];

  /** Sends a message, not before `at` (ms since the epoch) and never before one pushed earlier. */
  push(m: Msg, at = 0): void {
    if (this.ending) return;
    if (!this.held.length && at <= Date.now()) this.deliver(m);
    else {
      this.held.push({ m, at });
      this.flush();
    }
  }

  /** When the messages pushed so far will all have gone. */
  get releaseTime(): number {
    return Math.max(Date.now(), ...this.held.map((h) => h.at));
  }

  private deliver(m: Msg): void {
    this.history.push(m);
    for (const l of this.listeners) l(m);
  }

  private flush(): void {
    if (this.timer) return;
    while (this.held.length && this.held[0]!.at <= Date.now()) this.deliver(this.held.shift()!.m);
    if (this.held.length) {
      this.timer = setTimeout(() => {
        this.timer = undefined;
        this.flush();
      }, this.held[0]!.at - Date.now());
      return;
    }
    if (this.ending) this.finish();
  }

  /** No more messages: once the held ones have gone, the listeners are told with undefined. */
  end(): Promise<void> {
    if (!this.ended) {
      this.ending = true;
      if (!this.held.length) this.finish();
    }
    return this.drained();
  }

  /** Ends at once, dropping what is held (the job was cancelled: nobody waits for its progress). */
  abort(): void {
    this.held.length = 0;
    clearTimeout(this.timer);
    this.timer = undefined;
    this.ending = true;
    this.finish();
  }

  private finish(): void {
    if (this.ended) return;
    this.ended = true;
    for (const l of this.listeners) l(undefined);
    this.listeners.clear();
    for (const d of this.onDrained.splice(0)) d();
  }

  private drained(): Promise<void> {
    return this.ended ? Promise.resolve() : new Promise((resolve) => this.onDrained.push(resolve));
  }

  /** Replays what was said so far, then tells `listener` each new message and the end; returns the unsubscribe. */
  subscribe(listener: (m: Msg | undefined) => void): () => void {
    for (const m of this.history) listener(m);
    if (this.ended) {
      listener(undefined);
      return () => undefined;
    }
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }
}

/** One vertex of the graph the printers draw. */
export class Vertex {
  readonly digest: string;
  private started?: Msg;
  private completed = false;
  private cachedFlag = false;
  private readonly rows = new Map<string, Msg>();

  constructor(
    private readonly feed: StatusFeed,
    readonly name: string,
    private readonly inputs: string[] = [],
  ) {
    this.digest = `sha256:${randomBytes(32).toString('hex')}`;
  }

  private send(extra: Msg = {}): void {
    this.feed.push({
      vertexes: [
        {
          digest: this.digest,
          inputs: this.inputs,
          name: this.name,
          cached: this.cachedFlag,
          ...(this.started ? { started: this.started } : {}),
          ...extra,
        },
      ],
    });
  }

  start(): this {
    this.started = timestamp();
    this.send();
    this.shownAt = this.feed.releaseTime;
    return this;
  }

  /** When the client will have read this vertex's start. */
  private shownAt = 0;

  cached(): void {
    this.cachedFlag = true;
  }

  /** A status row (`ID` is what the printer shows: "transferring context:", "naming to …"). */
  status(id: string, current?: number, done = false, total?: number): void {
    const now = timestamp();
    const row = this.rows.get(id) ?? { ID: id, vertex: this.digest, started: now };
    if (!this.rows.has(id)) this.rows.set(id, row);
    if (id.startsWith('transferring')) row.name = 'transferring';
    if (current !== undefined) row.current = BigInt(current);
    if (total !== undefined) row.total = BigInt(total);
    row.timestamp = now;
    if (done) row.completed = now;
    this.feed.push({ statuses: [{ ...row }] });
  }

  /**
   * A row that counts bytes, updated at most every ROW_EVERY_MS (a transfer of
   * many small files would otherwise send a message per packet): `bytes` tells
   * the count so far, `done` shows the last one completed.
   */
  counter(id: string): { bytes: (n: number) => void; done: () => void } {
    let total = 0;
    let shown = 0;
    return {
      bytes: (n) => {
        total = n;
        const now = Date.now();
        if (now - shown < ROW_EVERY_MS) return;
        shown = now;
        this.status(id, n);
      },
      done: () => this.status(id, total, true),
    };
  }

  log(stream: 1 | 2, data: Buffer): void {
    this.feed.push(
      { logs: [{ vertex: this.digest, timestamp: timestamp(), stream: BigInt(stream), msg: data }] },
      this.shownAt + FIRST_LOG_HOLD_MS,
    );
  }

  complete(error?: string): void {
    if (this.completed) return;
    this.completed = true;
    this.started ??= timestamp();
    this.send({ completed: timestamp(), ...(error ? { error } : {}) });
  }

  /** Started and done at once (a step taken from the cache, a lookup). */
  instant(): void {
    this.start();
    this.complete();
  }
}

/** BuildKit's step kinds that are vertices; the others (ENV, LABEL…) only change the config and take a number. */
const VERTEX_KINDS = new Set<string>(['from', 'run', 'copy', 'add', 'workdir']);

/** The builder's step events as vertices named as BuildKit's Dockerfile frontend names them (`[stage 2/3] RUN …`). */
export class StepVertices {
  private prefix = '';
  private total = 0;
  private index = 0;
  private current?: Vertex;
  private previous?: Vertex;

  constructor(
    private readonly feed: StatusFeed,
    /** The context's vertex: what a COPY or ADD takes as an input. */
    private readonly context: () => Vertex | undefined,
  ) {}

  readonly on = (e: StepEvent): void => {
    switch (e.type) {
      case 'stage': {
        const name = e.name ?? (e.stages > 1 ? `stage-${e.index}` : '');
        this.prefix = name ? `${name} ` : '';
        this.total = e.commands;
        this.index = 0;
        this.previous = undefined;
        if (e.image) {
          const tagged = /[:@][^/]*$/.test(e.image) ? e.image : `${e.image}:latest`;
          new Vertex(this.feed, `[internal] load metadata for ${tagged}`).instant();
        }
        return;
      }
      case 'step': {
        if (e.synthetic) return;
        this.index++;
        if (!VERTEX_KINDS.has(e.kind)) return;
        const width = String(this.total).length;
        const label = this.total ? `[${this.prefix}${String(this.index).padStart(width)}/${this.total}] ` : '';
        const inputs = [
          this.previous?.digest,
          e.kind === 'copy' || e.kind === 'add' ? this.context()?.digest : undefined,
        ];
        this.current = new Vertex(
          this.feed,
          label + e.text,
          inputs.filter((d): d is string => !!d),
        ).start();
        return;
      }
      case 'cached':
        this.current?.cached();
        return;
      case 'log':
        this.current?.log(e.stream, e.data);
        return;
      case 'done':
        if (!this.current) return;
        this.current.complete();
        this.previous = this.current;
        this.current = undefined;
        return;
    }
  };

  /** A base image's pull, as rows of the FROM step: one per layer, with its bytes. */
  readonly pull = (e: PullEvent): void => {
    if (!this.current || !e.layer || !e.id) return;
    const done = /^(Pull complete|Already exists|Download complete)$/.test(e.status);
    this.current.status(`sha256:${e.id}`, e.current, done, e.total);
  };

  /** The step the build failed in, marked with the error; false when it failed before any step. */
  fail(error: string): boolean {
    if (!this.current) return false;
    this.current.complete(error);
    this.current = undefined;
    return true;
  }
}
