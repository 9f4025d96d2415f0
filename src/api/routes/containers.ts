// /containers/*: thin translations between Docker's wire shapes and the container service.
import type { FastifyInstance } from 'fastify';
import { type Container, CreateBodySchema, type Engine, UpdateBodySchema } from '../../engine/index.js';
import { invalidParameter } from '../../errors.js';
import { COMMON_HEADERS } from '../headers.js';
import { streamContentType } from '../streams/mux.js';
import { closeOnShutdown, hijack, runSession, takeOver } from '../streams/hijack.js';
import { acceptHead, OP_BINARY, OP_TEXT, runWebSocketSession } from '../streams/websocket.js';
import { drained, writeOutput } from '../streams/output.js';
import { versionBelow } from '../version.js';
import { containerInspect, containerSummary, listedSizes } from '../wire/containers.js';
import { createRequest } from '../wire/create.js';
import { parseFilters } from '../wire/filters.js';
import { boolValue, intValue, parseJsonBody, type Query, query, withoutNulls } from '../wire/forms.js';

type IdParams = { Params: { id: string } };

/** Unix seconds with an optional fraction ("1700000000.5") → Date. */
function timeParam(v: string | undefined, name: string): Date | undefined {
  if (v === undefined || v === '' || v === '0') return undefined;
  if (/^\d+(\.\d+)?$/.test(v)) return new Date(Number(v) * 1000);
  const t = Date.parse(v);
  if (Number.isNaN(t)) throw invalidParameter(`invalid value for ${name}: ${v}`);
  return new Date(t);
}

/**
 * `GET /containers/json`'s entries without sizes. The Image column shows what the
 * user asked for while it still names the same image; one lookup per distinct
 * reference, not one per container.
 */
export function containerSummaries(engine: Engine, list: Container[], apiVersion: string): Record<string, unknown>[] {
  const names = new Map<string, string>();
  const nameOf = (ref: string, id: string) => {
    const key = `${ref}\0${id}`;
    let name = names.get(key);
    if (name === undefined) {
      try {
        name = engine.images.find(ref).id === id ? ref : id;
      } catch {
        name = id;
      }
      names.set(key, name);
    }
    return name;
  };
  const details = engine.containers.listedDetails(list);
  return list.map((c, i) =>
    containerSummary(c, nameOf(c.imageRef, c.imageId), details[i]!.networking, details[i]!.mounts, apiVersion),
  );
}

/** `GET /containers/json`'s entries (and `/system/df`'s), sizes included when asked. */
export async function containerList(
  engine: Engine,
  list: Container[],
  withSize: boolean,
  apiVersion: string,
): Promise<Record<string, unknown>[]> {
  const summaries = containerSummaries(engine, list, apiVersion);
  if (!withSize) return summaries;
  return Promise.all(
    summaries.map(async (s, i) => ({ ...s, ...listedSizes(await engine.containers.sizes(list[i]!)) })),
  );
}

/** The containers `GET /containers/json` lists for its query. */
export const listedContainers = (engine: Engine, q: Query): Container[] =>
  engine.containers.list({
    all: boolValue(q.all),
    limit: intValue(q.limit, 'limit'),
    filters: parseFilters(q.filters),
  });

/** `GET /containers/{id}/json` but the sizes (asked with `size=1`). */
export function inspectWithoutSizes(engine: Engine, c: Container, apiVersion: string): Record<string, unknown> {
  const lowerDirs = engine.images
    .layersOf(c.imageId)
    .map((l) => engine.images.layerDir(l))
    .reverse();
  const execIds = engine.execs.idsOf(c.id);
  const { containers } = engine;
  return {
    ...containerInspect(c, { lowerDirs }, containers.networkingOf(c), containers.mountPoints(c), apiVersion),
    ExecIDs: execIds.length ? execIds : null,
  };
}

