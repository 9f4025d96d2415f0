// Replays a client's recorded request sequence (fixtures/<client>/*.json) against a daemon: the
// requests exactly as that client puts them on the wire, with placeholders for what differs from
// run to run (ids, image references, paths), the status it needs and the response fields it reads.
//
// A step is one request, `await` of a request started earlier with `hold` (a wait or a log
// follow the client keeps open), or `write` to the stream of a held hijacked one (its stdin). `{name}` in a path or a body string is replaced by a variable,
// `{name|q}` by the variable encoded for a query string; `save` puts response fields into
// variables for later steps. `reads` maps a field path (dots; `*` for every element of an array,
// of which there must be one, `*?` for every element of one that may be empty; `header:<name>`
// for a header) to the JSON types the client's decoder accepts there, `|`-separated.
import { readFileSync } from 'node:fs';
import http from 'node:http';
import type { Duplex } from 'node:stream';
import path from 'node:path';
import { ROOT, request, type ApiResponse } from './daemon.js';

export interface Step {
  id: string;
  source: string;
  method?: string;
  path?: string;
  headers?: Record<string, string>;
  body?: unknown;
  /** A name in the replay's `bodies`: raw bytes the client streams (an image archive). */
  bodyFrom?: string;
  status?: number;
  reads?: Record<string, string>;
  save?: Record<string, string>;
  hold?: boolean;
  /** For a stream of JSON lines held open (stats stream=true): the answer is its first `take` records. */
  take?: number;
  await?: string;
  /** A hijacked request (Connection: Upgrade): the answer is the raw stream after the headers. */
  upgrade?: boolean;
  /** Bytes written to the stream of the held hijacked request `write` (its stdin); `end` closes that side. */
  write?: string;
  data?: string;
  /** Write only once the held stream's output holds this text (a user types at the prompt she sees). */
  after?: string;
  end?: boolean;
  stream?: 'json-lines' | 'multiplexed';
}

export interface Sequence {
  client: string;
  steps: Step[];
}

export function loadSequence(client: string, name: string): Sequence {
  return JSON.parse(readFileSync(path.join(ROOT, 'fixtures', client, `${name}.json`), 'utf8')) as Sequence;
}

export interface Held {
  readonly settled: boolean;
  readonly answer: Promise<ApiResponse>;
  /** The upgraded connection of a hijacked request, once the daemon has switched protocols. */
  stream?: Promise<Duplex>;
  /** Settles once the hijacked stream's output so far holds `text`. */
  seen?: (text: string) => Promise<void>;
}

export class Replay {
  readonly answers = new Map<string, ApiResponse>();
  private readonly held = new Map<string, Held>();

  constructor(
    private readonly socket: string,
    readonly vars: Record<string, string>,
    private readonly bodies: Record<string, Buffer> = {},
  ) {}

  /** Runs `seq`'s steps from `from` up to and including `to` (ids), checking status and reads. */
  async run(seq: Sequence, opts: { from?: string; to?: string } = {}): Promise<void> {
    const ids = seq.steps.map((s) => s.id);
    const start = opts.from ? ids.indexOf(opts.from) : 0;
    const end = opts.to ? ids.indexOf(opts.to) : ids.length - 1;
    if (start < 0 || end < 0) throw new Error(`no step ${opts.from ?? opts.to} in ${seq.client}`);
    for (const step of seq.steps.slice(start, end + 1)) await this.step(step);
  }

  /** The answer of step `id`, which must have run. */
  answer(id: string): ApiResponse {
    const a = this.answers.get(id);
    if (!a) throw new Error(`step ${id} has not run`);
    return a;
  }

  /** A held request of step `id`. */
  pending(id: string): Held {
    const h = this.held.get(id);
    if (!h) throw new Error(`step ${id} holds no request`);
    return h;
  }

