// Replays the Engine-API requests cri-dockerd v0.3.7 made against dockerd
// (fixtures/cri-dockerd/sequence.json, recorded by fixtures/cri-dockerd/record.sh)
// against a berthd, and compares each answer with dockerd's recorded one.
//
// Placeholders: `{{name}}` in a recorded request is filled from what is bound;
// a recorded answer whose value is exactly `{{name}}` binds `name` to berthd's
// value at the same place (a create's Id, an image's Id), or, once bound,
// requires berthd's value to equal it. `<time>`, `<hex64>`, `<dockerd-path>`
// only stand for a value that differs run to run.
import { readFileSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { type ApiResponse, type Daemon, ROOT } from './daemon.js';
import { demux } from './streams.js';

export interface RecordedRequest {
  method: string;
  path: string;
  headers: Record<string, string>;
  body?: unknown;
  /** What cri-dockerd asked before the recording proxy clamped it (this VM forbids a negative OomScoreAdj). */
  clamped?: Record<string, unknown>;
}

export interface RecordedResponse {
  status: number;
  contentType: string;
  json?: unknown;
  jsonLines?: unknown[];
  frames?: { stream: string; text: string }[];
  text?: string;
  hijacked?: boolean;
}

export interface Exchange {
  request: RecordedRequest;
  response: RecordedResponse;
}

export interface RecordedCall {
  call: string;
  exchanges: Exchange[];
}

export interface Sequence {
  recorded: Record<string, unknown>;
  calls: RecordedCall[];
}

export const SEQUENCE_FILE = path.join(ROOT, 'fixtures/cri-dockerd/sequence.json');

export function loadSequence(): Sequence {
  return JSON.parse(readFileSync(SEQUENCE_FILE, 'utf8')) as Sequence;
}

/** berthd's answer to one replayed request. */
export interface Answer {
  status: number;
  json?: unknown;
  jsonLines?: unknown[];
  frames?: { stream: string; text: string }[];
  text: string;
}

export interface Step {
  recorded: Exchange;
  /** The request as sent to berthd (placeholders filled). */
  sent: { method: string; path: string; body?: unknown };
  answer: Answer;
}

const PLACEHOLDER = /\{\{([\w:-]+)\}\}/g;
const EXACT = /^\{\{([\w:-]+)\}\}$/;

/** A hijacked request (`Upgrade: tcp`, as the Go client sends exec start): the raw stream until berthd closes it. */
function hijack(
  socket: string,
  method: string,
  urlPath: string,
  body: unknown,
): Promise<{ status: number; bytes: Buffer }> {
  return new Promise((resolve, reject) => {
    const payload = Buffer.from(body === undefined ? '' : JSON.stringify(body));
    const conn = net.connect(socket);
    const chunks: Buffer[] = [];
    conn.on('connect', () => {
      conn.write(
        `${method} ${urlPath} HTTP/1.1\r\nHost: docker\r\nUser-Agent: Go-http-client/1.1\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n` +
          `Content-Type: application/json\r\nContent-Length: ${payload.length}\r\n\r\n`,
      );
      conn.write(payload);
    });
    conn.on('data', (c: Buffer) => chunks.push(c));
    conn.on('error', reject);
    conn.on('close', () => {
      const all = Buffer.concat(chunks);
      const end = all.indexOf('\r\n\r\n');
      const status = Number(all.subarray(0, all.indexOf('\r\n')).toString().split(' ')[1]);
      resolve({ status, bytes: end < 0 ? Buffer.alloc(0) : all.subarray(end + 4) });
    });
  });
}

const escapeRegExp = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

const STREAMS = ['stdin', 'stdout', 'stderr', 'system'];

export class Replayer {
  readonly vars = new Map<string, string>();
  private readonly sequence = loadSequence();

  constructor(
    private readonly d: Daemon,
    given: Record<string, string>,
  ) {
    for (const [k, v] of Object.entries(given)) this.vars.set(k, v);
    this.vars.set('registry:query', encodeURIComponent(given.registry ?? ''));
  }

  /** The recorded exchanges of one CRI call (its name in the fixture, e.g. `CreateContainer.app`). */
  recorded(call: string): Exchange[] {
    const c = this.sequence.calls.find((x) => x.call === call);
    if (!c) throw new Error(`no recorded call ${call}`);
    return c.exchanges;
  }

  get(name: string): string {
    const v = this.vars.get(name);
    if (v === undefined) throw new Error(`{{${name}}} is not bound yet`);
    return v;
  }

  fill<T>(v: T): T {
    if (typeof v === 'string') return v.replace(PLACEHOLDER, (_, name: string) => this.get(name)) as T;
    if (Array.isArray(v)) return v.map((x) => this.fill(x)) as T;
    if (v && typeof v === 'object') {
      return Object.fromEntries(Object.entries(v).map(([k, x]) => [this.fill(k), this.fill(x)])) as T;
    }
    return v;
  }

  /**
   * Binds the placeholders a recorded answer holds as whole values to berthd's values at the same
   * places; returns where a bound one differs.
   */
  bind(recorded: unknown, actual: unknown, at = ''): string[] {
    if (typeof recorded === 'string') {
      if (typeof actual !== 'string' || !recorded.includes('{{')) return [];
      const exact = EXACT.exec(recorded)?.[1];
      if (exact && this.vars.has(exact)) {
        return actual === this.vars.get(exact) ? [] : [`${at}: ${JSON.stringify(actual)}, not ${this.get(exact)}`];
      }
      // A value with more around the placeholder (`sha256:{{busyboxImage}}`) binds what it can and
      // is not held to dockerd's layout (a LogPath under berthd's own root).
      const names: string[] = [];
      const pattern = recorded
        .split(PLACEHOLDER)
        .map((part, i) => {
          if (i % 2 === 0)
            return part
              .split(/<time>|<hex64>|<dockerd-path>/)
              .map(escapeRegExp)
              .join('.*?');
          if (this.vars.has(part)) return escapeRegExp(this.get(part));
          names.push(part);
          return '(.+?)';
        })
        .join('');
      const m = new RegExp(`^${pattern}$`).exec(actual);
      if (m) for (const [i, name] of names.entries()) if (!this.vars.has(name)) this.vars.set(name, m[i + 1]!);
      return [];
    }
    if (Array.isArray(recorded) && Array.isArray(actual)) {
      return recorded.flatMap((r, i) => (i < actual.length ? this.bind(r, actual[i], `${at}[${i}]`) : []));
    }
    if (recorded && typeof recorded === 'object' && actual && typeof actual === 'object') {
      return Object.entries(recorded).flatMap(([k, r]) =>
        EXACT.test(k) ? [] : this.bind(r, (actual as Record<string, unknown>)[k], `${at}.${k}`),
      );
    }
    return [];
  }

  /** Sends one recorded request to berthd, placeholders filled. */
  async send(ex: Exchange): Promise<Step> {
    const method = ex.request.method;
    const urlPath = this.fill(ex.request.path);
    const body = ex.request.body === undefined ? undefined : this.fill(ex.request.body);
    const headers: Record<string, string> = {};
    // cri-dockerd sends the auth header on every pull, empty credentials included.
    if (ex.request.headers['X-Registry-Auth']) headers['X-Registry-Auth'] = Buffer.from('{}').toString('base64url');
    let answer: Answer;
    if (ex.response.hijacked) {
      const r = await hijack(this.d.socket, method, urlPath, body);
      const frames = demux(r.bytes).map(([s, text]) => ({ stream: STREAMS[s] ?? String(s), text }));
      answer = { status: r.status, frames, text: r.bytes.toString() };
    } else {
      const r: ApiResponse = await this.d.request(method, urlPath, {
        headers,
        ...(body !== undefined ? { body } : {}),
      });
      answer = { status: r.status, text: r.text };
      if (r.json !== undefined) answer.json = r.json;
      else if (/json/.test(String(r.headers['content-type'])) && r.text.trim()) {
        answer.jsonLines = r.text
          .trim()
          .split('\n')
          .map((l) => JSON.parse(l) as unknown);
      }
    }
    return { recorded: ex, sent: { method, path: urlPath, ...(body !== undefined ? { body } : {}) }, answer };
  }

  /**
   * Replays a recorded call's exchanges in order. `between[i]` runs after exchange i answered (what
   * cri-dockerd does outside the API at that point). Binds placeholders from each answer.
   */
  async call(name: string, between: Record<number, (steps: Step[]) => Promise<void> | void> = {}): Promise<Step[]> {
    const steps: Step[] = [];
    for (const [i, ex] of this.recorded(name).entries()) {
      const step = await this.send(ex);
      steps.push(step);
      if (step.answer.json !== undefined) this.bind(ex.response.json, step.answer.json);
      await between[i]?.(steps);
    }
    return steps;
  }
}

/** `METHOD path → status` for a step, for assertion messages. */
export const describeStep = (s: Step): string =>
  `${s.sent.method} ${s.sent.path} → ${s.answer.status} ${s.answer.text.slice(0, 300)}`;

const isInteger = (v: unknown) => typeof v === 'number' && Number.isInteger(v);

/**
 * Where berthd's JSON would not decode into the Go types cri-dockerd decodes dockerd's into: a
 * value whose JSON type differs from dockerd's at the same place (an integer of dockerd's answered
 * as a fraction, a string as a number, an object as an array). null decodes into anything, and a
 * field only one side has is not a decoding error; arrays are held to their first recorded element.
 */
export function undecodable(recorded: unknown, actual: unknown, at = ''): string[] {
  if (recorded === null || recorded === undefined || actual === null || actual === undefined) return [];
  if (typeof recorded === 'number') {
    if (typeof actual !== 'number') return [`${at}: ${JSON.stringify(actual)} where dockerd has a number`];
    return isInteger(recorded) && !isInteger(actual) ? [`${at}: ${actual} where dockerd has an integer`] : [];
  }
  if (Array.isArray(recorded)) {
    if (!Array.isArray(actual)) return [`${at}: ${typeof actual} where dockerd has an array`];
    return recorded.length ? actual.flatMap((a, i) => undecodable(recorded[0], a, `${at}[${i}]`)) : [];
  }
  if (typeof recorded === 'object') {
    if (typeof actual !== 'object' || Array.isArray(actual))
      return [`${at}: ${JSON.stringify(actual)} where dockerd has an object`];
    return Object.entries(recorded as Record<string, unknown>).flatMap(([k, r]) =>
      EXACT.test(k) ? [] : undecodable(r, (actual as Record<string, unknown>)[k], `${at}.${k}`),
    );
  }
  return typeof recorded === typeof actual
    ? []
    : [`${at}: ${JSON.stringify(actual)} where dockerd has a ${typeof recorded}`];
}

/** The value at a dotted path (`State.Pid`, `NetworkSettings.SandboxKey`, `[0].Names`). */
export function at(v: unknown, dotted: string): unknown {
  let cur = v;
  for (const part of dotted.split('.').filter(Boolean)) {
    const idx = /^\[(\d+)\]$/.exec(part);
    cur = idx ? (cur as unknown[] | undefined)?.[Number(idx[1])] : (cur as Record<string, unknown> | undefined)?.[part];
  }
  return cur;
}

/**
 * The fields cri-dockerd v0.3.7 reads from each answer (libdocker and core/), by route: berthd must
 * answer each of them, with dockerd's JSON type.
 */
export const READS: [RegExp, string[]][] = [
  [/^GET \/v[\d.]+\/version$/, ['Version', 'ApiVersion']],
  [/^GET \/v[\d.]+\/info$/, ['CgroupDriver', 'CgroupVersion', 'DockerRootDir', 'LoggingDriver']],
  [/^GET \/v[\d.]+\/images\/json/, ['[0].Id', '[0].RepoTags', '[0].Size']],
  [/^GET \/v[\d.]+\/images\/.+\/history$/, ['[0].Id', '[0].Created', '[0].Size']],
  [/^GET \/v[\d.]+\/images\/.+\/json$/, ['Id', 'RepoTags', 'RepoDigests', 'Size', 'Config']],
  [/^POST \/v[\d.]+\/containers\/create/, ['Id']],
  [
    /^GET \/v[\d.]+\/containers\/[0-9a-f]{64}\/json/,
    [
      'Id',
      'Name',
      'Created',
      'Image',
      'State.Status',
      'State.Running',
      'State.Pid',
      'State.ExitCode',
      'State.StartedAt',
      'State.FinishedAt',
      'Config.Labels',
      'Config.Image',
      'HostConfig.NetworkMode',
      'HostConfig.IpcMode',
      'NetworkSettings.SandboxKey',
      'NetworkSettings.Networks',
      'Mounts',
      'LogPath',
      'ResolvConfPath',
    ],
  ],
  [
    /^GET \/v[\d.]+\/containers\/json/,
    ['[0].Id', '[0].Names', '[0].Image', '[0].ImageID', '[0].Created', '[0].Labels', '[0].State', '[0].Status'],
  ],
  [/^POST \/v[\d.]+\/containers\/[0-9a-f]{64}\/exec$/, ['Id']],
  [/^GET \/v[\d.]+\/exec\/[0-9a-f]{64}\/json$/, ['ExitCode', 'Running']],
  [
    /^GET \/v[\d.]+\/containers\/[0-9a-f]{64}\/stats/,
    ['read', 'cpu_stats.cpu_usage.total_usage', 'memory_stats.usage'],
  ],
  [/^POST \/v[\d.]+\/containers\/[0-9a-f]{64}\/update$/, ['Warnings']],
];

/** The fields of READS a step's answer lacks, or has where dockerd's answer had none. */
export function missingReads(step: Step): string[] {
  const key = `${step.sent.method} ${step.sent.path}`;
  const paths = READS.find(([re]) => re.test(key))?.[1] ?? [];
  const recorded = step.recorded.response.json;
  return paths.filter((p) => {
    const r = at(recorded, p);
    // A size query's SizeRw is read too, but only there.
    return r !== undefined && r !== null && at(step.answer.json, p) === undefined;
  });
}

/**
 * The fields whose values cri-dockerd turns into what kubelet sees (a container's state, its
 * labels — kubelet's metadata —, its name, its namespaces' modes): berthd's must equal dockerd's,
 * placeholders filled. A list's entries are matched by Id; its `Status` text by its first word
 * (Up, Exited, Created), the only part cri-dockerd parses.
 */
export const EQUALS: [RegExp, string[]][] = [
  [
    /^GET \/v[\d.]+\/containers\/[0-9a-f]{64}\/json/,
    [
      'Name',
      'Image',
      'State.Status',
      'State.Running',
      'State.ExitCode',
      'Config.Labels',
      'Config.User',
      'HostConfig.NetworkMode',
      'HostConfig.IpcMode',
      'HostConfig.UTSMode',
      'HostConfig.CgroupParent',
      'Mounts[Source,Destination,RW]',
    ],
  ],
  [/^GET \/v[\d.]+\/containers\/json/, ['Names', 'Image', 'ImageID', 'State', 'Labels']],
  [/^GET \/v[\d.]+\/exec\/[0-9a-f]{64}\/json$/, ['ExitCode', 'Running']],
  [/^GET \/v[\d.]+\/images\/.+\/json$/, ['RepoTags', 'RepoDigests']],
];

const firstWord = (v: unknown) => String(v).split(' ')[0];

/**
 * The value at a path of EQUALS; `List[A,B]` is the list's entries cut to those fields, in a fixed
 * order (cri-dockerd maps each mount on its own: their order is not what it reads).
 */
function pick(v: unknown, spec: string): unknown {
  const m = /^(.+)\[(.+)\]$/.exec(spec);
  if (!m) return at(v, spec);
  const list = at(v, m[1]!);
  if (!Array.isArray(list)) return list;
  const keys = m[2]!.split(',');
  return list
    .map((e) => Object.fromEntries(keys.map((k) => [k, (e as Record<string, unknown>)[k]])))
    .sort((a, b) => JSON.stringify(a).localeCompare(JSON.stringify(b)));
}

/** Deep equality where a recorded `<hex64>`, `<time>` or `<dockerd-path>` stands for any text. */
function matches(want: unknown, got: unknown): boolean {
  if (typeof want === 'string' && /<hex64>|<time>|<dockerd-path>/.test(want)) {
    const pattern = want
      .split(/(<hex64>|<time>|<dockerd-path>)/)
      .map((part, i) => (i % 2 ? '.+?' : escapeRegExp(part)));
    return typeof got === 'string' && new RegExp(`^${pattern.join('')}$`).test(got);
  }
  if (Array.isArray(want))
    return Array.isArray(got) && got.length === want.length && want.every((w, i) => matches(w, got[i]));
  if (want && typeof want === 'object') {
    if (!got || typeof got !== 'object') return false;
    const keys = new Set([...Object.keys(want), ...Object.keys(got)]);
    return [...keys].every((k) => matches((want as Record<string, unknown>)[k], (got as Record<string, unknown>)[k]));
  }
  return want === got;
}

/** Where a step's answer has other values than dockerd's in the fields of EQUALS. */
export function unequal(replayer: Replayer, step: Step): string[] {
  const key = `${step.sent.method} ${step.sent.path}`;
  const paths = EQUALS.find(([re]) => re.test(key))?.[1] ?? [];
  const recorded = step.recorded.response.json;
  const actual = step.answer.json;
  const compare = (r: unknown, a: unknown, where: string): string[] =>
    paths.flatMap((p) => {
      const want = replayer.fill(pick(r, p));
      const got = pick(a, p);
      return matches(want, got) ? [] : [`${where}${p}: ${JSON.stringify(got)}, dockerd ${JSON.stringify(want)}`];
    });
  if (!Array.isArray(recorded)) return compare(recorded, actual, '');
  const byId = new Map(((actual as { Id: string }[] | undefined) ?? []).map((c) => [c.Id, c]));
  const out: string[] = [];
  if ((actual as unknown[] | undefined)?.length !== recorded.length) {
    out.push(`${(actual as unknown[] | undefined)?.length} entries, dockerd ${recorded.length}`);
  }
  for (const r of recorded as { Id: string; Status?: string }[]) {
    const id = replayer.fill(r.Id);
    const a = byId.get(id) as { Status?: string } | undefined;
    if (!a) {
      out.push(`no entry ${id}`);
      continue;
    }
    out.push(...compare(r, a, `[${id.slice(0, 12)}].`));
    if (r.Status !== undefined && firstWord(a.Status) !== firstWord(r.Status)) {
      out.push(`[${id.slice(0, 12)}].Status: ${JSON.stringify(a.Status)}, dockerd ${JSON.stringify(r.Status)}`);
    }
  }
  return out;
}

/** Everything wrong with a step's answer against dockerd's: status, the read fields, their JSON types, the bound ids. */
export function mismatches(replayer: Replayer, step: Step): string[] {
  const out: string[] = [];
  const rec = step.recorded.response;
  if (step.answer.status !== rec.status)
    out.push(`status ${step.answer.status}, dockerd ${rec.status}: ${step.answer.text.slice(0, 300)}`);
  if (rec.json !== undefined && step.answer.status === rec.status) {
    out.push(...missingReads(step).map((p) => `no ${p}`));
    out.push(...undecodable(rec.json, step.answer.json));
    out.push(...replayer.bind(rec.json, step.answer.json));
    out.push(...unequal(replayer, step));
  }
  if (rec.jsonLines) {
    const errors = (step.answer.jsonLines ?? []).filter((l) => (l as { error?: unknown }).error);
    if (errors.length) out.push(`stream errors: ${JSON.stringify(errors)}`);
  }
  return out.map((m) => `${step.sent.method} ${step.sent.path}: ${m}`);
}
