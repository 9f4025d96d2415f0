// The engine's event stream (`GET /events`): what happened to containers and
// images, kept briefly in memory so `since` can replay recent history.
import { EventEmitter } from 'node:events';
import type { Filters } from './filters.js';
import { checkFilters, matchLabels } from './filters.js';

export interface EngineEvent {
  Type: 'container' | 'image';
  Action: string;
  Actor: { ID: string; Attributes: Record<string, string> };
  scope: 'local';
  time: number;
  timeNano: number;
}

const KEEP = 1024;

export interface SubscribeOptions {
  sinceNano?: number;
  untilNano?: number;
  filters?: Filters;
  signal?: AbortSignal;
}

export class EventBus {
  private readonly emitter = new EventEmitter();
  private readonly recent: EngineEvent[] = [];

  constructor() {
    this.emitter.setMaxListeners(0);
  }

  publish(Type: EngineEvent['Type'], Action: string, ID: string, Attributes: Record<string, string> = {}): void {
    const ns = BigInt(Date.now()) * 1_000_000n + process.hrtime.bigint() % 1_000_000n;
    const e: EngineEvent = { Type, Action, Actor: { ID, Attributes }, scope: 'local', time: Number(ns / 1_000_000_000n), timeNano: Number(ns) };
    this.recent.push(e);
    if (this.recent.length > KEEP) this.recent.shift();
    this.emitter.emit('event', e);
  }

  /**
   * Past events from `sinceNano` on, then live ones, until the signal aborts or
   * `untilNano` passes. Bad filters throw here, before anything is streamed.
   */
  subscribe(o: SubscribeOptions): AsyncGenerator<EngineEvent> {
    checkFilters(o.filters ?? {}, ['type', 'event', 'container', 'image', 'label']);
    return this.stream(o);
  }

  private async *stream(o: SubscribeOptions): AsyncGenerator<EngineEvent> {
    const keep = (e: EngineEvent) => matches(e, o.filters ?? {});
    const queue: EngineEvent[] = [];
    let wake: (() => void) | undefined;
    const onEvent = (e: EngineEvent) => {
      queue.push(e);
      wake?.();
    };
    this.emitter.on('event', onEvent);
    const onAbort = () => wake?.();
    o.signal?.addEventListener('abort', onAbort);
    // Timers run on the monotonic clock and may fire when Date.now() has only just reached
    // `until`; the flag, not a second look at the clock, ends the stream then.
    let expired = false;
    const untilTimer =
      o.untilNano !== undefined
        ? setTimeout(() => {
            expired = true;
            wake?.();
          }, Math.max(0, o.untilNano / 1e6 - Date.now()))
        : undefined;
    try {
      if (o.sinceNano !== undefined) {
        for (const e of this.recent) if (e.timeNano >= o.sinceNano && (o.untilNano === undefined || e.timeNano <= o.untilNano) && keep(e)) yield e;
      }
      for (;;) {
        if (o.signal?.aborted) return;
        if (expired || (o.untilNano !== undefined && Date.now() * 1e6 > o.untilNano)) return;
        const e = queue.shift();
        if (e) {
          if (keep(e)) yield e;
          continue;
        }
        await new Promise<void>((r) => (wake = r));
        wake = undefined;
      }
    } finally {
      clearTimeout(untilTimer);
      this.emitter.off('event', onEvent);
      o.signal?.removeEventListener('abort', onAbort);
    }
  }
}

function matches(e: EngineEvent, f: Filters): boolean {
  if (f.type?.length && !f.type.includes(e.Type)) return false;
  if (f.event?.length && !f.event.includes(e.Action)) return false;
  const a = e.Actor.Attributes;
  if (f.container?.length && (e.Type !== 'container' || !f.container.some((c) => e.Actor.ID.startsWith(c) || a.name === c))) return false;
  if (f.image?.length && !f.image.some((i) => a.image === i || e.Actor.ID === i || (e.Type === 'image' && a.name === i))) return false;
  return matchLabels(f, a);
}
