// Query-string and body primitives with dockerd's leniency.
import type { FastifyRequest } from 'fastify';
import type { Readable } from 'node:stream';
import type { z } from 'zod';
import { invalidParameter } from '../../errors.js';

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

const MAX_JSON_BODY = 32 * 1024 * 1024;

/**
 * Reads and parses a JSON request body with dockerd's content-type rule: no body
 * is allowed without a Content-Type, any body must be application/json.
 * Returns undefined when there is no body.
 */
export async function readJson(req: FastifyRequest): Promise<unknown> {
  const ct = req.headers['content-type'];
  const text = await readBodyText(req);
  if (text.trim() === '') return undefined;
  if (ct === undefined || !/^application\/json\s*(;|$)/i.test(ct)) {
    throw invalidParameter(`Content-Type specified (${ct ?? ''}) must be 'application/json'`);
  }
  try {
    return JSON.parse(text);
  } catch (e) {
    throw invalidParameter(`invalid JSON in request body: ${(e as Error).message}`);
  }
}

/** Parses a JSON body against a zod schema; an absent body parses as `{}`. */
export async function parseJsonBody<T extends z.ZodType>(req: FastifyRequest, schema: T): Promise<z.infer<T>> {
  const json = (await readJson(req)) ?? {};
  if (typeof json !== 'object' || json === null || Array.isArray(json)) {
    throw invalidParameter('invalid JSON in request body: expected an object');
  }
  return schema.parse(json);
}

async function readBodyText(req: FastifyRequest): Promise<string> {
  const body = req.body as Readable | undefined;
  if (!body || typeof (body as Readable).on !== 'function') return '';
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of body) {
    size += (chunk as Buffer).length;
    if (size > MAX_JSON_BODY) throw invalidParameter(`request body is larger than ${MAX_JSON_BODY} bytes`);
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks).toString('utf8');
}

/** Drops nulls so the engine sees absent fields as absent. */
export function withoutNulls<T extends Record<string, unknown>>(o: T): Partial<{ [K in keyof T]: NonNullable<T[K]> }> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== null && v !== undefined)) as Partial<{ [K in keyof T]: NonNullable<T[K]> }>;
}
