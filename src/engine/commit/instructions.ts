// `docker commit --change`: Dockerfile instructions applied to a container
// config, parsed and dispatched as dockerd's builder does (BuildFromConfig),
// and dockerd's merge of the result over the container's own config.
//
// Parsing follows BuildKit's Dockerfile parser: the changes are joined into
// one Dockerfile; `\` continues a line; `#` lines are comments. ENV and LABEL
// take `k=v ...` (or the legacy `k v`), words keep their quotes until they
// are expanded; CMD, ENTRYPOINT, VOLUME and HEALTHCHECK CMD take a JSON array
// or a shell form. Expansion ($VAR, ${VAR}, ${VAR:-x}, ${VAR:+x}, quotes,
// escapes) uses the config's Env as it stands before each instruction, for
// every instruction except CMD, ENTRYPOINT, HEALTHCHECK and ONBUILD.
import { invalidParameter } from '../../errors.js';
import { normalizeSignal } from '../signals.js';
import type { ContainerConfigFields } from '../images/config.js';

const COMMANDS = new Set([
  'cmd',
  'entrypoint',
  'env',
  'expose',
  'healthcheck',
  'label',
  'onbuild',
  'stopsignal',
  'user',
  'volume',
  'workdir',
]);
const ESCAPE = '\\';
const DEFAULT_SHELL = ['/bin/sh', '-c'];

interface Instruction {
  /** Lower case, as dockerd names it in errors. */
  command: string;
  /** The text after the command word (and its flags), trimmed. */
  rest: string;
  flags: Map<string, string>;
  /** The whole line, for ONBUILD. */
  original: string;
}

/**
 * Applies `changes` (each one or more Dockerfile lines) to a copy of `config`.
 * Throws `invalid` with dockerd's wording on anything it would refuse.
 */
export function applyChanges(config: ContainerConfigFields, changes: readonly string[]): ContainerConfigFields {
  const out = structuredClone(config);
  if (changes.length === 0) return out;
  const instructions = parseDockerfile(changes.join('\n'));
  for (const i of instructions) {
    if (!COMMANDS.has(i.command)) throw invalidParameter(`${i.command} is not a valid change command`);
  }
  let cmdSet = false;
  for (const i of instructions) {
    if (i.command !== 'healthcheck' && i.flags.size > 0)
      throw invalidParameter(`Unknown flag: ${[...i.flags.keys()][0]}`);
    // Every word of an instruction sees the Env from before it (`ENV A=1 B=$A` takes the old A).
    const env = out.Env ?? [];
    const expand = (word: string) => expandWord(word, env);
    switch (i.command) {
      case 'env':
        for (const [k, v] of nameValues(i, 'ENV')) setEnv(out, `${expand(k)}=${expand(v)}`);
        break;
      case 'label':
        out.Labels = { ...(out.Labels ?? {}) };
        for (const [k, v] of nameValues(i, 'LABEL')) out.Labels[expand(k)] = expand(v);
        break;
      case 'expose':
        if (i.rest === '') throw atLeastOne('EXPOSE');
        out.ExposedPorts = { ...(out.ExposedPorts ?? {}) };
        for (const w of splitWhitespace(i.rest)) for (const p of portSpec(expand(w))) out.ExposedPorts[p] = {};
        break;
      case 'user':
        if (i.rest === '') throw exactlyOne('USER');
        out.User = expand(i.rest);
        break;
      case 'workdir': {
        if (i.rest === '') throw exactlyOne('WORKDIR');
        const dir = expand(i.rest);
        out.WorkingDir = dir.startsWith('/') ? dir : joinClean('/', out.WorkingDir ?? '', dir);
        break;
      }
      case 'stopsignal': {
        if (i.rest === '') throw exactlyOne('STOPSIGNAL');
        const sig = expand(i.rest);
        if (/^\d+$/.test(sig) && Number(sig) === 0) throw invalidParameter(`Invalid signal: ${sig}`);
        normalizeSignal(sig);
        out.StopSignal = sig;
        break;
      }
      case 'volume': {
        const list = jsonOr(i.rest, () => splitWhitespace(i.rest));
        if (list.length === 0) throw atLeastOne('VOLUME');
        out.Volumes = { ...(out.Volumes ?? {}) };
        for (const v of list) {
          const path = expand(v).trim();
          if (path === '') throw invalidParameter('VOLUME specified can not be an empty string');
          out.Volumes[path] = {};
        }
        break;
      }
      case 'cmd':
        out.Cmd = commandLine(i.rest, out);
        if (i.rest !== '') cmdSet = true;
        break;
      case 'entrypoint':
        out.Entrypoint = commandLine(i.rest, out);
        if (!cmdSet) out.Cmd = null;
        break;
      case 'onbuild':
        out.OnBuild = [...(out.OnBuild ?? []), onbuildTrigger(i)];
        break;
      case 'healthcheck':
        out.Healthcheck = healthcheck(i);
        break;
    }
  }
  return out;
}