export function containerRoutes(app: FastifyInstance, engine: Engine): void {
  const containers = engine.containers;

  app.get('/containers/json', async (req) => {
    const q = query(req);
    return containerList(engine, listedContainers(engine, q), boolValue(q.size), req.apiVersion);
  });

  app.post('/containers/create', async (req, reply) => {
    const body = await parseJsonBody(req, CreateBodySchema, { required: true, goType: 'container.CreateRequest' });
    const created = await containers.create(createRequest(body, query(req), req.apiVersion));
    return reply.code(201).send(created);
  });

  // docker update. PidsLimit came with API 1.40: dockerd does not read an older client's.
  app.post<IdParams>('/containers/:id/update', async (req) => {
    const body = withoutNulls(await parseJsonBody(req, UpdateBodySchema, { goType: 'container.UpdateConfig' }));
    if (versionBelow(req.apiVersion, '1.40')) delete body.PidsLimit;
    return containers.update(req.params.id, body);
  });

  app.post('/containers/prune', async (req) => containers.prune(parseFilters(query(req).filters)));

  app.get<IdParams>('/containers/:id/json', async (req) => {
    const c = containers.get(req.params.id);
    return {
      ...inspectWithoutSizes(engine, c, req.apiVersion),
      // Counted only when asked (`size=1`), and then shown even when 0, as dockerd's pointers are.
      ...(boolValue(query(req).size) ? await containers.sizes(c) : {}),
    };
  });

  app.get<IdParams>('/containers/:id/top', async (req) => containers.top(req.params.id, query(req).ps_args));

  // One sample (one-shot), two a second apart with the first as the second's
  // precpu_stats (stream=0: CPU use needs both, as dockerd's second frame), or
  // one a second until the client goes away. A sample is taken only once the
  // previous one was taken and written out (a client that stops reading gets
  // no more, rather than a growing buffer of them).
  app.get<IdParams>('/containers/:id/stats', async (req, reply) => {
    const q = query(req);
    const stream = boolValue(q.stream, true);
    const oneShot = boolValue(q['one-shot']);
    if (stream && oneShot) throw invalidParameter('cannot have stream=true and one-shot=true');
    const first = await containers.stats(req.params.id);
    if (oneShot) return first;
    if (!stream) {
      await new Promise((r) => setTimeout(r, 1000));
      const second = await containers.stats(req.params.id).catch(() => first);
      return { ...second, preread: first.read, precpu_stats: first.cpu_stats };
    }
    reply.hijack();
    closeOnShutdown(req.raw.socket);
    const res = reply.raw;
    res.writeHead(200, { ...COMMON_HEADERS, 'Content-Type': 'application/json' });
    let prev = first;
    const gone = () => res.destroyed || res.writableEnded;
    // A second, or less if the client goes away meanwhile.
    const pause = () =>
      new Promise<void>((resolve) => {
        const done = () => {
          clearTimeout(timer);
          res.off('close', done);
          resolve();
        };
        const timer = setTimeout(done, 1000);
        res.once('close', done);
      });
    res.write(`${JSON.stringify(first)}\n`);
    while (!gone()) {
      await drained(res);
      await pause();
      if (gone()) break;
      let next: Awaited<ReturnType<typeof containers.stats>>;
      try {
        next = await containers.stats(req.params.id);
      } catch {
        break; // the container is gone
      }
      if (gone()) break;
      res.write(`${JSON.stringify({ ...next, preread: prev.read, precpu_stats: prev.cpu_stats })}\n`);
      prev = next;
    }
    if (!gone()) res.end();
  });

  app.post<IdParams>('/containers/:id/start', async (req, reply) => {
    await containers.start(req.params.id);
    return reply.code(204).send();
  });

  /** stop's and restart's `t` and `signal` (API 1.42). */
  const stopOptions = (q: Record<string, string | undefined>) => ({
    timeoutSec: intValue(q.t, 't'),
    ...(q.signal ? { signal: q.signal } : {}),
  });

  app.post<IdParams>('/containers/:id/stop', async (req, reply) => {
    await containers.stop(req.params.id, stopOptions(query(req)));
    return reply.code(204).send();
  });

  app.post<IdParams>('/containers/:id/restart', async (req, reply) => {
    await containers.restart(req.params.id, stopOptions(query(req)));
    return reply.code(204).send();
  });

  app.post<IdParams>('/containers/:id/kill', async (req, reply) => {
    await containers.kill(req.params.id, query(req).signal || 'SIGKILL');
    return reply.code(204).send();
  });

  app.post<IdParams>('/containers/:id/pause', async (req, reply) => {
    await containers.pause(req.params.id);
    return reply.code(204).send();
  });

  app.post<IdParams>('/containers/:id/unpause', async (req, reply) => {
    await containers.unpause(req.params.id);
    return reply.code(204).send();
  });

  app.post<IdParams>('/containers/:id/rename', async (req, reply) => {
    containers.rename(req.params.id, query(req).name ?? '');
    return reply.code(204).send();
  });

  // `?link=1` removes a link, not a container. A link's name has a slash
  // (/<parent>/<alias>; `docker rm --link web/db` sends it in the path), which
  // dockerd's {name:.*} takes: so does the wildcard route.
  const remove = async (ref: string, q: Record<string, string | undefined>) => {
    if (boolValue(q.link)) containers.removeLink(ref);
    else await containers.remove(ref, { force: boolValue(q.force), volumes: boolValue(q.v) });
  };
  app.delete<IdParams>('/containers/:id', async (req, reply) => {
    await remove(req.params.id, query(req));
    return reply.code(204).send();
  });
  app.delete<{ Params: { '*': string } }>('/containers/*', async (req, reply) => {
    await remove(req.params['*'], query(req));
    return reply.code(204).send();
  });

  // dockerd answers the headers at once and the body when the condition is met.
  app.post<IdParams>('/containers/:id/wait', async (req, reply) => {
    const gone = new AbortController();
    const result = containers.wait(req.params.id, query(req).condition || 'not-running', gone.signal);
    reply.hijack();
    closeOnShutdown(req.raw.socket);
    const res = reply.raw;
    // A client that goes away takes its wait with it (nothing waits on for it until the exit).
    res.once('close', () => gone.abort());
    res.writeHead(200, { ...COMMON_HEADERS, 'Content-Type': 'application/json' });
    res.flushHeaders();
    const r = await result.catch(() => null);
    if (!r) return;
    res.end(`${JSON.stringify(versionBelow(req.apiVersion, '1.30') ? { StatusCode: r.StatusCode } : r)}\n`);
  });

  app.get<IdParams>('/containers/:id/logs', async (req, reply) => {
    const q = query(req);
    const stdout = boolValue(q.stdout);
    const stderr = boolValue(q.stderr);
    if (!stdout && !stderr) throw invalidParameter('Bad parameters: you must choose at least one stream');
    const c = containers.get(req.params.id);
    const tty = c.config.Tty;
    const tail = q.tail === undefined || q.tail === 'all' || q.tail === '' ? undefined : intValue(q.tail, 'tail');
    const since = timeParam(q.since, 'since');
    const until = timeParam(q.until, 'until');
    const abort = new AbortController();
    const follow = boolValue(q.follow);
    const entries = containers.logBatches(c, {
      stdout,
      stderr,
      follow,
      signal: abort.signal,
      ...(tail !== undefined ? { tail } : {}),
      ...(since ? { since } : {}),
      ...(until ? { until } : {}),
    });
    reply.hijack();
    closeOnShutdown(req.raw.socket);
    const res = reply.raw;
    let ended = false;
    res.on('close', () => ended || abort.abort());
    res.writeHead(200, { ...COMMON_HEADERS, 'Content-Type': streamContentType(tty, req.apiVersion, versionBelow) });
    // A follower learns at once that its stream is open; a read of the log so far sends the
    // headers with its first bytes, in one write.
    if (follow) res.flushHeaders();
    try {
      await writeOutput(res, entries, { tty, timestamps: boolValue(q.timestamps), end: true });
    } catch (e) {
      req.log.warn({ err: e }, 'log stream failed');
    }
    ended = true;
  });

  app.post<IdParams>('/containers/:id/attach', async (req, reply) => {
    const q = query(req);
    const session = containers.attach(req.params.id, {
      logs: boolValue(q.logs),
      stream: boolValue(q.stream),
      stdin: boolValue(q.stdin),
      stdout: boolValue(q.stdout),
      stderr: boolValue(q.stderr),
      ...(q.detachKeys ? { detachKeys: q.detachKeys } : {}),
    });
    const sock = hijack(req, reply, streamContentType(session.tty, req.apiVersion, versionBelow));
    await runSession(req, sock, session);
  });

  // Attach over a WebSocket (dockerd's wsContainersAttach): every stream below API 1.42,
  // which brought stdin/stdout/stderr to it; text frames below 1.28, binary from then on.
  app.get<IdParams>('/containers/:id/attach/ws', async (req, reply) => {
    const q = query(req);
    const every = versionBelow(req.apiVersion, '1.42');
    const session = containers.attach(req.params.id, {
      logs: boolValue(q.logs),
      stream: boolValue(q.stream),
      stdin: every || boolValue(q.stdin),
      stdout: every || boolValue(q.stdout),
      stderr: every || boolValue(q.stderr),
      ...(q.detachKeys ? { detachKeys: q.detachKeys } : {}),
    });
    let head: string;
    try {
      head = acceptHead(req);
    } catch (e) {
      session.close();
      throw e;
    }
    const sock = takeOver(req, reply, head);
    await runWebSocketSession(req, sock, session, versionBelow(req.apiVersion, '1.28') ? OP_TEXT : OP_BINARY);
  });

  app.post<IdParams>('/containers/:id/resize', async (req, reply) => {
    const q = query(req);
    await containers.resize(req.params.id, intValue(q.h, 'h') ?? 0, intValue(q.w, 'w') ?? 0);
    return reply.code(200).send();
  });
}
