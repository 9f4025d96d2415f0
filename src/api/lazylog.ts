// req.log, made when first used. Fastify gives every request a child logger with
// its id, and pino's child() copies the bindings and sets up the redaction each
// time, though most requests log nothing at the daemon's usual level. This child
// is made only when a request logs at a level that is on.
import type { FastifyBaseLogger } from 'fastify';
import type { Bindings, ChildLoggerOptions, Level, Logger } from 'pino';

type Log = (...args: unknown[]) => void;

class LazyChild {
  private made: Logger | undefined;

  constructor(
    private readonly parent: Logger,
    private readonly bindings: Bindings,
  ) {}

  private get logger(): Logger {
    this.made ??= this.parent.child(this.bindings);
    return this.made;
  }

  private log(level: Level, args: unknown[]): void {
    if ((this.made ?? this.parent).isLevelEnabled(level)) (this.logger[level] as Log)(...args);
  }

  get level(): string {
    return this.made?.level ?? this.parent.level;
  }

  set level(level: string) {
    this.logger.level = level;
  }

  fatal(...args: unknown[]): void {
    this.log('fatal', args);
  }
  error(...args: unknown[]): void {
    this.log('error', args);
  }
  warn(...args: unknown[]): void {
    this.log('warn', args);
  }
  info(...args: unknown[]): void {
    this.log('info', args);
  }
  debug(...args: unknown[]): void {
    this.log('debug', args);
  }
  trace(...args: unknown[]): void {
    this.log('trace', args);
  }
  silent(): void {}

  child(bindings: Bindings, options?: ChildLoggerOptions): FastifyBaseLogger {
    return this.logger.child(bindings, options) as FastifyBaseLogger;
  }
}

/** A Fastify child logger factory (app.setChildLoggerFactory) whose children are made on first use. */
export const lazyChildLogger = (parent: FastifyBaseLogger, bindings: Bindings): FastifyBaseLogger =>
  new LazyChild(parent as Logger, bindings) as unknown as FastifyBaseLogger;
