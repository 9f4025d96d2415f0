// berthd's lifecycle: lock the data root, open the engine, listen on every host,
// and shut down cleanly on SIGTERM/SIGINT (containers keep running under conmon).
import {
  chmodSync,
  chownSync,
  closeSync,
  existsSync,
  mkdirSync,
  openSync,
  readFileSync,
  rmSync,
  writeFileSync,
  ftruncateSync,
  writeSync,
} from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import type { FastifyInstance } from 'fastify';
import { openFront, type Front } from './api/front.js';
import type { Activity } from './api/server.js';
import { claimBridge } from './bridge-claim.js';
import { buildEngine } from './compose.js';
import { idleTrim } from './idle.js';
import { buildLazySchemas } from './lazy-schema.js';
import { parseHost, type Config, type Listen } from './config.js';
import { realtimeBudgetProblem } from './engine/containers/spec/realtime.js';
import { lockExclusive } from './engine/os/files.js';
import type { Logger } from './log.js';

export class StartError extends Error {}

/** When no request comes, how long the work that waits for the first answer waits. */
const FINISH_START_MS = 500;

export interface Daemon {
  /** The requests being served now, for the log of a fault that stops the daemon; none before the API is built. */
  activity(): Activity[];
  stop(): Promise<void>;
}

/**
 * Runs `work` once the first request has been answered, or after FINISH_START_MS
 * when none comes: a client waiting for the daemon to come up (polling /_ping)
 * is answered before it, and a request that needs what it makes makes it itself.
 */
function afterFirstAnswer(server: net.Server, work: () => void): void {
  let done = false;
  const run = () => {
    if (done) return;
    done = true;
    clearTimeout(timer);
    server.removeListener('request', first);
    work();
  };
  const first = (_req: unknown, res: NodeJS.EventEmitter) => {
    server.removeListener('request', first);
    res.once('close', () => setImmediate(run));
  };
  server.prependListener('request', first);
  const timer = setTimeout(run, FINISH_START_MS).unref();
}

/** Holds an exclusive flock on <data-root>/berthd.lock for the life of the process. */
function lockDataRoot(dataRoot: string): number {
  mkdirSync(dataRoot, { recursive: true, mode: 0o710 });
  const file = path.join(dataRoot, 'berthd.lock');
  const fd = openSync(file, 'a+', 0o600);
  try {
    lockExclusive(fd);
  } catch (e) {
    closeSync(fd);
    if ((e as NodeJS.ErrnoException).code !== 'EWOULDBLOCK') throw e;
    const holder = readFileSync(file, 'utf8').trim();
    throw new StartError(
      `another berthd (pid ${holder || 'unknown'}) is already using data root ${dataRoot}; stop it first or choose another --data-root`,
    );
  }
  ftruncateSync(fd, 0);
  writeSync(fd, `${process.pid}\n`, 0);
  return fd;
}

/** The default bridge, this daemon's alone while it runs (bridge-claim.ts); null without one. */
async function claimDefaultBridge(config: Config): Promise<net.Server | null> {
  const bridge = config.network.bridge;
  if (bridge === null) return null;
  const claim = await claimBridge(bridge, config.dataRoot);
  if ('server' in claim) return claim.server;
  throw new StartError(
    `another berthd (${claim.holder}) is already using bridge ${bridge}; stop it first, or give this one a bridge of its own with --bridge (or --bridge none)`,
  );
}

/** True when something answers on the unix socket at `p`. */
function socketAnswers(p: string): Promise<boolean> {
  return new Promise((resolve) => {
    const s = net.connect(p);
    s.once('connect', () => {
      s.destroy();
      resolve(true);
    });
    s.once('error', () => resolve(false));
  });
}

function groupId(name: string): number | null {
  try {
    const line = readFileSync('/etc/group', 'utf8')
      .split('\n')
      .find((l) => l.split(':')[0] === name);
    return line ? Number(line.split(':')[2]) : null;
  } catch {
    return null;
  }
}

async function prepareUnixSocket(p: string): Promise<void> {
  mkdirSync(path.dirname(p), { recursive: true, mode: 0o755 });
  if (!existsSync(p)) return;
  if (await socketAnswers(p)) {
    throw new StartError(`another daemon is already serving on ${p}; stop it first or choose another --host`);
  }
  rmSync(p, { force: true }); // stale socket left by a daemon that died
}

