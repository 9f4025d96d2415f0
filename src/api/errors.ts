// THE one place where errors become HTTP statuses and Docker's {"message"} body.
import type { FastifyError } from 'fastify';
import { ZodError } from 'zod';
import { EngineError, type Kind } from '../errors.js';

const STATUS: Record<Kind, number> = {
  invalid: 400,
  'not-found': 404,
  conflict: 409,
  'not-modified': 304,
  'too-large': 413,
  unauthorized: 401,
  forbidden: 403,
  unavailable: 503,
  'not-implemented': 501,
  system: 500,
};

export interface HttpError {
  status: number;
  message: string;
}

/** Maps anything thrown by a handler to a status and a message for the client. */
export function toHttpError(err: unknown): HttpError {
  if (err instanceof EngineError) return { status: STATUS[err.kind], message: err.message };
  if (err instanceof ZodError) return { status: 400, message: zodMessage(err) };
  const fe = err as Partial<FastifyError>;
  if (typeof fe.code === 'string' && fe.code.startsWith('FST_') && (fe.statusCode ?? 500) < 500) {
    return { status: 400, message: fe.message ?? 'bad request' };
  }
  return { status: 500, message: err instanceof Error ? err.message : String(err) };
}

/** A zod failure in words a person can act on: where, and what was expected. */
function zodMessage(err: ZodError): string {
  return err.issues
    .map((i) => {
      const where = i.path.length ? i.path.join('.') : 'body';
      return `invalid value for ${where}: ${i.message}`;
    })
    .join('; ');
}
