// The root pino logger. JSON on stderr; pretty when stderr is a TTY.
// Credentials (X-Registry-Auth, Authorization) are redacted wherever they appear.
import { pino, type Logger, type LevelWithSilent } from 'pino';
import pretty from 'pino-pretty';

export type { Logger };

export const REDACT = [
  'req.headers["x-registry-auth"]',
  'req.headers.authorization',
  'headers["x-registry-auth"]',
  'headers.authorization',
  'auth',
  'password',
  'identitytoken',
  'registrytoken',
  '*.password',
  '*.auth',
  '*.identitytoken',
  '*.registrytoken',
];

/** The root logger's own stderr writer, when it has one (not a transport or a caller's stream). */
let stderrDestination: ReturnType<typeof pino.destination> | undefined;

export function createLogger(level: LevelWithSilent, destination?: pino.DestinationStream): Logger {
  const options: pino.LoggerOptions = {
    level,
    redact: { paths: REDACT, censor: '[redacted]' },
    base: { pid: process.pid },
  };
  if (destination) return pino(options, destination);
  // In this process, not as a pino transport: a transport runs a worker thread from
  // pino's own files, which the single-file bundle does not have (berthd on a
  // terminal ended at once with status 70, saying nothing).
  if (process.stderr.isTTY) return pino(options, pretty({ destination: 2, sync: true }));
  stderrDestination = pino.destination({ dest: 2, sync: false });
  return pino(options, stderrDestination);
}

/** Writes out what the logger still buffers, before a process exit that cannot wait. */
export function flushLogsSync(): void {
  try {
    stderrDestination?.flushSync();
  } catch {
    // stderr gone: nothing more can be said
  }
}
