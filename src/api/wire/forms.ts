// Query-string and body primitives with dockerd's leniency.
import type { FastifyRequest } from 'fastify';
import type { Readable } from 'node:stream';
import type { z } from 'zod';
import { invalidParameter, payloadTooLarge } from '../../errors.js';
import { foldFieldNames } from './fieldnames.js';
import { goBlank, goMore, goScan } from './gojson.js';

/** dockerd's BoolValue: everything but "", "0", "no", "false" and "none" is true. */
export function boolValue(v: unknown, dflt = false): boolean {
  if (v === undefined || v === null) return dflt;
  const s = String(v).trim().toLowerCase();
  return !(s === '' || s === '0' || s === 'no' || s === 'false' || s === 'none');
}

/** An integer query parameter; absent or empty gives the default. */
export function intValue(v: unknown, name: string, dflt: number): number;
export function intValue(v: unknown, name: string, dflt?: undefined): number | undefined;
export function intValue(v: unknown, name: string, dflt?: number): number | undefined {
  if (v === undefined || v === null || v === '') return dflt;
  const s = String(v);
  if (!/^-?\d+$/.test(s)) throw invalidParameter(`invalid value for ${name}: ${JSON.stringify(s)} is not an integer`);
  return Number(s);
}

export type Query = Record<string, string | undefined>;
export const query = (req: FastifyRequest) => req.query as Query;

/** Every value of a repeated query parameter (`changes=CMD …&changes=ENV …`, `names=a&names=b`). */
export function allValues(q: unknown, name: string): string[] {
  const v = (q as Record<string, unknown>)[name];
  if (v === undefined) return [];
  return (Array.isArray(v) ? v : [v]).map(String);
}

/**
 * The largest JSON body read. dockerd has no limit; berth holds a body in
 * memory several times over while parsing it (bytes, text, objects), so one
 * is capped far above any real request (a create's strings all end up in an
 * exec, whose arguments and environment Linux caps at a few MiB together).
 * Uploads (tar streams) are not JSON and never read through here.
 */
export const MAX_JSON_BODY = 4 * 1024 * 1024;
/** Nesting allowed in a JSON body: Docker's bodies are under ten levels deep. */
export const MAX_JSON_DEPTH = 100;

/** How a route takes its body. */
export interface BodyOptions {
  /**
   * The route needs a body: an empty one is refused with dockerd's words for it
   * (its decoder's io.EOF), before anything is looked up.
   */
  required?: boolean;
  /** The Go type dockerd decodes into, named when the body's top-level value is of the wrong kind. */
  goType?: string;
}

/** dockerd's words for a body that is not JSON: its ReadJSON's, which hold the Go decoder's. */
const invalidJson = (words: string) => invalidParameter(`invalid JSON: ${words}`);

/**
 * Reads and parses a JSON request body as dockerd's ReadJSON does: no body is
 * allowed without a Content-Type, any body must be application/json; a body
 * that is not JSON is refused in the words of Go's decoder; what follows the
 * value must be only spaces. Returns undefined when there is no body.
 */
export async function readJson(req: FastifyRequest, o: BodyOptions = {}): Promise<unknown> {
  const ct = req.headers['content-type'];
  const bytes = await readBody(req);
  if (goBlank(bytes)) {
    if (o.required) throw invalidJson('got EOF while reading request body');
    return undefined;
  }
  if (ct === undefined || !/^application\/json\s*(;|$)/i.test(ct)) {
    throw invalidParameter(`unsupported Content-Type header (${ct ?? ''}): must be 'application/json'`);
  }
  let json: unknown;
  try {
    json = JSON.parse(bytes.toString('utf8'));
  } catch {
    json = parseAsGo(bytes);
  }
  checkShape(json);
  return json;
}

/** A body JSON.parse refused, read as Go's Decoder reads it: its error, or its first value. */
function parseAsGo(bytes: Buffer): unknown {
  const scan = goScan(bytes);
  if (scan.kind === 'eof') throw invalidJson('got EOF while reading request body');
  if (scan.kind === 'unexpected-eof') throw invalidJson('unexpected EOF');
  if (scan.kind === 'syntax') throw invalidJson(scan.message);
  if (goMore(bytes, scan.end)) throw invalidParameter('unexpected content after JSON');
  return JSON.parse(bytes.subarray(0, scan.end).toString('utf8'));
}

/** Go's name for the kind of a JSON value, as its UnmarshalTypeError says it. */
const goKind = (v: unknown) =>
  Array.isArray(v)
    ? 'array'
    : typeof v === 'string'
      ? 'string'
      : typeof v === 'number'
        ? 'number'
        : typeof v === 'boolean'
          ? 'bool'
          : 'object';

/**
 * The body's top-level value when it must be of one kind (`null` reads as absent,
 * as it does into a Go pointer): otherwise the Go decoder's UnmarshalTypeError.
 */