/**
 * dockerd's merge (daemon/commit.go): what the new config leaves unset comes
 * from the container's config.
 */
export function mergeConfig(user: ContainerConfigFields, container: ContainerConfigFields): ContainerConfigFields {
  const out = structuredClone(user);
  if (!out.User) out.User = container.User ?? '';
  if (!out.ExposedPorts || Object.keys(out.ExposedPorts).length === 0)
    out.ExposedPorts = container.ExposedPorts ?? null;
  else out.ExposedPorts = { ...(container.ExposedPorts ?? {}), ...out.ExposedPorts };
  if (!out.Env?.length) out.Env = container.Env ?? null;
  else {
    const keys = new Set(out.Env.map(envKey));
    out.Env = [...out.Env, ...(container.Env ?? []).filter((e) => !keys.has(envKey(e)))];
  }
  out.Labels = { ...(container.Labels ?? {}), ...(out.Labels ?? {}) };
  if (!out.Entrypoint?.length) {
    if (!out.Cmd?.length) {
      out.Cmd = container.Cmd ?? null;
      if (container.ArgsEscaped !== undefined) out.ArgsEscaped = container.ArgsEscaped;
    }
    if (out.Entrypoint === undefined || out.Entrypoint === null) out.Entrypoint = container.Entrypoint ?? null;
  }
  const ch = container.Healthcheck as HealthConfig | undefined | null;
  if (ch) {
    const uh = out.Healthcheck as HealthConfig | undefined | null;
    if (!uh) out.Healthcheck = ch;
    else {
      if (!uh.Test?.length) uh.Test = ch.Test;
      for (const k of ['Interval', 'Timeout', 'StartPeriod', 'StartInterval', 'Retries'] as const)
        if (!uh[k] && ch[k]) uh[k] = ch[k];
    }
  }
  if (!out.WorkingDir) out.WorkingDir = container.WorkingDir ?? '';
  if (!out.Volumes || Object.keys(out.Volumes).length === 0) out.Volumes = container.Volumes ?? null;
  else out.Volumes = { ...out.Volumes, ...(container.Volumes ?? {}) };
  if (!out.StopSignal && container.StopSignal) out.StopSignal = container.StopSignal;
  return out;
}

// ---- parsing -------------------------------------------------------------------

/** Logical lines (continuations joined, comments and blanks dropped) → instructions. */
function parseDockerfile(text: string): Instruction[] {
  const out: Instruction[] = [];
  let pending = '';
  for (const raw of text.split(/\r?\n/)) {
    const line = raw.replace(/^\s+/, '');
    if (line.startsWith('#')) continue;
    const cont = /\\[ \t]*$/.exec(line);
    if (cont) {
      pending += line.slice(0, cont.index);
      continue;
    }
    pending += line;
    if (pending.trim() !== '') out.push(instruction(pending.trim()));
    pending = '';
  }
  if (pending.trim() !== '') out.push(instruction(pending.trim()));
  return out;
}

