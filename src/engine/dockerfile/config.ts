// The instructions that only change the image config (ENV LABEL EXPOSE USER
// WORKDIR VOLUME STOPSIGNAL CMD ENTRYPOINT HEALTHCHECK SHELL ONBUILD
// MAINTAINER), applied as dockerd's dispatchers apply them. Shared by the
// builder and `docker commit --change`, which dockerd runs through the same
// dispatchers.
import { invalidParameter } from '../../errors.js';
import { normalizeSignal } from '../signals.js';
import { expandWord, expandWords } from './expand.js';
import type { ArgInstr, CopyInstr, FromInstr, Instruction, RunInstr } from './instructions.js';
import { goQuote } from './words.js';

/** The fields of a container/image config these instructions touch (engine/images' ContainerConfigFields extends it). */
export interface ConfigFields {
  User?: string;
  Env?: string[] | null;
  Cmd?: string[] | null;
  Entrypoint?: string[] | null;
  WorkingDir?: string;
  Labels?: Record<string, string> | null;
  ExposedPorts?: Record<string, object> | null;
  Volumes?: Record<string, object> | null;
  StopSignal?: string;
  OnBuild?: string[] | null;
  Shell?: string[] | null;
  Healthcheck?: unknown;
  ArgsEscaped?: boolean;
}

export type ConfigInstruction = Exclude<Instruction, FromInstr | RunInstr | CopyInstr | ArgInstr>;

export const isConfigInstruction = (i: Instruction): i is ConfigInstruction =>
  i.kind !== 'from' && i.kind !== 'run' && i.kind !== 'copy' && i.kind !== 'add' && i.kind !== 'arg';

/** What dockerd keeps across a stage's instructions beside the config. */
export interface ConfigState {
  /** A CMD with arguments was given in this stage: a later ENTRYPOINT then keeps it. */
  cmdSet: boolean;
}

export const DEFAULT_SHELL: readonly string[] = ['/bin/sh', '-c'];

export interface HealthConfig {
  Test?: string[];
  Interval?: number;
  Timeout?: number;
  StartPeriod?: number;
  StartInterval?: number;
  Retries?: number;
}

/**
 * Applies `instr` to `config` in place, and returns dockerd's comment for the step
 * (`ENV A=1`, `CMD ["/bin/sh" "-c" "x"]`…): the builder records it in the image's
 * history and cache key as `nopCommand` makes them. Words are expanded (where
 * dockerd expands them: not CMD, ENTRYPOINT, HEALTHCHECK, SHELL, ONBUILD,
 * MAINTAINER) from `env`, the environment of that moment (the config's Env, plus
 * the build args in a build). `state` is the stage's; without one, every
 * ENTRYPOINT clears the Cmd.
 */
export function applyConfigInstruction(
  config: ConfigFields,
  instr: ConfigInstruction,
  env: readonly string[],
  state: ConfigState = { cmdSet: false },
): string {
  const esc = instr.node.escape;
  const expand = (word: string) => expandWord(word, env, esc);
  switch (instr.kind) {
    case 'env': {
      const list = [...(config.Env ?? [])];
      let comment = 'ENV';
      for (const [k, v] of instr.pairs) {
        const name = expand(k);
        const kv = `${name}=${expand(v)}`;
        comment += ` ${kv}`;
        const at = list.findIndex((e) => envKey(e) === name);
        if (at >= 0) list[at] = kv;
        else list.push(kv);
      }
      config.Env = list;
      return comment;
    }
    case 'label': {
      const labels = { ...(config.Labels ?? {}) };
      let comment = 'LABEL';
      for (const [k, v] of instr.pairs) {
        const [key, value] = instr.noExpand ? [k, v] : [expand(k), expand(v)];
        labels[key] = value;
        comment += ` ${key}=${value}`;
      }
      config.Labels = labels;
      return comment;
    }
    case 'expose': {
      const ports = { ...(config.ExposedPorts ?? {}) };
      const specs = instr.ports.flatMap((p) => expandWords(p, env, esc));
      for (const spec of specs) for (const p of portSpec(spec)) ports[p] = {};
      config.ExposedPorts = ports;
      return `EXPOSE ${specs.join(' ')}`;
    }
    case 'user':
      config.User = expand(instr.value);
      return `USER ${config.User}`;
    case 'workdir': {
      const dir = expand(instr.value);
      if (dir === '') throw invalidParameter('cannot normalize nothing');
      config.WorkingDir = dir.startsWith('/') ? dir : joinClean('/', config.WorkingDir ?? '', dir);
      return `WORKDIR ${config.WorkingDir}`;
    }
    case 'volume': {
      const volumes = { ...(config.Volumes ?? {}) };
      const paths = instr.paths.map(expand);
      for (const path of paths) {
        if (path === '') throw invalidParameter('VOLUME specified can not be an empty string');
        volumes[path] = {};
      }
      config.Volumes = volumes;
      return `VOLUME [${paths.join(' ')}]`;
    }
    case 'stopsignal': {
      const sig = expand(instr.value);
      checkStopSignal(sig);
      config.StopSignal = sig;
      return `STOPSIGNAL ${sig}`;
    }
    case 'cmd':
      config.Cmd = commandLine(instr.args, instr.json, config, false);
      delete config.ArgsEscaped;
      if (instr.args.length > 0) state.cmdSet = true;
      return `CMD ${goQuoteList(config.Cmd)}`;
    case 'entrypoint':
      config.Entrypoint = commandLine(instr.args, instr.json, config, true);
      delete config.ArgsEscaped;
      if (!state.cmdSet) config.Cmd = null;
      return `ENTRYPOINT ${goQuoteList(config.Entrypoint)}`;
    case 'healthcheck': {
      const h: HealthConfig = { Test: instr.test === 'NONE' ? ['NONE'] : [...instr.test] };
      if (instr.test !== 'NONE') {
        if (instr.interval) h.Interval = instr.interval;
        if (instr.timeout) h.Timeout = instr.timeout;
        if (instr.startPeriod) h.StartPeriod = instr.startPeriod;
        if (instr.startInterval) h.StartInterval = instr.startInterval;
        if (instr.retries) h.Retries = instr.retries;
      }
      config.Healthcheck = h;
      return `HEALTHCHECK ${healthText(h)}`;
    }
    case 'shell':
      config.Shell = [...instr.args];
      return `SHELL [${config.Shell.join(' ')}]`;
    case 'onbuild':
      config.OnBuild = [...(config.OnBuild ?? []), instr.expression];
      return `ONBUILD ${instr.expression}`;
    case 'maintainer':
      // The author is the image's, not the config's: the builder records it.
      return `MAINTAINER ${instr.name}`;
  }
}