/** Socket mode 0660, owned by root and the configured group (when it exists). */
function secureSocket(p: string, group: string, logger: Logger): void {
  chmodSync(p, 0o660);
  const gid = groupId(group);
  if (gid !== null) chownSync(p, 0, gid);
  else logger.debug({ group }, 'socket group not found; socket stays root-only');
}

/** Listens on `l`: the front's own server for the first host; a server of its own that feeds the front its connections for each other one. */
function listen(front: Front, l: Listen, first: boolean): Promise<net.Server | null> {
  const opts = l.kind === 'unix' ? { path: l.path } : { host: l.host, port: l.port };
  const server = first ? front.server : net.createServer((sock) => front.server.emit('connection', sock));
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts, () => {
      server.removeListener('error', reject);
      resolve(first ? null : server);
    });
  });
}

export async function startDaemon(config: Config, logger: Logger): Promise<Daemon> {
  const listens = config.hosts.map(parseHost);
  const realtime = realtimeBudgetProblem({ period: config.cpuRtPeriod, runtime: config.cpuRtRuntime });
  if (realtime) throw new StartError(realtime);
  const lockFd = lockDataRoot(config.dataRoot);
  const bridgeClaim = await claimDefaultBridge(config);
  mkdirSync(config.execRoot, { recursive: true, mode: 0o700 });
  for (const l of listens) if (l.kind === 'unix') await prepareUnixSocket(l.path);

  const extra: net.Server[] = [];
  const engine = await buildEngine(config, logger);
  // Memory an idle daemon does not use goes back once requests stop coming (idle.ts).
  const idle = idleTrim(() => engine.releaseMemory(), logger);
  // The API is built after the first answer, or when a request needs it (front.ts). Its module
  // is imported here, not above: the bundle evaluates it, Fastify included, only then.
  let api: Promise<FastifyInstance> | undefined;
  let app: FastifyInstance | undefined;
  const openApi = () =>
    (api ??= import('./api/server.js')
      .then((m) => m.openApi(front, engine.engine, logger, { activity: idle.touch }))
      .then((a) => (app = a)));
  const front = openFront({ activity: idle.touch, onHold: () => void openApi() });
  try {
    for (const [i, l] of listens.entries()) {
      const s = await listen(front, l, i === 0);
      if (s) extra.push(s);
      if (l.kind === 'unix') secureSocket(l.path, config.group, logger);
    }
  } catch (e) {
    for (const s of extra) s.close();
    await front.close();
    await engine.close();
    throw new StartError(`cannot listen: ${(e as Error).message}`);
  }
  // Listening servers can still fail to accept (EMFILE when descriptors run out): that refuses
  // one connection, it does not end the daemon.
  for (const s of [front.server, ...extra])
    s.on('error', (err) => logger.error({ err }, 'accepting a connection failed'));
  if (config.pidfile) writeFileSync(config.pidfile, `${process.pid}\n`);
  logger.info({ hosts: config.hosts, dataRoot: config.dataRoot }, 'berthd is serving');
  // A daemon without its API cannot serve: a failure to build it is left to main.ts's fault policy.
  afterFirstAnswer(front.server, () =>
    openApi().then(() =>
      Promise.all([engine.afterServing(), buildLazySchemas()]).catch((err) =>
        logger.warn({ err }, 'finishing start-up'),
      ),
    ),
  );

  let stopping: Promise<void> | undefined;
  const stop = () =>
    (stopping ??= (async () => {
      logger.info('shutting down');
      idle.close();
      for (const s of extra) s.close();
      // One being built is finished first, so that it can be closed.
      await (await api?.catch(() => undefined))?.close(); // Fastify answers 503 from now on; hijacked connections end
      await front.close(); // stops accepting; in-flight requests finish
      await engine.close();
      for (const l of listens) if (l.kind === 'unix') rmSync(l.path, { force: true });
      if (config.pidfile) rmSync(config.pidfile, { force: true });
      bridgeClaim?.close();
      closeSync(lockFd);
    })());
  return { activity: () => app?.activity() ?? [], stop };
}
