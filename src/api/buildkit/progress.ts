// A build's progress as BuildKit's Control/Status streams it (docs/buildkit/protocol.md
// §5): vertices (one per step, named in BuildKit's words), their status rows
// ("transferring context: 34B") and their logs (a RUN's output, sent before the
// vertex completes, or buildx's printers show it as `#0`). The builder's step
// events (engine StepEvent) become vertices here.
import { createHash } from 'node:crypto';
import type { StepEvent } from '../../engine/index.js';
import type { Msg } from './proto/wire.js';

const timestamp = (ms = Date.now()): Msg => ({ seconds: BigInt(Math.floor(ms / 1000)), nanos: (ms % 1000) * 1e6 });

/** One job's StatusResponse messages: kept for a late Status call, and handed to the ones listening. */
export class StatusFeed {
  private readonly history: Msg[] = [];
  private readonly listeners = new Set<(m: Msg | undefined) => void>();
  private ended = false;

  push(m: Msg): void {
    if (this.ended) return;
    this.history.push(m);
    for (const l of this.listeners) l(m);
  }

  /** No more messages: the listeners are told with undefined. */
  end(): void {
    if (this.ended) return;
    this.ended = true;
    for (const l of this.listeners) l(undefined);
    this.listeners.clear();
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
    this.digest = `sha256:${createHash('sha256').update(`${name}\0${Math.random()}\0${Date.now()}`).digest('hex')}`;
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
    return this;
  }

  cached(): void {
    this.cachedFlag = true;
  }

  /** A status row (`ID` is what the printer shows: "transferring context:", "naming to …"). */
  status(id: string, current?: number, done = false): void {
    const now = timestamp();
    const row = this.rows.get(id) ?? { ID: id, vertex: this.digest, started: now };
    if (!this.rows.has(id)) this.rows.set(id, row);
    if (id.startsWith('transferring')) row.name = 'transferring';
    if (current !== undefined) row.current = BigInt(current);
    row.timestamp = now;
    if (done) row.completed = now;
    this.feed.push({ statuses: [{ ...row }] });
  }

  log(stream: 1 | 2, data: Buffer): void {
    this.feed.push({ logs: [{ vertex: this.digest, timestamp: timestamp(), stream: BigInt(stream), msg: data }] });
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

  /** The step the build failed in, marked with the error; false when it failed before any step. */
  fail(error: string): boolean {
    if (!this.current) return false;
    this.current.complete(error);
    this.current = undefined;
    return true;
  }
}