function instruction(line: string): Instruction {
  const m = /^(\S+)\s*([\s\S]*)$/.exec(line)!;
  let rest = m[2]!;
  const flags = new Map<string, string>();
  for (let f = /^--([^\s=]+)(?:=(\S*))?\s*/.exec(rest); f; f = /^--([^\s=]+)(?:=(\S*))?\s*/.exec(rest)) {
    flags.set(f[1]!, f[2] ?? '');
    rest = rest.slice(f[0].length);
  }
  return { command: m[1]!.toLowerCase(), rest: rest.trim(), flags, original: line };
}

const atLeastOne = (cmd: string) => invalidParameter(`${cmd} requires at least one argument`);
const exactlyOne = (cmd: string) => invalidParameter(`${cmd} requires exactly one argument`);

/** A JSON array of strings when `rest` is one; otherwise `fallback()`. Non-string elements are refused, as dockerd does. */
function jsonOr(rest: string, fallback: () => string[]): string[] {
  if (!rest.startsWith('[')) return fallback();
  let parsed: unknown;
  try {
    parsed = JSON.parse(rest);
  } catch {
    return fallback();
  }
  if (!Array.isArray(parsed)) return fallback();
  if (!parsed.every((x) => typeof x === 'string'))
    throw invalidParameter('when using JSON array syntax, arrays must be comprised of strings only');
  return parsed;
}

/** CMD/ENTRYPOINT: the JSON form as is; the shell form run by the config's Shell. */
function commandLine(rest: string, config: ContainerConfigFields): string[] {
  let json = true;
  const args = jsonOr(rest, () => {
    json = false;
    return rest === '' ? [] : [rest];
  });
  return json ? args : [...(config.Shell?.length ? config.Shell : DEFAULT_SHELL), ...args];
}

const splitWhitespace = (s: string) => s.split(/[\t\v\f\r ]+/).filter(Boolean);

/** ENV/LABEL pairs: `k=v k2="v 2"`, or the legacy `k rest of line`. */
function nameValues(i: Instruction, cmd: string): Array<[string, string]> {
  const words = parseWords(i.rest);
  if (words.length === 0) throw atLeastOne(cmd);
  if (!words[0]!.includes('=')) {
    const parts = /^(\S+)\s+([\s\S]+)$/.exec(i.rest);
    if (!parts) throw invalidParameter(`${cmd} must have two arguments`);
    return [[parts[1]!, parts[2]!]];
  }
  return words.map((w) => {
    const eq = w.indexOf('=');
    if (eq < 0) throw invalidParameter(`Syntax error - can't find = in "${w}". Must be of the form: name=value`);
    return [w.slice(0, eq), w.slice(eq + 1)];
  });
}

/** BuildKit's parseWords: whitespace-separated words; quotes and escapes are kept for expansion. */
function parseWords(rest: string): string[] {
  const words: string[] = [];
  let word = '';
  let quote = '';
  let blankOK = false;
  let inWord = false;
  const chars = [...rest];
  for (let i = 0; i < chars.length; i++) {
    let ch = chars[i]!;
    if (!inWord) {
      if (/\s/.test(ch)) continue;
      inWord = true;
    }
    if (quote === '') {
      if (/\s/.test(ch)) {
        if (blankOK || word.length > 0) words.push(word);
        word = '';
        blankOK = false;
        inWord = false;
        continue;
      }
      if (ch === "'" || ch === '"') {
        quote = ch;
        blankOK = true;
      } else if (ch === ESCAPE) {
        if (i + 1 === chars.length) continue;
        word += ch;
        ch = chars[++i]!;
      }
      word += ch;
      continue;
    }
    if (ch === quote) quote = '';
    else if (ch === ESCAPE && quote !== "'") {
      if (i + 1 === chars.length) continue;
      word += ch;
      ch = chars[++i]!;
    }
    word += ch;
  }
  if (inWord && (blankOK || word.length > 0)) words.push(word);
  return words;
}

// ---- expansion -----------------------------------------------------------------

