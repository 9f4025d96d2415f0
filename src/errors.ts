// Typed engine errors. The engine throws these with dockerd's wording; only
// src/api/errors.ts knows which HTTP status each kind becomes.

export type Kind =
  | 'invalid'
  | 'not-found'
  | 'conflict'
  | 'not-modified'
  | 'too-large'
  | 'unauthorized'
  | 'forbidden'
  | 'unavailable'
  | 'not-implemented'
  | 'system';

export class EngineError extends Error {
  constructor(
    readonly kind: Kind,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = 'EngineError';
  }
}

export const isEngineError = (e: unknown, kind?: Kind): e is EngineError =>
  e instanceof EngineError && (kind === undefined || e.kind === kind);

export const invalidParameter = (message: string, cause?: unknown) => new EngineError('invalid', message, { cause });
export const notFound = (message: string) => new EngineError('not-found', message);
export const conflict = (message: string) => new EngineError('conflict', message);
export const notModified = (message = '') => new EngineError('not-modified', message);
export const payloadTooLarge = (message: string) => new EngineError('too-large', message);
export const unauthorized = (message: string) => new EngineError('unauthorized', message);
export const forbidden = (message: string) => new EngineError('forbidden', message);
export const unavailable = (message: string, cause?: unknown) => new EngineError('unavailable', message, { cause });
export const notImplemented = (message: string) => new EngineError('not-implemented', message);
export const systemError = (message: string, cause?: unknown) => new EngineError('system', message, { cause });

// Conditions with dockerd's exact text.
export const noSuchContainer = (ref: string) => notFound(`No such container: ${ref}`);
export const noSuchImage = (ref: string) => notFound(`No such image: ${ref}`);
export const noSuchExec = (ref: string) => notFound(`No such exec instance: ${ref}`);
export const noSuchPlugin = (ref: string) => notFound(`plugin ${JSON.stringify(ref)} not found`);

/** True for a full disk (ENOSPC, whatever system call met it). */
export const isNoSpace = (e: unknown): boolean => (e as { code?: unknown } | null)?.code === 'ENOSPC';
/** A full disk in the words dockerd's clients see (Go's os errors): "write <path>: no space left on device". */
export const noSpace = (file: string, cause?: unknown) => systemError(`write ${file}: no space left on device`, cause);

/** The message of anything thrown, for logs and in-band stream errors. */
export const messageOf = (e: unknown): string => (e instanceof Error ? e.message : String(e));
