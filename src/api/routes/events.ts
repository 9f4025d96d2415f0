// GET /events: dockerd's event stream, one JSON object per line.
import type { FastifyInstance } from 'fastify';
import { BEHIND_EVENTS, type Engine, type EngineEvent } from '../../engine/index.js';
import { invalidParameter } from '../../errors.js';
import { COMMON_HEADERS } from '../headers.js';
import { closeOnShutdown } from '../streams/hijack.js';
import { drained } from '../streams/output.js';
import { parseFilters } from '../wire/filters.js';
import { query } from '../wire/forms.js';

/** `since`/`until`: unix seconds (with a fraction), RFC 3339, or a duration before now. */
function timeNano(v: string | undefined, name: string): number | undefined {
  if (v === undefined || v === '') return undefined;
  if (/^\d+(\.\d+)?$/.test(v)) return Math.round(Number(v) * 1e9);
  const d = /^(\d+)(ms|s|m|h)$/.exec(v);
  if (d) return (Date.now() - Number(d[1]) * { ms: 1, s: 1e3, m: 6e4, h: 3.6e6 }[d[2] as 'ms' | 's' | 'm' | 'h']) * 1e6;
  const t = Date.parse(v);
  if (Number.isNaN(t)) throw invalidParameter(`invalid value for ${name}: ${v}`);
  return t * 1e6;
}

/** The older top-level fields (status, id, from) that clients still read. */
function wire(e: EngineEvent): Record<string, unknown> {
  const legacy =
    e.Type === 'container'
      ? { status: e.Action, id: e.Actor.ID, from: e.Actor.Attributes.image }
      : e.Action === 'pull' || e.Action === 'tag' || e.Action === 'untag' || e.Action === 'delete'
        ? { status: e.Action, id: e.Actor.ID }
        : {};
  return { ...legacy, ...e };
}

export function eventRoutes(app: FastifyInstance, engine: Engine): void {
  app.get('/events', async (req, reply) => {
    const q = query(req);
    const abort = new AbortController();
    const untilNano = timeNano(q.until, 'until');
    const sinceNano = timeNano(q.since, 'since');
    const res = reply.raw;
    const events = engine.events.subscribe({
      filters: parseFilters(q.filters),
      signal: abort.signal,
      ...(sinceNano !== undefined ? { sinceNano } : {}),
      ...(untilNano !== undefined ? { untilNano } : {}),
      // It stopped reading: what it missed cannot be told in-band, so the stream is cut.
      onOverflow: () => {
        req.log.warn({ behind: BEHIND_EVENTS }, 'events client fell too far behind; disconnected');
        res.destroy();
      },
    });
    reply.hijack();
    closeOnShutdown(req.raw.socket);
    res.on('close', () => abort.abort());
    res.writeHead(200, { ...COMMON_HEADERS, 'Content-Type': 'application/json' });
    res.flushHeaders();
    for await (const e of events) {
      if (!res.write(`${JSON.stringify(wire(e))}\n`)) await drained(res);
    }
    res.end();
  });
}
