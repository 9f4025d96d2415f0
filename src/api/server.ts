// The Fastify app: version prefix, common headers, Docker-shaped errors, routes.
// It serves the front's server (front.ts), which listens before the app is built.
import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance, type FastifyRequest } from 'fastify';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Engine } from '../engine/index.js';
import type { Logger } from '../log.js';
import { toHttpError } from './errors.js';
import { fastLane, jsonBody } from './fastlane.js';
import type { Front } from './front.js';
import { lazyChildLogger } from './lazylog.js';
import { COMMON_HEADERS } from './headers.js';
import { networkRoutes } from './routes/networks.js';
import { archiveRoutes } from './routes/archive.js';
import { buildRoutes } from './routes/build.js';
import { buildkitRoutes } from './routes/buildkit.js';
import { dfRoutes } from './routes/df.js';
import { volumeRoutes } from './routes/volumes.js';
import { commitRoutes } from './routes/commit.js';
import { containerRoutes } from './routes/containers.js';
import { eventRoutes } from './routes/events.js';
import { execRoutes } from './routes/exec.js';
import { imageRoutes } from './routes/images.js';
import { pluginRoutes } from './routes/plugins.js';
import { swarmRoutes } from './routes/swarm.js';
import { systemRoutes } from './routes/system.js';
import { closeHijacked } from './streams/hijack.js';
import { checkVersion, compareVersions, MAX_API_VERSION, splitVersion } from './version.js';

declare module 'fastify' {
  interface FastifyRequest {
    /** The API version the client asked for, or the maximum when unversioned. */
    apiVersion: string;
  }
  interface FastifyInstance {
    /** The requests being served now (streams and hijacked connections included), oldest first. */
    activity(): Activity[];
  }
}

/** A request in flight, as a fatal fault's log names it. */
export interface Activity {
  reqId: string;
  method: string;
  url: string;
  /** How long it has been running. */
  ms: number;
}

const REQUESTED_VERSION = Symbol('berth.requestedVersion');
type VersionedMessage = IncomingMessage & { [REQUESTED_VERSION]?: string | null };

function noSchemas(): never {
  throw new Error('berth routes carry no Fastify schemas');
}

export interface AppOptions {
  /** Called as each request begins and as it ends (its response sent, or its connection gone). */
  activity?: () => void;
}

/**
 * Builds the app on the front's server and hands it the front's requests, the
 * fast lane in front of Fastify's handler, once the app is ready.
 */