export function expectKind(json: unknown, kind: 'object' | 'array' | 'string', goType: string): void {
  if (json === undefined || json === null) return;
  const ok =
    kind === 'object'
      ? typeof json === 'object' && !Array.isArray(json)
      : kind === 'array'
        ? Array.isArray(json)
        : typeof json === 'string';
  if (!ok) throw invalidJson(`json: cannot unmarshal ${goKind(json)} into Go value of type ${goType}`);
}

/**
 * Parses a JSON body against a zod schema; an absent body (or `null`) parses as `{}`.
 * Field names match in any case, as Go's decoder matches them (fieldnames.ts).
 */
export async function parseJsonBody<T extends z.ZodType>(
  req: FastifyRequest,
  schema: T,
  o: BodyOptions = {},
): Promise<z.infer<T>> {
  const json = await readJson(req, o);
  expectKind(json, 'object', o.goType ?? 'struct');
  return schema.parse(foldFieldNames(schema, json ?? {}));
}

/**
 * Refuses what no Docker body holds and what later steps cannot take: nesting
 * past MAX_JSON_DEPTH (stringifying such a value for the database overflowed
 * the stack: a 500), and NUL bytes, which no path, argument, environment
 * variable or name can carry. Walks with its own stack, never recursion.
 */
function checkShape(json: unknown): void {
  const stack: [unknown, string, number][] = [[json, '', 0]];
  const where = (p: string) => p || 'body';
  while (stack.length) {
    const [v, at, depth] = stack.pop()!;
    if (typeof v === 'string') {
      if (v.includes('\0')) throw invalidParameter(`invalid value for ${where(at)}: contains a NUL byte`);
      continue;
    }
    if (typeof v !== 'object' || v === null) continue;
    if (depth >= MAX_JSON_DEPTH) throw invalidJson(`nested deeper than ${MAX_JSON_DEPTH} levels`);
    for (const [k, child] of Object.entries(v)) {
      const path = at ? `${at}.${k}` : k;
      if (k.includes('\0')) throw invalidParameter(`invalid value for ${where(at)}: a key contains a NUL byte`);
      stack.push([child, path, depth + 1]);
    }
  }
}

/** Up to this many declared bytes, an oversized body is read to its end before it is refused. */
const DRAIN_BEFORE_ANSWER = 64 * 1024 * 1024;

/** Reads `body` to its end (or its failure), keeping nothing. */
const drained = (body: Readable) =>
  new Promise<void>((resolve) => {
    if (body.readableEnded) return resolve();
    body.on('data', () => undefined);
    body.once('end', resolve);
    body.once('close', resolve);
    body.once('error', () => resolve());
    body.resume();
  });

/** Reads a request's body, if any, to its end and drops it: a client still writing then reads the answer. */
export async function dropBody(req: FastifyRequest): Promise<void> {
  const body = req.body as Readable | undefined;
  if (body && typeof body.on === 'function') await drained(body);
}

/**
 * The body's bytes, at most MAX_JSON_BODY of them. A larger one is refused with
 * 413; its rest is read and dropped, not cut off, so that the client, still
 * writing, gets to read the answer (a declared one of a modest size before the
 * answer, a larger one as the answer goes).
 */
async function readBody(req: FastifyRequest): Promise<Buffer> {
  const body = req.body as Readable | undefined;
  if (!body || typeof (body as Readable).on !== 'function') return Buffer.alloc(0);
  const tooLarge = () =>
    payloadTooLarge(`request body is larger than the ${MAX_JSON_BODY / 1024 / 1024} MiB allowed for JSON`);
  const declared = Number(req.headers['content-length'] ?? 0);
  if (declared > MAX_JSON_BODY) {
    // A body of a modest size is read and dropped before the answer: the connection closes behind
    // the answer, and a client still writing into it then fails on its write and never reads the 413.
    if (declared <= DRAIN_BEFORE_ANSWER) await drained(body);
    else body.resume();
    throw tooLarge();
  }
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size <= MAX_JSON_BODY) {
        chunks.push(chunk);
        return;
      }
      // Still flowing, into nowhere: the connection stays usable for the answer.
      body.off('data', onData).on('data', () => undefined);
      chunks.length = 0;
      reject(tooLarge());
    };
    body.on('data', onData);
    body.once('end', () => resolve(Buffer.concat(chunks)));
    body.once('error', reject);
    // A client gone before the end: nothing to answer, nothing to keep.
    body.once('close', () => reject(new Error('the client closed the connection before the end of the body')));
  });
}

/** Drops nulls so the engine sees absent fields as absent. */
export function withoutNulls<T extends Record<string, unknown>>(o: T): Partial<{ [K in keyof T]: NonNullable<T[K]> }> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== null && v !== undefined)) as Partial<{
    [K in keyof T]: NonNullable<T[K]>;
  }>;
}
