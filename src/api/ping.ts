// The requests answered ahead of Fastify: what one must be (a plain GET, or a
// HEAD, with a version in range), and /_ping's answer. The front (front.ts)
// answers /_ping with it while the API is being built, and the fast lane
// (fastlane.ts) afterwards, each byte for byte as the Fastify route would.
import type { IncomingMessage, ServerResponse } from 'node:http';
import { COMMON_HEADERS, PING_HEADERS } from './headers.js';
import { checkVersion, MAX_API_VERSION, splitVersion } from './version.js';

/** A GET or HEAD without a body, its URL split. */
export interface PlainGet {
  method: 'GET' | 'HEAD';
  url: string;
  /** The unversioned path, without the query. */
  path: string;
  /** What follows the `?`, or ''. */
  query: string;
  /** The version the client asked for, or the maximum when unversioned. */
  apiVersion: string;
}

/**
 * The request as a PlainGet; undefined when it is anything else (another
 * method, a body) or asks for a version out of range, which Fastify answers.
 */
export function plainGet(req: IncomingMessage): PlainGet | undefined {
  const { method, headers } = req;
  if (method !== 'GET' && method !== 'HEAD') return undefined;
  if (headers['content-length'] !== undefined || headers['transfer-encoding'] !== undefined) return undefined;
  const url = req.url ?? '/';
  const mark = url.indexOf('?');
  const { version, path } = splitVersion(mark === -1 ? url : url.slice(0, mark));
  if (version) {
    try {
      checkVersion(version);
    } catch {
      return undefined;
    }
  }
  return { method, url, path, query: mark === -1 ? '' : url.slice(mark + 1), apiVersion: version ?? MAX_API_VERSION };
}

/** Fastify's reply.header() lowercases names: the same bytes on the wire. */
export const lowerCased = (h: Record<string, string>): Record<string, string> =>
  Object.fromEntries(Object.entries(h).map(([k, v]) => [k.toLowerCase(), v]));

const PING = { ...lowerCased(COMMON_HEADERS), ...lowerCased(PING_HEADERS), 'content-length': '2' };

/** /_ping's answer: `OK`, or its headers alone to a HEAD. */
export function sendPing(res: ServerResponse, method: PlainGet['method']): void {
  res.writeHead(200, PING);
  if (method === 'HEAD') res.end();
  else res.end('OK');
}