export async function openApi(
  front: Front,
  engine: Engine,
  logger: Logger,
  o: AppOptions = {},
): Promise<FastifyInstance> {
  const activity = o.activity ?? (() => undefined);
  let fastify: ((req: IncomingMessage, res: ServerResponse) => void) | undefined;
  const app = Fastify({
    serverFactory: (handler) => {
      fastify = handler;
      return front.server;
    },
    loggerInstance: logger.child({ component: 'api' }) as FastifyBaseLogger,
    // Requests are logged by our own onRequest hook, at debug.
    logController: new LogController({ disableRequestLogging: true }),
    exposeHeadRoutes: false,
    // One route table for /v1.NN/path and /path: strip the prefix, keep the version.
    rewriteUrl: (raw) => {
      const { version, path } = splitVersion(raw.url ?? '/');
      (raw as VersionedMessage)[REQUESTED_VERSION] = version;
      return path;
    },
    routerOptions: { ignoreTrailingSlash: true, maxParamLength: 4096 },
    return503OnClosing: true,
    // No bodyLimit: it bounds only Fastify's own parsers, and bodies come to
    // routes as streams (JSON is capped where it is read, wire/forms.ts).
    // The front answers requests Node cannot parse, before the app and after it.
    clientErrorHandler: () => undefined,
    // No route has a Fastify schema (bodies are parsed in wire/forms.ts): without these,
    // Fastify loads Ajv and fast-json-stringify as it starts (~8 ms before the first answer).
    schemaController: { compilersFactory: { buildValidator: noSchemas, buildSerializer: noSchemas } },
  });

  app.setChildLoggerFactory(lazyChildLogger);
  // The most frequent small GETs are answered ahead of Fastify (fastlane.ts).
  if (!fastify) throw new Error('api: Fastify made no request handler');
  const lane = fastLane(fastify, engine, app.log as Logger, activity);

  // Bodies are handed to routes as streams and parsed one way only (wire/forms.ts),
  // so that JSON, tar uploads and empty POSTs all follow dockerd's rules.
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', (_req, payload, done) => done(null, payload));

  // A JSON answer ends with a newline, as dockerd's encoder writes each one: the
  // docker CLI's `stats --no-stream` read a single sample without it as EOF.
  app.setReplySerializer(jsonBody);

  app.decorateRequest('apiVersion', MAX_API_VERSION);
  // What is in flight, for the log of a fault that stops the daemon (main.ts). A response's
  // 'close' comes when it has been sent or its connection has gone, hijacked ones included.
  const inflight = new Map<FastifyRequest, number>();
  app.decorate('activity', () =>
    [...inflight].map(([req, since]) => ({
      reqId: String(req.id),
      method: req.method,
      url: req.url,
      ms: Date.now() - since,
    })),
  );
  // Hooks with callbacks, not async: each async hook is a promise and a turn of the
  // microtask queue on every request, the smallest's cost included.
  app.addHook('onRequest', (req, reply, done) => {
    activity();
    inflight.set(req, Date.now());
    reply.raw.once('close', () => {
      inflight.delete(req);
      activity();
    });
    reply.headers(COMMON_HEADERS);
    const v = (req.raw as VersionedMessage)[REQUESTED_VERSION];
    if (v) {
      req.apiVersion = v;
      try {
        checkVersion(v);
      } catch (e) {
        done(e as Error);
        return;
      }
    }
    req.log.debug({ method: req.method, url: req.url, version: req.apiVersion }, 'request');
    done();
  });
  // dockerd's JSON is `application/json` with no charset, and the Go client reads an error's
  // message only under exactly that type (else it prints the raw body).
  app.addHook('onSend', (_req, reply, payload, done) => {
    const type = reply.getHeader('content-type');
    if (typeof type === 'string' && type.startsWith('application/json;'))
      reply.header('content-type', 'application/json');
    done(null, payload);
  });
  // Attached clients hold hijacked connections that would keep a shutdown waiting.
  app.addHook('preClose', async () => {
    lane.close();
    closeHijacked();
  });

  app.setErrorHandler((err, req, reply) => {
    const { status, message } = toHttpError(err);
    if (status >= 500) req.log.error({ err, url: req.url }, 'request failed');
    else req.log.debug({ status, message, url: req.url }, 'request refused');
    if (status === 304) return reply.code(304).send();
    // dockerd answers in plain text to clients older than API 1.23.
    if (compareVersions(req.apiVersion, '1.23') < 0) {
      return reply.code(status).type('text/plain; charset=utf-8').send(`${message}\n`);
    }
    // A stream that failed before its first byte leaves the route's content type (a tar's) on the reply.
    return reply.code(status).type('application/json').send({ message });
  });
  app.setNotFoundHandler((_req, reply) => reply.code(404).send({ message: 'page not found' }));

  systemRoutes(app, engine);
  imageRoutes(app, engine);
  containerRoutes(app, engine);
  execRoutes(app, engine);
  commitRoutes(app, engine);
  buildRoutes(app, engine);
  buildkitRoutes(app, engine);
  archiveRoutes(app, engine);
  dfRoutes(app, engine);
  networkRoutes(app, engine);
  volumeRoutes(app, engine);
  eventRoutes(app, engine);
  swarmRoutes(app);
  pluginRoutes(app, engine);
  await app.ready();
  front.attach(lane.handler);
  return app;
}
