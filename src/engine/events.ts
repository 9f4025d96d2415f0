// The engine's event stream (`GET /events`): what happened to containers and
// images, kept briefly in memory so `since` can replay recent history.
import { EventEmitter } from 'node:events';
import type { Filters } from './filters.js';
import { checkFilters, matchLabels } from './filters.js';

export interface EngineEvent {
  Type: 'container' | 'image' | 'network' | 'volume';
  Action: string;
  Actor: { ID: string; Attributes: Record<string, string> };
  scope: 'local';
  time: number;
  timeNano: number;
}

/** History kept for `since`: this many events, and no more than KEEP_BYTES of them (labels can be large). */
const KEEP = 1024;
const KEEP_BYTES = 8 * 1024 * 1024;
/**
 * How far a subscriber may fall behind (a client that stopped reading) before
 * it is dropped: its queue goes and its stream is cut, rather than memory
 * growing with every event for as long as the connection stays open.
 */
export const BEHIND_EVENTS = 1024;
const BEHIND_BYTES = 8 * 1024 * 1024;
/** setTimeout's longest delay; a later `until` is waited for in steps. */
const MAX_TIMER_MS = 2 ** 31 - 1;

export interface SubscribeOptions {
  sinceNano?: number;
  untilNano?: number;
  filters?: Filters;
  signal?: AbortSignal;
  /** Called (once) when the subscriber fell too far behind and was dropped; its stream then ends. */
  onOverflow?: () => void;
}

/** An event with the approximate memory it holds (mostly its attributes' text). */
interface Held {
  e: EngineEvent;
  size: number;
}

const sizeOf = (e: EngineEvent) => {
  let n = 128 + e.Actor.ID.length + e.Action.length;
  for (const [k, v] of Object.entries(e.Actor.Attributes)) n += k.length + v.length;
  return n;
};

export class EventBus {
  private readonly emitter = new EventEmitter();
  private readonly recent: Held[] = [];
  private recentBytes = 0;
  private listeners = 0;

  constructor() {
    this.emitter.setMaxListeners(0);
  }

  /** Streams open now (`/info`'s NEventsListener). */
  get subscribers(): number {
    return this.listeners;
  }

  publish(Type: EngineEvent['Type'], Action: string, ID: string, Attributes: Record<string, string> = {}): void {
    const ns = BigInt(Date.now()) * 1_000_000n + (process.hrtime.bigint() % 1_000_000n);
    const e: EngineEvent = {
      Type,
      Action,
      Actor: { ID, Attributes },
      scope: 'local',
      time: Number(ns / 1_000_000_000n),
      timeNano: Number(ns),
    };
    const held = { e, size: sizeOf(e) };
    this.recent.push(held);
    this.recentBytes += held.size;
    while (this.recent.length > KEEP || (this.recentBytes > KEEP_BYTES && this.recent.length > 1))
      this.recentBytes -= this.recent.shift()!.size;
    this.emitter.emit('event', held);
  }

  /**
   * Past events from `sinceNano` on, then live ones, until the signal aborts,
   * `untilNano` passes, or the subscriber falls too far behind (onOverflow).
   * Bad filters throw here, before anything is streamed.
   */
  subscribe(o: SubscribeOptions): AsyncGenerator<EngineEvent> {
    checkFilters(o.filters ?? {}, ['type', 'event', 'container', 'image', 'label', 'volume']);
    return this.stream(o);
  }

  private async *stream(o: SubscribeOptions): AsyncGenerator<EngineEvent> {
    const keep = (e: EngineEvent) =>
      matches(e, o.filters ?? {}) && (o.untilNano === undefined || e.timeNano <= o.untilNano);
    // What happened before, taken in the same turn as the listener is added: no gap, no repeat.
    const past = o.sinceNano !== undefined ? this.recent.filter((h) => h.e.timeNano >= o.sinceNano! && keep(h.e)) : [];
    const queue: Held[] = [];
    let queued = 0;
    let dropped = false;
    let expired = false;
    let wake: (() => void) | undefined;
    const poke = () => {
      const w = wake;
      wake = undefined;
      w?.();
    };
    const onEvent = (h: Held) => {
      if (!keep(h.e)) return;
      queue.push(h);
      queued += h.size;
      if (queue.length > BEHIND_EVENTS || queued > BEHIND_BYTES) {
        dropped = true;
        queue.length = 0;
        this.emitter.off('event', onEvent);
        o.onOverflow?.();
      }
      poke();
    };
    this.emitter.on('event', onEvent);
    this.listeners++;
    o.signal?.addEventListener('abort', poke);
    // Timers run on the monotonic clock and may fire a little before Date.now()
    // reaches `until`, or (past setTimeout's range) long before: re-armed until it has.
    let untilTimer: NodeJS.Timeout | undefined;
    const arm = () => {
      const ms = o.untilNano! / 1e6 - Date.now();
      if (ms < 0) {
        expired = true;
        poke();
      } else untilTimer = setTimeout(arm, Math.min(Math.ceil(ms) || 1, MAX_TIMER_MS));
    };
    if (o.untilNano !== undefined) arm();
    try {
      for (const h of past) yield h.e;
      for (;;) {
        if (o.signal?.aborted || dropped) return;
        const h = queue.shift();
        if (h) {
          queued -= h.size;
          yield h.e;
          continue;
        }
        if (expired) return;
        await new Promise<void>((r) => (wake = r));
      }
    } finally {
      clearTimeout(untilTimer);
      this.emitter.off('event', onEvent);
      this.listeners--;
      o.signal?.removeEventListener('abort', poke);
    }
  }
}

function matches(e: EngineEvent, f: Filters): boolean {
  if (f.type?.length && !f.type.includes(e.Type)) return false;
  if (f.event?.length && !f.event.includes(e.Action)) return false;
  const a = e.Actor.Attributes;
  if (
    f.container?.length &&
    (e.Type !== 'container' || !f.container.some((c) => e.Actor.ID.startsWith(c) || a.name === c))
  )
    return false;
  if (
    f.image?.length &&
    !f.image.some((i) => a.image === i || e.Actor.ID === i || (e.Type === 'image' && a.name === i))
  )
    return false;
  if (f.volume?.length && (e.Type !== 'volume' || !f.volume.includes(e.Actor.ID))) return false;
  return matchLabels(f, a);
}