/** BuildKit's ProcessWord: quotes removed, escapes resolved, variables replaced from `env`. */
export function expandWord(word: string, env: readonly string[]): string {
  const lookup = (name: string): string | undefined => {
    const hit = env.find((e) => envKey(e) === name);
    return hit === undefined ? undefined : hit.slice(name.length + 1);
  };
  let out = '';
  let i = 0;
  const variable = (): string => {
    // word[i] === '$'
    const next = word[i + 1];
    if (next === '{') {
      const close = matchingBrace(word, i + 1);
      const body = word.slice(i + 2, close);
      i = close + 1;
      const m = /^([A-Za-z_][A-Za-z0-9_]*|[0-9])(?:(:?[-+?])([\s\S]*))?$/.exec(body);
      if (!m) throw invalidParameter(`failed to process "${word}": missing ':' in substitution`);
      const value = lookup(m[1]!);
      const op = m[2];
      const arg = () => expandWord(m[3] ?? '', env);
      const unset = op?.startsWith(':') ? !value : value === undefined;
      switch (op?.replace(':', '')) {
        case '-':
          return unset ? arg() : value!;
        case '+':
          return unset ? '' : arg();
        case '?':
          if (unset)
            throw invalidParameter(`failed to process "${word}": ${m[1]}: ${m[3] || 'is not allowed to be unset'}`);
          return value!;
        default:
          return value ?? '';
      }
    }
    const name = /^(?:[A-Za-z_][A-Za-z0-9_]*|[0-9])/.exec(word.slice(i + 1))?.[0];
    if (!name) {
      i++;
      return '$';
    }
    i += 1 + name.length;
    return lookup(name) ?? '';
  };
  while (i < word.length) {
    const ch = word[i]!;
    if (ch === ESCAPE) {
      if (i + 1 < word.length) out += word[i + 1];
      i += 2;
    } else if (ch === "'") {
      const end = word.indexOf("'", i + 1);
      if (end < 0)
        throw invalidParameter(
          `failed to process "${word}": unexpected end of statement while looking for matching single-quote`,
        );
      out += word.slice(i + 1, end);
      i = end + 1;
    } else if (ch === '"') {
      i++;
      for (;;) {
        if (i >= word.length)
          throw invalidParameter(
            `failed to process "${word}": unexpected end of statement while looking for matching double-quote`,
          );
        const c = word[i]!;
        if (c === '"') break;
        if (c === '$') out += variable();
        else if (c === ESCAPE && i + 1 < word.length && '"$\\'.includes(word[i + 1]!)) {
          out += word[i + 1];
          i += 2;
        } else if (c === ESCAPE && i + 1 === word.length) i++;
        else {
          out += c;
          i++;
        }
      }
      i++;
    } else if (ch === '$') out += variable();
    else {
      out += ch;
      i++;
    }
  }
  return out;
}

function matchingBrace(word: string, open: number): number {
  let depth = 0;
  for (let j = open; j < word.length; j++) {
    if (word[j] === '{') depth++;
    else if (word[j] === '}' && --depth === 0) return j;
  }
  throw invalidParameter(`failed to process "${word}": missing '}'`);
}

// ---- dispatch helpers ----------------------------------------------------------

const envKey = (e: string) => e.split('=', 1)[0]!;

function setEnv(config: ContainerConfigFields, kv: string): void {
  const env = [...(config.Env ?? [])];
  const at = env.findIndex((e) => envKey(e) === envKey(kv));
  if (at >= 0) env[at] = kv;
  else env.push(kv);
  config.Env = env;
}

/** path.Join: joined, cleaned, never empty. */
function joinClean(...parts: string[]): string {
  const out: string[] = [];
  for (const c of parts.join('/').split('/')) {
    if (c === '' || c === '.') continue;
    if (c === '..') out.pop();
    else out.push(c);
  }
  return `/${out.join('/')}`;
}

