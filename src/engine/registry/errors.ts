// What registries answer when they refuse (the distribution spec's error codes),
// and how dockerd words those refusals for a pull (moby distribution/errors.go).
import { type EngineError, forbidden, notFound, unauthorized, unavailable } from '../../errors.js';
import { familiarName, familiarString, type Reference } from '../reference.js';
import { goOp, readBody, type HttpResponse } from './transport.js';
import { parseChallenges } from './challenge.js';

/** Messages distribution uses when a registry sends a code without one. */
const DEFAULT_MESSAGES: Record<string, string> = {
  UNKNOWN: 'unknown error',
  UNAUTHORIZED: 'authentication required',
  DENIED: 'requested access to the resource is denied',
  UNSUPPORTED: 'The operation is unsupported.',
  TOOMANYREQUESTS: 'too many requests',
  BLOB_UNKNOWN: 'blob unknown to registry',
  MANIFEST_UNKNOWN: 'manifest unknown',
  NAME_UNKNOWN: 'repository name not known to registry',
  NAME_INVALID: 'invalid repository name',
  MANIFEST_INVALID: 'manifest invalid',
};

export interface RegistryErrorEntry {
  code: string;
  message: string;
}

/** An HTTP answer from a registry or token server that says no. */
export class RegistryError extends Error {
  constructor(
    readonly status: number,
    /** The spec's `errors` array (first one is what counts, as for dockerd); empty when the body had none. */
    readonly errors: RegistryErrorEntry[],
    readonly statusText = '',
  ) {
    super(errors[0] ? errcodeText(errors[0]) : `received unexpected HTTP status: ${status} ${statusText}`.trimEnd());
    this.name = 'RegistryError';
  }

  get code(): string | undefined {
    return this.errors[0]?.code;
  }

  get detail(): string {
    return this.errors[0]?.message ?? '';
  }
}

/** Go errcode's Error(): the code in lower case with spaces, then the message. */
function errcodeText(e: RegistryErrorEntry): string {
  return `${e.code.toLowerCase().replace(/_/g, ' ')}: ${e.message}`;
}

const entry = (code: string, message?: string): RegistryErrorEntry => ({
  code,
  message: message || DEFAULT_MESSAGES[code] || '',
});

/** Bearer `error=` values (RFC 6750 §3.1) that distribution turns into error codes. */
const BEARER_ERRORS: Record<string, string> = { invalid_token: 'UNAUTHORIZED', insufficient_scope: 'DENIED' };

/**
 * Reads a refusal the way distribution's client does: the Bearer challenge's
 * `error` first (Docker Hub answers an unknown or private repository with
 * `insufficient_scope`), then the body's `errors`, then the legacy `details`.
 */
export async function registryErrorFrom(res: HttpResponse): Promise<RegistryError> {
  let body: Buffer = Buffer.alloc(0);
  try {
    body = await readBody(res, 64 * 1024, 'error response');
  } catch {
    // An unreadable or huge error body still leaves the status to go by.
  }
  const errors = bearerError(res) ?? bodyErrors(res.status, body);
  return new RegistryError(res.status, errors, res.statusText);
}

function bearerError(res: HttpResponse): RegistryErrorEntry[] | undefined {
  if (res.status < 400 || res.status >= 500) return undefined;
  for (const c of parseChallenges(res.authenticate)) {
    const code = c.scheme === 'bearer' ? BEARER_ERRORS[c.params.error ?? ''] : undefined;
    if (code) return [entry(code, c.params.error_description)];
  }
  return undefined;
}

function bodyErrors(status: number, body: Buffer): RegistryErrorEntry[] {
  let doc: unknown;
  try {
    doc = JSON.parse(body.toString('utf8'));
  } catch {
    doc = undefined;
  }
  const d = (doc ?? {}) as { errors?: unknown; details?: unknown };
  if (typeof d.details === 'string' && d.details) {
    return [entry(status === 401 ? 'UNAUTHORIZED' : status === 429 ? 'TOOMANYREQUESTS' : 'UNKNOWN', d.details)];
  }
  const list = Array.isArray(d.errors) ? d.errors : [];
  const errors = list
    .filter((e): e is { code?: unknown; message?: unknown } => typeof e === 'object' && e !== null)
    .map((e) =>
      entry(
        typeof e.code === 'string' && e.code ? e.code.toUpperCase() : 'UNKNOWN',
        typeof e.message === 'string' ? e.message : undefined,
      ),
    );
  if (errors.length) return errors;
  // No usable body: distribution still calls a bare 401 "unauthorized" and a bare 429 "too many requests".
  if (status === 401) return [entry('UNAUTHORIZED')];
  if (status === 429) return [entry('TOOMANYREQUESTS')];
  return [];
}

export interface RequestContext {
  method: string;
  url: URL;
}

/**
 * A registry refusal during a pull, worded as dockerd words it:
 *   DENIED            → 404 pull access denied for x, repository does not exist or may require 'docker login': denied: …
 *   MANIFEST_UNKNOWN  → 404 manifest for x:tag not found: manifest unknown: …
 *   NAME_UNKNOWN      → 404 repository x not found: name unknown: …
 *   UNAUTHORIZED      → 401 Get "url": unauthorized: …   (dockerd drops the URL; it says which registry refused)
 */
export function pullError(err: RegistryError, ref: Reference, ctx: RequestContext): EngineError {
  const text = err.message;
  switch (err.code) {
    case 'DENIED':
      return notFound(
        `pull access denied for ${familiarName(ref)}, repository does not exist or may require 'docker login': ${text}`,
      );
    case 'MANIFEST_UNKNOWN':
      return notFound(`manifest for ${familiarString(ref)} not found: ${text}`);
    case 'NAME_UNKNOWN':
      return notFound(`repository ${familiarName(ref)} not found: ${text}`);
    default:
      return statusError(err, ctx);
  }
}

/** A refusal that has no pull-specific wording, by HTTP status. */
export function statusError(err: RegistryError, ctx: RequestContext): EngineError {
  const where = `${goOp(ctx.method)} "${ctx.url.href}": ${err.message}`;
  if (err.code === 'UNAUTHORIZED' || err.status === 401) return unauthorized(where);
  if (err.status === 403) return forbidden(where);
  if (err.status === 404) return notFound(where);
  // 5xx, 429 and the unexpected: the registry cannot serve us now.
  return unavailable(where, err);
}
