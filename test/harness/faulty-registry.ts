// A programmable front for the test registry: a small HTTP proxy on
// 127.0.0.1 in front of a real `docker-registry` (startRegistry) and its
// token issuer, that passes every request through except those a rule
// matches, which it answers with a fault. It counts the requests it sees, per
// path, so a test can tell what a client downloaded.
//
//   const front = await startFaultyRegistry(registry);
//   const rule = front.inject({ path: /\/blobs\/sha256:ab12/, fault: { kind: 'reset', afterBytes: 1000 } });
//   ... pull `${front.host}/repo:tag` ...
//   rule.hits;                           // requests it faulted
//   front.count(/\/blobs\/sha256:ab12/); // requests seen, faulted or not
//   front.clear();                       // every request passes again
//
// The token issuer is reached through the front too: the realm of the
// registry's Bearer challenge is rewritten to the front, which sends every
// path outside /v2/ to the issuer, so rules can fault token requests.
//
// Every response closes its connection (no keep-alive): then a client that
// holds no request holds no connection, and a leak check can say so.
import http from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import type { Registry } from './registry.js';

export type Fault =
  /** Answer this status (with a distribution-style error body unless given one). */
  | { kind: 'status'; status: number; body?: string; headers?: Record<string, string> }
  /** Pass the headers and `afterBytes` bytes of the body through, then reset the connection. */
  | { kind: 'reset'; afterBytes: number }
  /**
   * Never answer (`afterBytes` undefined), or stop sending after that many body
   * bytes; the connection stays open, until the rule's release() lets the rest go.
   */
  | { kind: 'stall'; afterBytes?: number }
  /** The body with one byte changed: same length, wrong digest. */
  | { kind: 'corrupt' }
  /** A wrong Content-Length: 'short' declares (and sends) half the bytes, 'long' declares more and closes after the real ones. */
  | { kind: 'length'; declared: 'short' | 'long' }
  /** The body followed by `bytes` more (declared in Content-Length), or by an endless stream (chunked). */
  | { kind: 'extra'; bytes: number | 'endless' }
  /** 302 back to the same URL, for ever. */
  | { kind: 'redirect-loop' };

export interface Rule {
  /** Default: any method. */
  method?: string;
  /** Matched against the path with its query string. */
  path: RegExp;
  fault: Fault;
  /** Fault only the first `times` matching requests (default: all of them). */
  times?: number;
}

export interface Injected {
  /** Requests this rule has faulted so far. */
  readonly hits: number;
  /** Resolves at the first request this rule faults. */
  hit(): Promise<void>;
  /** A stall: lets the requests it holds go on (upstream's answer, or the rest of it). */
  release(): void;
  remove(): void;
}

export interface Seen {
  method: string;
  path: string;
  /** The fault it met, if any. */
  fault?: Fault['kind'];
  /** Body bytes sent to the client. */
  bytes: number;
  /** The client's connection has closed (it hung up, or the answer is complete). */
  closed: boolean;
}

export interface FaultyRegistry {
  /** 127.0.0.1:PORT, to put in image references. */
  host: string;
  url: string;
  inject(rule: Rule): Injected;
  /** Removes every rule and ends the connections left stalled. */
  clear(): void;
  /** Requests seen whose path matches (default method GET). */
  count(path: RegExp, method?: string): number;
  /** Every request seen, oldest first. */
  readonly requests: readonly Seen[];
  close(): Promise<void>;
}

interface Active extends Rule {
  hits: number;
  waiters: (() => void)[];
  /** Resolves when release() is called. */
  released: Promise<void>;
  release: () => void;
}

const JSON_TYPE = { 'Content-Type': 'application/json' };
/** Headers that describe one connection, not the message. */
const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'transfer-encoding', 'content-length']);

function errorBody(status: number, path: string): string {
  const missing = path.includes('/manifests/')
    ? 'MANIFEST_UNKNOWN'
    : path.includes('/blobs/')
      ? 'BLOB_UNKNOWN'
      : 'NOT_FOUND';
  const code = status === 401 ? 'UNAUTHORIZED' : status === 404 ? missing : 'UNKNOWN';
  return JSON.stringify({ errors: [{ code, message: `injected ${status}` }] });
}

