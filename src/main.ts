#!/usr/bin/env node
// berthd: flags + daemon.json → Config, start the daemon, handle signals.
import { ConfigError, loadConfig, USAGE, VERSION } from './config.js';
import { startDaemon, StartError } from './daemon.js';
import { createLogger } from './log.js';

async function main(): Promise<number> {
  let parsed;
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
  let daemon;
  try {
    daemon = await startDaemon(parsed.config, logger);
  } catch (e) {
    const msg = e instanceof StartError ? e.message : (e as Error).stack ?? String(e);
    process.stderr.write(`berthd: ${msg}\n`);
    return 1;
  }
  await new Promise<void>((resolve) => {
    const onSignal = (sig: NodeJS.Signals) => {
      logger.info({ signal: sig }, 'signal received');
      daemon.stop().then(resolve, (e) => {
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