/**
 * The Cmd dockerd gives a step that runs nothing, for its cache key and history
 * (`/bin/sh -c #(nop)  ENV A=1` once joined): the config's Shell, then `#(nop) `
 * and the step's comment. WORKDIR's is one word (`/bin/sh -c #(nop) WORKDIR /x`):
 * dockerd makes that step by another path.
 */
export function nopCommand(config: ConfigFields, comment: string): string[] {
  const shell = config.Shell?.length ? config.Shell : DEFAULT_SHELL;
  return comment.startsWith('WORKDIR ') ? [...shell, `#(nop) ${comment}`] : [...shell, '#(nop) ', comment];
}

/** Go's `%q` of a string slice: `["a" "b"]`. */
export function goQuoteList(list: readonly string[] | null | undefined): string {
  return `[${(list ?? []).map(goQuote).join(' ')}]`;
}

/** Go's time.Duration String: `1m30s`, `1.5s`, `100ms`, `0s`. */
export function goDurationString(ns: number): string {
  if (ns === 0) return '0s';
  const neg = ns < 0;
  let n = Math.abs(ns);
  let out: string;
  if (n < 1e9) {
    const [unit, size] = n < 1e3 ? ['ns', 1] : n < 1e6 ? ['µs', 1e3] : ['ms', 1e6];
    out = `${trimFraction(n / size)}${unit}`;
  } else {
    const h = Math.floor(n / 3600e9);
    n -= h * 3600e9;
    const m = Math.floor(n / 60e9);
    n -= m * 60e9;
    out = `${h ? `${h}h` : ''}${h || m ? `${m}m` : ''}${trimFraction(n / 1e9)}s`;
  }
  return neg ? `-${out}` : out;
}

const trimFraction = (x: number): string => {
  const s = x.toFixed(9);
  return s.replace(/\.?0+$/, '');
};

/** Go's `%q` of dockerd's *HealthConfig, as its HEALTHCHECK step comment prints it. */
function healthText(h: HealthConfig): string {
  const d = (ns?: number) => `"${goDurationString(ns ?? 0)}"`;
  const retries = h.Retries ?? 0;
  const r = retries < 0x20 ? `'\\x${retries.toString(16).padStart(2, '0')}'` : `'${String.fromCodePoint(retries)}'`;
  const start = h.StartInterval ? ` ${d(h.StartInterval)}` : '';
  return `&{${goQuoteList(h.Test)} ${d(h.Interval)} ${d(h.Timeout)} ${d(h.StartPeriod)}${start} ${r}}`;
}

/**
 * RUN/CMD/ENTRYPOINT's command: the JSON form as it is, the shell form run by the
 * config's Shell. `emptyAsNull` (ENTRYPOINT): no arguments clears it.
 */
export function commandLine(
  args: readonly string[],
  json: boolean,
  config: ConfigFields,
  emptyAsNull = false,
): string[] | null {
  if (emptyAsNull && args.length === 0) return null;
  if (json) return [...args];
  const line = args.length === 0 ? [] : [args.join(' ')];
  return [...(config.Shell?.length ? config.Shell : DEFAULT_SHELL), ...line];
}

/**
 * dockerd's signal.ParseSignal: any non-zero number, or a name with or without SIG
 * (the real-time ones too: systemd images stop with SIGRTMIN+3).
 */
function checkStopSignal(sig: string): void {
  if (/^[+-]?\d+$/.test(sig)) {
    if (Number(sig) === 0) throw invalidParameter(`Invalid signal: ${sig}`);
    return;
  }
  normalizeSignal(sig);
}

export const envKey = (e: string): string => e.split('=', 1)[0]!;

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
export function portSpec(spec: string): string[] {
  const slash = spec.lastIndexOf('/');
  const proto = slash >= 0 ? spec.slice(slash + 1).toLowerCase() : 'tcp';
  const raw = (slash >= 0 ? spec.slice(0, slash) : spec).split(':').at(-1)!;
  if (!['tcp', 'udp', 'sctp'].includes(proto)) throw invalidParameter(`invalid proto: ${proto}`);
  const m = /^(\d+)(?:-(\d+))?$/.exec(raw);
  const [start, end] = m ? [Number(m[1]), Number(m[2] ?? m[1])] : [Number.NaN, Number.NaN];
  if (!m || start > 65535 || end > 65535) throw invalidParameter(`invalid containerPort: ${raw}`);
  // dockerd words a reversed range as any other bad port.
  if (end < start) throw invalidParameter(`invalid containerPort: ${raw}`);
  return Array.from({ length: end - start + 1 }, (_, k) => `${start + k}/${proto}`);
}
