// Headers dockerd puts on every response. A module of their own: server.ts
// sets them through a hook, and the streams and routes that write their
// response heads by hand (hijacked connections, pull progress, events) need
// them too, while server.ts needs those routes.
import { VERSION } from '../config.js';
import { MAX_API_VERSION } from './version.js';

export const COMMON_HEADERS: Record<string, string> = {
  'Api-Version': MAX_API_VERSION,
  Server: `berth/${VERSION} (linux)`,
  Ostype: 'linux',
};

/** /_ping's own, besides the common ones (routes/system.ts, and ping.ts ahead of Fastify). */
export const PING_HEADERS: Record<string, string> = {
  'Cache-Control': 'no-cache, no-store, must-revalidate',
  Pragma: 'no-cache',
  'Docker-Experimental': 'false',
  'Content-Type': 'text/plain; charset=utf-8',
};
