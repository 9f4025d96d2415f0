// The fast lane: the few GET requests clients send most (`/_ping` before each
// command, `docker ps`, `docker images`, inspects), answered straight from
// Node's request event, without Fastify's per-request machinery (its Request
// and Reply, hook runners, child logger, routing and serialisation steps),
// a good part of such a request's cost (docs/decisions/performance.md, "Small requests").
// The lane answers only the plain case: a GET (or HEAD /_ping) without a body,
// a path and a query of plain characters, a version in range, an answer that
// is computed without waiting and without an error. Everything else, errors
// included, goes on to Fastify, which computes the answer again and gives it
// in the usual way: a lane answer is the one the Fastify route would give,
// byte for byte (the routes' own functions compute it;
// test/api/fastlane.test.ts compares them).
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Engine } from '../engine/index.js';
import type { Logger } from '../log.js';
import { COMMON_HEADERS } from './headers.js';
import { lowerCased, plainGet, sendPing } from './ping.js';
import { containerSummaries, inspectWithoutSizes, listedContainers } from './routes/containers.js';
import { imageSummaries } from './routes/images.js';
import { imageInspect } from './wire/images.js';
import { boolValue, type Query } from './wire/forms.js';

/** Every JSON answer's body: dockerd's encoder ends each with a newline (server.ts's reply serializer). */
export const jsonBody = (payload: unknown): string => `${JSON.stringify(payload)}\n`;

/** A lane route's answer: the payload, or PASS to leave the request to Fastify. */
const PASS = Symbol('pass');
type Answer = (engine: Engine, q: Query, apiVersion: string, name: string) => unknown;

/**
 * The JSON routes of the lane, by unversioned path. The names they take are those
 * the routes would find unchanged (find-my-way decodes `%`, which is left out).
 */
const ROUTES: [RegExp, Answer][] = [
  [/^\/containers\/json$/, (e, q, v) => (boolValue(q.size) ? PASS : containerSummaries(e, listedContainers(e, q), v))],
  [
    /^\/containers\/([A-Za-z0-9_.-]+)\/json$/,
    (e, q, v, id) => (boolValue(q.size) ? PASS : inspectWithoutSizes(e, e.containers.get(id), v)),
  ],
  // `manifests` reads each image's manifests, which waits on files.
  [/^\/images\/json$/, (e, q, v) => (boolValue(q.manifests) ? PASS : imageSummaries(e, q, v))],
  [
    /^\/images\/([A-Za-z0-9_.:@-][A-Za-z0-9_.:@/-]*)\/json$/,
    (e, _q, v, name) => imageInspect(e.images.inspect(name), v),
  ],
];

const COMMON = lowerCased(COMMON_HEADERS);

const PLAIN_QUERY = /^[A-Za-z0-9_.=&-]*$/;

/**
 * A query of plain characters, as Fastify's parser (fast-querystring) reads it;
 * undefined for anything else (escapes, `+`, repeated or empty parameters).
 */
function plainQuery(qs: string): Query | undefined {
  const q: Query = Object.create(null);
  if (qs === '') return q;
  if (!PLAIN_QUERY.test(qs)) return undefined;
  for (const part of qs.split('&')) {
    const eq = part.indexOf('=');
    const key = eq === -1 ? part : part.slice(0, eq);
    if (key === '' || key in q) return undefined;
    q[key] = eq === -1 ? '' : part.slice(eq + 1);
  }
  return q;
}

type Handler = (req: IncomingMessage, res: ServerResponse) => void;

export interface FastLane {
  /** Fastify's request handler with the lane in front of it. */
  handler: Handler;
  /** The app is closing: Fastify answers every request from now on (503 to new ones). */
  close(): void;
}

/**
 * Puts the lane in front of Fastify's request handler `fastify`. `activity`
 * is the one buildApp's onRequest hook calls; `log` is the API's logger.
 */
export function fastLane(fastify: Handler, engine: Engine, log: Logger, activity: () => void): FastLane {
  let closing = false;
  // What buildApp's onRequest hook does for the requests Fastify serves.
  const begin = (method: string, url: string, version: string) => {
    activity();
    if (log.isLevelEnabled('debug')) log.debug({ method, url, version, lane: true }, 'request');
  };

  const answer = (req: IncomingMessage, res: ServerResponse): boolean => {
    const get = closing ? undefined : plainGet(req);
    if (!get) return false;
    const { method, url, path, apiVersion } = get;
    if (path === '/_ping') {
      begin(method, url, apiVersion);
      sendPing(res, method);
      return true;
    }
    if (method !== 'GET') return false;
    for (const [pattern, route] of ROUTES) {
      const m = pattern.exec(path);
      if (!m) continue;
      const q = plainQuery(get.query);
      if (!q || path.includes('//')) return false;
      let body: string;
      try {
        const payload = route(engine, q, apiVersion, m[1] ?? '');
        if (payload === PASS) return false;
        body = jsonBody(payload);
      } catch {
        return false; // Fastify's route throws it again and answers it
      }
      begin(method, url, apiVersion);
      res.writeHead(200, {
        ...COMMON,
        'content-type': 'application/json',
        'content-length': String(Buffer.byteLength(body)),
      });
      res.end(body);
      return true;
    }
    return false;
  };

  return {
    handler: (req, res) => {
      if (!answer(req, res)) fastify(req, res);
    },
    close: () => {
      closing = true;
    },
  };
}