export async function startFaultyRegistry(upstream: Registry): Promise<FaultyRegistry> {
  if (upstream.url.startsWith('https:')) throw new Error('the faulty front speaks plain HTTP to a plain-HTTP registry');
  const issuer = upstream.tokenIssuer ? new URL(upstream.tokenIssuer.url) : undefined;
  const rules: Active[] = [];
  const requests: Seen[] = [];
  const sockets = new Set<Socket>();
  /** Connections held open on purpose (stalls), ended by clear(). */
  const stalled = new Set<Socket>();
  const agent = new http.Agent({ keepAlive: false });
  let self = '';

  const match = (req: http.IncomingMessage): Active | undefined => {
    const rule = rules.find(
      (r) =>
        (!r.method || r.method === req.method) &&
        r.path.test(req.url ?? '') &&
        (r.times === undefined || r.hits < r.times),
    );
    if (!rule) return undefined;
    rule.hits++;
    for (const w of rule.waiters.splice(0)) w();
    return rule;
  };

  /** The upstream answer, with its headers made to point at the front. */
  const forward = (req: http.IncomingMessage): Promise<http.IncomingMessage> =>
    new Promise((resolve, reject) => {
      const toIssuer = issuer && !(req.url ?? '').startsWith('/v2');
      const target = new URL(req.url ?? '/', toIssuer ? issuer.origin : upstream.url);
      const up = http.request(
        target,
        { method: req.method, headers: { ...req.headers, host: target.host }, agent },
        (res) => {
          const origins = [upstream.url, ...(issuer ? [issuer.origin] : [])];
          for (const name of ['www-authenticate', 'location']) {
            const v = res.headers[name];
            if (typeof v === 'string') res.headers[name] = origins.reduce((text, o) => text.split(o).join(self), v);
          }
          resolve(res);
        },
      );
      up.on('error', reject);
      req.pipe(up);
    });

  const passHeaders = (res: http.IncomingMessage, length?: number): http.OutgoingHttpHeaders => {
    const out: http.OutgoingHttpHeaders = {};
    for (const [k, v] of Object.entries(res.headers)) if (!HOP_BY_HOP.has(k) && v !== undefined) out[k] = v;
    if (length !== undefined) out['content-length'] = String(length);
    return out;
  };

  /** Writes a chunk, waiting for the client to take it; false once the client is gone. */
  const send = async (res: http.ServerResponse, seen: Seen, chunk: Buffer): Promise<boolean> => {
    if (res.destroyed) return false;
    seen.bytes += chunk.length;
    if (!res.write(chunk)) {
      await new Promise<void>((resolve) => {
        const done = () => {
          res.off('drain', done);
          res.off('close', done);
          resolve();
        };
        res.on('drain', done);
        res.on('close', done);
      });
    }
    return !res.destroyed;
  };

  const bodyOf = async (up: http.IncomingMessage): Promise<Buffer> => {
    const chunks: Buffer[] = [];
    for await (const c of up) chunks.push(c as Buffer);
    return Buffer.concat(chunks);
  };

  const serve = async (
    req: http.IncomingMessage,
    res: http.ServerResponse,
    seen: Seen,
    rule: Active | undefined,
  ): Promise<void> => {
    res.shouldKeepAlive = false;
    const fault = rule?.fault;
    if (fault?.kind === 'status') {
      res.writeHead(fault.status, { ...JSON_TYPE, ...fault.headers });
      res.end(fault.body ?? errorBody(fault.status, req.url ?? '/'));
      return;
    }
    if (fault?.kind === 'redirect-loop') {
      res.writeHead(302, { Location: `${self}${req.url ?? '/'}` });
      res.end();
      return;
    }
    if (fault?.kind === 'stall' && fault.afterBytes === undefined) {
      stalled.add(req.socket);
      await rule!.released;
      stalled.delete(req.socket);
      if (res.destroyed) return;
      return serve(req, res, seen, undefined);
    }
    const up = await forward(req);
    if (!fault) {
      res.writeHead(
        up.statusCode ?? 502,
        passHeaders(up, up.headers['content-length'] !== undefined ? Number(up.headers['content-length']) : undefined),
      );
      for await (const c of up) if (!(await send(res, seen, c as Buffer))) return void up.destroy();
      res.end();
      return;
    }
    // The faults below change a body: the upstream one is read whole (test blobs are small).
    const body = await bodyOf(up);
    const status = up.statusCode ?? 502;
    switch (fault.kind) {
      case 'reset':
        res.writeHead(status, passHeaders(up, body.length));
        await send(res, seen, body.subarray(0, fault.afterBytes));
        res.socket?.resetAndDestroy();
        return;
      case 'stall':
        res.writeHead(status, passHeaders(up, body.length));
        await send(res, seen, body.subarray(0, fault.afterBytes));
        stalled.add(req.socket);
        await rule!.released;
        stalled.delete(req.socket);
        if (await send(res, seen, body.subarray(fault.afterBytes))) res.end();
        return;
      case 'corrupt': {
        const bad = Buffer.from(body);
        const at = Math.floor(bad.length / 3); // in a token answer: inside the first copy of the token
        if (bad.length) bad[at] = bad[at]! ^ 0xff;
        res.writeHead(status, passHeaders(up, bad.length));
        await send(res, seen, bad);
        res.end();
        return;
      }
      case 'length':
        if (fault.declared === 'short') {
          const half = body.subarray(0, Math.floor(body.length / 2));
          res.writeHead(status, passHeaders(up, half.length));
          await send(res, seen, half);
          res.end();
        } else {
          res.writeHead(status, passHeaders(up, body.length + 4096));
          await send(res, seen, body);
          res.socket?.destroy(); // the declared rest never comes
        }
        return;
      case 'extra': {
        if (fault.bytes !== 'endless') {
          res.writeHead(status, passHeaders(up, body.length + fault.bytes));
          await send(res, seen, Buffer.concat([body, Buffer.alloc(fault.bytes, 0x5a)]));
          res.end();
          return;
        }
        res.writeHead(status, passHeaders(up)); // chunked: no end declared
        const junk = Buffer.alloc(64 * 1024, 0x5a);
        let open = await send(res, seen, body);
        while (open) open = await send(res, seen, junk); // until the client hangs up
        return;
      }
    }
  };

  const server = http.createServer((req, res) => {
    const seen: Seen = { method: req.method ?? 'GET', path: req.url ?? '/', bytes: 0, closed: false };
    requests.push(seen);
    res.once('close', () => {
      seen.closed = true;
      stalled.delete(req.socket);
    });
    const rule = match(req);
    if (rule) seen.fault = rule.fault.kind;
    serve(req, res, seen, rule).catch(() => res.destroy());
  });
  server.on('connection', (s: Socket) => {
    sockets.add(s);
    s.once('close', () => sockets.delete(s));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  self = `http://127.0.0.1:${port}`;

  return {
    host: `127.0.0.1:${port}`,
    url: self,
    requests,
    inject(rule) {
      let release!: () => void;
      const released = new Promise<void>((resolve) => (release = resolve));
      const active: Active = { ...rule, hits: 0, waiters: [], released, release };
      rules.push(active);
      return {
        get hits() {
          return active.hits;
        },
        hit: () => (active.hits > 0 ? Promise.resolve() : new Promise<void>((resolve) => active.waiters.push(resolve))),
        release,
        remove: () => {
          const i = rules.indexOf(active);
          if (i !== -1) rules.splice(i, 1);
        },
      };
    },
    clear() {
      rules.length = 0;
      for (const s of stalled) s.destroy();
      stalled.clear();
    },
    count: (path, method = 'GET') => requests.filter((r) => r.method === method && path.test(r.path)).length,
    async close() {
      for (const s of sockets) s.destroy();
      agent.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