/** nat.ParsePortSpecs for one spec: `80`, `80/udp`, `8000-8002/tcp`, `ip:host:container/proto`. */
function portSpec(spec: string): string[] {
  const slash = spec.lastIndexOf('/');
  const proto = slash >= 0 ? spec.slice(slash + 1).toLowerCase() : 'tcp';
  const raw = (slash >= 0 ? spec.slice(0, slash) : spec).split(':').at(-1)!;
  if (!['tcp', 'udp', 'sctp'].includes(proto)) throw invalidParameter(`invalid proto: ${proto}`);
  const m = /^(\d+)(?:-(\d+))?$/.exec(raw);
  const [start, end] = m ? [Number(m[1]), Number(m[2] ?? m[1])] : [NaN, NaN];
  if (!m || start > 65535 || end > 65535) throw invalidParameter(`invalid containerPort: ${raw}`);
  if (end < start) throw invalidParameter(`invalid range specified for container: ${raw}`);
  return Array.from({ length: end - start + 1 }, (_, k) => `${start + k}/${proto}`);
}

function onbuildTrigger(i: Instruction): string {
  const trigger = /^(\S+)/.exec(i.rest)?.[1]?.toUpperCase();
  if (!trigger) throw atLeastOne('ONBUILD');
  if (trigger === 'ONBUILD') throw invalidParameter("Chaining ONBUILD via `ONBUILD ONBUILD` isn't allowed");
  if (trigger === 'FROM' || trigger === 'MAINTAINER')
    throw invalidParameter(`${trigger} isn't allowed as an ONBUILD trigger`);
  return i.original.replace(/^\s*ONBUILD\s*/i, '');
}

interface HealthConfig {
  Test?: string[];
  Interval?: number;
  Timeout?: number;
  StartPeriod?: number;
  StartInterval?: number;
  Retries?: number;
}

function healthcheck(i: Instruction): HealthConfig {
  const m = /^(\S+)\s*([\s\S]*)$/.exec(i.rest);
  if (!m) throw atLeastOne('HEALTHCHECK');
  const type = m[1]!.toUpperCase();
  const args = m[2]!.trim();
  if (type === 'NONE') {
    if (args !== '') throw invalidParameter('HEALTHCHECK NONE takes no arguments');
    return { Test: ['NONE'] };
  }
  if (type !== 'CMD') throw invalidParameter(`Unknown type "${type}" in HEALTHCHECK (try CMD)`);
  const known = ['interval', 'timeout', 'start-period', 'start-interval', 'retries'];
  for (const f of i.flags.keys()) if (!known.includes(f)) throw invalidParameter(`Unknown flag: ${f}`);
  let json = true;
  const cmd = jsonOr(args, () => {
    json = false;
    return args === '' ? [] : [args];
  });
  if (cmd.length === 0) throw invalidParameter('Missing command after HEALTHCHECK CMD');
  const out: HealthConfig = { Test: [json ? 'CMD' : 'CMD-SHELL', ...cmd] };
  const duration = (flag: string, field: 'Interval' | 'Timeout' | 'StartPeriod' | 'StartInterval') => {
    const v = i.flags.get(flag);
    if (!v) return;
    const ns = goDuration(v);
    if (ns !== 0 && ns < 1_000_000) throw invalidParameter(`${field} "${v}" cannot be less than 1ms`);
    out[field] = ns;
  };
  duration('interval', 'Interval');
  duration('timeout', 'Timeout');
  duration('start-period', 'StartPeriod');
  duration('start-interval', 'StartInterval');
  const retries = i.flags.get('retries');
  if (retries) {
    if (!/^-?\d+$/.test(retries)) throw invalidParameter(`strconv.ParseInt: parsing "${retries}": invalid syntax`);
    if (Number(retries) < 1) throw invalidParameter(`--retries must be at least 1 (not ${retries})`);
    out.Retries = Number(retries);
  }
  return out;
}

const UNITS: Record<string, number> = { ns: 1, us: 1e3, µs: 1e3, ms: 1e6, s: 1e9, m: 60e9, h: 3600e9 };

/** Go's time.ParseDuration, in nanoseconds. */
function goDuration(s: string): number {
  if (s === '0') return 0;
  const re = /(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)/y;
  let total = 0;
  let at = 0;
  for (let m = re.exec(s); m; m = re.exec(s)) {
    total += Number(m[1]) * UNITS[m[2]!]!;
    at = re.lastIndex;
  }
  if (at === 0 || at !== s.length) throw invalidParameter(`time: invalid duration "${s}"`);
  return Math.round(total);
}
