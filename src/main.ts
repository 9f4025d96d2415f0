#!/usr/bin/env node
// berthd: flags + daemon.json → Config, start the daemon, handle signals.
import { ConfigError, loadConfig, USAGE, VERSION } from './config.js';
import { startDaemon, StartError } from './daemon.js';
import { createLogger, flushLogsSync, type Logger } from './log.js';
import type { Activity } from './api/server.js';

/** The exit status after a fault berthd cannot recover from (sysexits' EX_SOFTWARE). */
const EXIT_FAULT = 70;

/**
 * The process-level policy for a fault no request handled: an exception
 * thrown from a callback, or a rejected promise nobody awaited. Such a fault
 * is a bug in berthd, never a client's or a registry's doing (those end the
 * request they came with), and after it berthd's memory may no longer agree
 * with itself. So berthd does not carry on: it logs the fault with the
 * requests in flight, and exits. Nothing is lost by that: the database is
 * written in transactions (WAL), containers keep running under conmon, and
 * the next start reconciles what happened meanwhile.
 */
function exitOnFaults(logger: Logger, activity: () => Activity[]): void {
  let exiting = false;
  const fatal = (err: unknown, origin: string) => {
    if (exiting) return;
    exiting = true;
    let inflight: Activity[] = [];
    try {
      inflight = activity();
    } catch {
      // the fault may be in what lists them
    }
    logger.fatal(
      { err, origin, inflight },
      'berthd stops on an unhandled fault (containers keep running; the next start reconciles)',
    );
    flushLogsSync();
    process.exit(EXIT_FAULT);
  };
  process.on('uncaughtException', (err, origin) => fatal(err, origin));
  process.on('unhandledRejection', (reason) => fatal(reason, 'unhandledRejection'));
}

async function main(): Promise<number> {
  let parsed: ReturnType<typeof loadConfig>;
  try {
    parsed = loadConfig(process.argv.slice(2));
  } catch (e) {
    process.stderr.write(`berthd: ${(e as Error).message}\n`);
    if (!(e instanceof ConfigError)) process.stderr.write(USAGE);
    return 1;
  }
  if (parsed.help) {
    process.stdout.write(USAGE);
    return 0;
  }
  if (parsed.version) {
    process.stdout.write(`berthd version ${VERSION}\n`);
    return 0;
  }
  const logger = createLogger(parsed.config.logLevel);
  let daemon: Awaited<ReturnType<typeof startDaemon>> | undefined;
  exitOnFaults(logger, () => daemon?.activity() ?? []);
  try {
    daemon = await startDaemon(parsed.config, logger);
  } catch (e) {
    const msg = e instanceof StartError ? e.message : ((e as Error).stack ?? String(e));
    process.stderr.write(`berthd: ${msg}\n`);
    return 1;
  }
  const running = daemon;
  await new Promise<void>((resolve) => {
    const onSignal = (sig: NodeJS.Signals) => {
      logger.info({ signal: sig }, 'signal received');
      running.stop().then(resolve, (e) => {
        logger.error({ err: e }, 'error during shutdown');
        resolve();
      });
    };
    process.once('SIGTERM', onSignal);
    process.once('SIGINT', onSignal);
  });
  logger.flush?.();
  return 0;
}

main().then(
  (code) => {
    process.exitCode = code;
    // Give the async log destination a moment, then leave even if a stray handle lingers.
    setTimeout(() => process.exit(code), 50).unref();
  },
  (e) => {
    process.stderr.write(`berthd: ${(e as Error).stack ?? e}\n`);
    process.exit(1);
  },
);