  async step(step: Step): Promise<ApiResponse> {
    let answer: ApiResponse;
    if (step.write) {
      const stream = await this.pending(step.write).stream;
      if (!stream) throw new Error(`step ${step.id}: ${step.write} is not a hijacked request`);
      if (step.after) await this.pending(step.write).seen?.(step.after);
      if (step.data) stream.write(this.fill(step.data));
      if (step.end) stream.end();
      return { status: 0, headers: {}, body: Buffer.alloc(0), text: '', json: undefined };
    }
    if (step.await) {
      answer = await this.pending(step.await).answer;
    } else {
      const urlPath = this.fill(step.path ?? '', true);
      const raw = step.bodyFrom ? this.bodies[step.bodyFrom] : undefined;
      if (step.bodyFrom && !raw) throw new Error(`step ${step.id}: no body ${step.bodyFrom}`);
      const body = step.body === undefined ? undefined : this.fillValue(step.body);
      const payload = raw ?? (body === undefined ? undefined : JSON.stringify(body));
      const method = step.method ?? 'GET';
      let upgraded: ((s: Duplex) => void) | undefined;
      const stream = step.upgrade ? new Promise<Duplex>((r) => (upgraded = r)) : undefined;
      const output = new OutputWatch();
      const send = step.upgrade
        ? hijacked(this.socket, method, urlPath, step.headers ?? {}, payload, upgraded, output)
        : step.take
          ? records(this.socket, method, urlPath, step.headers ?? {}, step.take)
          : request(this.socket, method, urlPath, { headers: step.headers, raw: payload });
      if (step.hold) {
        const h = { settled: false, answer: send, stream, seen: (text: string) => output.seen(text) };
        send.then(
          () => (h.settled = true),
          () => (h.settled = true),
        );
        this.held.set(step.id, h);
        // The client returns once the daemon has answered with headers; held requests are checked at their await.
        return { status: 0, headers: {}, body: Buffer.alloc(0), text: '', json: undefined };
      }
      answer = await send;
    }
    this.answers.set(step.id, answer);
    if (step.status !== undefined && answer.status !== step.status) {
      throw new Error(
        `step ${step.id} (${step.source}): status ${answer.status}, the client needs ${step.status}: ${answer.text.slice(0, 300)}`,
      );
    }
    const problems = checkReads(answer, step.reads ?? {});
    if (problems.length) throw new Error(`step ${step.id} (${step.source}): ${problems.join('; ')}`);
    for (const [name, field] of Object.entries(step.save ?? {})) {
      const v = valuesAt(answer.json, field.split('.'))[0];
      if (typeof v !== 'string') throw new Error(`step ${step.id}: ${field} is not a string to save`);
      this.vars[name] = v;
    }
    return answer;
  }

  private fill(s: string, inPath = false): string {
    return s.replace(/\{(\w+)(\|q)?\}/g, (_, name: string, q?: string) => {
      const v = this.vars[name];
      if (v === undefined) throw new Error(`no value for {${name}}`);
      return q && inPath ? encodeURIComponent(v) : v;
    });
  }

  private fillValue(v: unknown): unknown {
    if (typeof v === 'string') return this.fill(v);
    if (Array.isArray(v)) return v.map((x) => this.fillValue(x));
    if (v && typeof v === 'object') {
      return Object.fromEntries(Object.entries(v).map(([k, x]) => [this.fill(k), this.fillValue(x)]));
    }
    return v;
  }
}

/** What is wrong with `answer` for a client that reads `reads`; empty when nothing is. */
export function checkReads(answer: ApiResponse, reads: Record<string, string>): string[] {
  const problems: string[] = [];
  for (const [field, types] of Object.entries(reads)) {
    const allowed = types.split('|');
    const values = field.startsWith('header:')
      ? [answer.headers[field.slice('header:'.length).toLowerCase()]]
      : valuesAt(answer.json, field.split('.'));
    if (values.length === 0 && !field.includes('*?')) problems.push(`${field}: no element to read`);
    for (const v of values) {
      if (!allowed.includes(typeOf(v)))
        problems.push(`${field} is ${typeOf(v)} (${JSON.stringify(v)}), the client reads ${types}`);
    }
  }
  return problems;
}

function typeOf(v: unknown): string {
  if (v === undefined) return 'missing';
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'array';
  return typeof v;
}

function valuesAt(v: unknown, parts: string[]): unknown[] {
  if (parts.length === 0) return [v];
  const [head, ...rest] = parts as [string, ...string[]];
  if (head === '*' || head === '*?') return Array.isArray(v) ? v.flatMap((x) => valuesAt(x, rest)) : [];
  if (v && typeof v === 'object' && !Array.isArray(v)) return valuesAt((v as Record<string, unknown>)[head], rest);
  return [undefined];
}

/** A stream's output so far, for steps that wait to see some of it. */
class OutputWatch {
  private text = '';
  private ended = false;
  private readonly waiters: Array<{ text: string; resolve: () => void; reject: (e: Error) => void }> = [];

  push(chunk: Buffer): void {
    this.text += chunk.toString('latin1');
    this.check();
  }

  end(): void {
    this.ended = true;
    this.check();
  }

  seen(text: string): Promise<void> {
    return new Promise((resolve, reject) => {
      this.waiters.push({ text, resolve, reject });
      this.check();
    });
  }

  private check(): void {
    for (const w of this.waiters.splice(0)) {
      if (this.text.includes(w.text)) w.resolve();
      else if (this.ended)
        w.reject(new Error(`the stream ended without ${JSON.stringify(w.text)}: ${JSON.stringify(this.text)}`));
      else this.waiters.push(w);
    }
  }
}

/**
 * A hijacked request as the Go clients make it (Connection: Upgrade): dockerd answers 101 and
 * streams; an error comes back as an ordinary response. Resolves once the stream ends.
 */
function hijacked(
  socketPath: string,
  method: string,
  urlPath: string,
  headers: Record<string, string>,
  body: string | Buffer | undefined,
  onUpgrade?: (stream: Duplex) => void,
  output?: OutputWatch,
): Promise<ApiResponse> {
  return new Promise((resolve, reject) => {
    const payload = body === undefined ? undefined : Buffer.from(body);
    const req = http.request({
      socketPath,
      method,
      path: urlPath,
      agent: false,
      headers: { Host: 'localhost', ...headers, ...(payload ? { 'Content-Length': String(payload.length) } : {}) },
    });
    const collect = (status: number, h: http.IncomingHttpHeaders, stream: NodeJS.ReadableStream, head?: Buffer) => {
      const chunks: Buffer[] = head?.length ? [head] : [];
      if (head?.length) output?.push(head);
      stream.on('data', (c: Buffer) => {
        chunks.push(c);
        output?.push(c);
      });
      stream.on('end', () => {
        output?.end();
        const b = Buffer.concat(chunks);
        let json: unknown;
        try {
          json = JSON.parse(b.toString());
        } catch {
          json = undefined;
        }
        resolve({ status, headers: h, body: b, text: b.toString(), json });
      });
      stream.on('error', reject);
    };
    req.on('upgrade', (res, socket, head) => {
      collect(res.statusCode ?? 0, res.headers, socket, head);
      onUpgrade?.(socket);
    });
    req.on('response', (res) => collect(res.statusCode ?? 0, res.headers, res));
    req.on('error', reject);
    req.end(payload);
  });
}

/** The first `n` records of a stream of JSON lines, then the connection closed (as a client stops reading). */
function records(
  socketPath: string,
  method: string,
  urlPath: string,
  headers: Record<string, string>,
  n: number,
): Promise<ApiResponse> {
  return new Promise((resolve, reject) => {
    const req = http.request({
      socketPath,
      method,
      path: urlPath,
      agent: false,
      headers: { Host: 'localhost', ...headers },
    });
    req.on('response', (res) => {
      let text = '';
      const done = () => {
        const lines = text.split('\n').filter((l) => l.trim());
        resolve({
          status: res.statusCode ?? 0,
          headers: res.headers,
          body: Buffer.from(text),
          text,
          json: lines.slice(0, n).map((l) => JSON.parse(l)),
        });
        req.destroy();
      };
      res.on('data', (c: Buffer) => {
        text += c.toString();
        if (text.split('\n').length > n) done();
      });
      res.on('end', done);
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end();
  });
}
