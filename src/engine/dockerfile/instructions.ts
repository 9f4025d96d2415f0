// Nodes into typed instructions, checked as dockerd 20.10's classic builder
// checks them (BuildKit's instructions.ParseInstruction, vendored) and in its
// words. Words stay unexpanded: the builder expands them at dispatch, with the
// environment of that moment.
import { invalidParameter } from '../../errors.js';
import { expandVariables, expandWord } from './expand.js';
import { type Heredoc, heredocBody, parseHeredocWord } from './heredoc.js';
import { goQuote, type Node, parseDockerfile, trimSpace } from './parse.js';
import { parseMount } from './run-mount.js';

interface Base {
  node: Node;
}
export interface FromInstr extends Base {
  kind: 'from';
  image: string;
  /** The `AS` name, lower-cased. */
  name?: string;
  platform?: string;
}
/** Shell form: `args` is `[rest]` (or `[]`), and the builder prepends the Shell at dispatch. */
export interface RunInstr extends Base {
  kind: 'run';
  args: string[];
  json: boolean;
  /** `--mount` values as written (expanded and parsed at dispatch: run-mount.ts). */
  mounts: string[];
  /** The here-documents the line starts (shell form only). */
  heredocs: Heredoc[];
  /** `--network=none|host` (default: the build's). */
  network?: 'none' | 'host';
}
export interface CmdInstr extends Base {
  kind: 'cmd';
  args: string[];
  json: boolean;
}
export interface EntrypointInstr extends Base {
  kind: 'entrypoint';
  args: string[];
  json: boolean;
}
export interface EnvInstr extends Base {
  kind: 'env';
  pairs: Array<[string, string]>;
}
export interface LabelInstr extends Base {
  kind: 'label';
  pairs: Array<[string, string]>;
  /** The build's `labels` query: taken as given, never expanded (queryLabel makes these). */
  noExpand?: true;
}
export interface ArgInstr extends Base {
  kind: 'arg';
  args: Array<{ name: string; value?: string }>;
}
export interface ExposeInstr extends Base {
  kind: 'expose';
  /** Sorted, as dockerd sorts them. */
  ports: string[];
}
export interface CopyInstr extends Base {
  kind: 'copy' | 'add';
  sources: string[];
  /** Here-documents among the sources (`COPY <<EOF /x`): each a file named as its word, its body (chomped) the content. */
  contents: Array<{ name: string; data: string; expand: boolean }>;
  dest: string;
  /** COPY only. */
  from?: string;
  chown?: string;
  /** Octal, as written. */
  chmod?: string;
  /** `--link`: taken; berth's layer is the same content either way. */
  link?: boolean;
  /** ADD only: the URL's expected digest. */
  checksum?: string;
  json: boolean;
}
export interface WorkdirInstr extends Base {
  kind: 'workdir';
  value: string;
}
export interface UserInstr extends Base {
  kind: 'user';
  value: string;
}
export interface StopSignalInstr extends Base {
  kind: 'stopsignal';
  value: string;
}
export interface VolumeInstr extends Base {
  kind: 'volume';
  paths: string[];
}
/** Durations in nanoseconds; unset ones absent. */
export interface HealthcheckInstr extends Base {
  kind: 'healthcheck';
  /** The config's Test without the NONE case: `['CMD', …]` (JSON form) or `['CMD-SHELL', line]`. */
  test: string[] | 'NONE';
  interval?: number;
  timeout?: number;
  startPeriod?: number;
  startInterval?: number;
  retries?: number;
}
export interface ShellInstr extends Base {
  kind: 'shell';
  args: string[];
}
export interface OnbuildInstr extends Base {
  kind: 'onbuild';
  /** The trigger as written, `ONBUILD` and the blanks after it taken off. */
  expression: string;
}
export interface MaintainerInstr extends Base {
  kind: 'maintainer';
  name: string;
}

export type Instruction =
  | FromInstr
  | RunInstr
  | CmdInstr
  | EntrypointInstr
  | EnvInstr
  | ArgInstr
  | LabelInstr
  | ExposeInstr
  | CopyInstr
  | WorkdirInstr
  | UserInstr
  | VolumeInstr
  | StopSignalInstr
  | HealthcheckInstr
  | ShellInstr
  | OnbuildInstr
  | MaintainerInstr;

export interface Stage {
  /** The `AS` name, lower-cased. */
  name?: string;
  index: number;
  from: FromInstr;
  instructions: Instruction[];
}

/** The instruction as the build stream's "Step N/M : …" line prints it: the logical line, trimmed. */
export const sourceCode = (i: { node: Node }): string => trimSpace(i.node.original);

/** Refusals dockerd makes at dispatch, not parse: parseStages leaves their words without the line prefix. */
const dispatchErrors = new WeakSet<Error>();

const BUILDKIT_ONLY = (flag: string) => {
  const e = invalidParameter(
    `the --${flag} option requires BuildKit. Refer to https://docs.docker.com/go/buildkit/ to learn how to build images with BuildKit enabled`,
  );
  dispatchErrors.add(e);
  return e;
};

const atLeastOne = (cmd: string) => invalidParameter(`${cmd} requires at least one argument`);
const exactlyOne = (cmd: string) => invalidParameter(`${cmd} requires exactly one argument`);

type FlagType = 'string' | 'bool' | 'list';

/**
 * dockerd's BFlags.Parse: `--name=value` for string flags, `--name[=true|false]`
 * for booleans; unknown and repeated flags refused in its words. `buildkit`
 * names the flags only BuildKit honours: refused saying so.
 */
function parseFlags(
  node: Node,
  known: Record<string, FlagType>,
  buildkit: readonly string[] = [],
  lists?: Map<string, string[]>,
): Map<string, string> {
  const out = new Map<string, string>();
  for (const raw of node.flags) {
    if (!raw.startsWith('--')) throw invalidParameter(`Arg should start with -- : ${raw}`);
    if (raw === '--') break;
    const body = raw.slice(2);
    const eq = body.indexOf('=');
    const name = eq >= 0 ? body.slice(0, eq) : body;
    const value = eq >= 0 ? body.slice(eq + 1) : undefined;
    if (buildkit.includes(name)) throw BUILDKIT_ONLY(name);
    const type = Object.hasOwn(known, name) ? known[name] : undefined;
    if (!type) throw invalidParameter(`Unknown flag: ${name}`);
    if (type === 'list') {
      if (value === undefined) throw invalidParameter(`Missing a value on flag: ${name}`);
      lists?.set(name, [...(lists.get(name) ?? []), value]);
      continue;
    }
    if (out.has(name)) throw invalidParameter(`Duplicate flag specified: ${name}`);
    if (type === 'bool') {
      if (value === '') throw invalidParameter(`Missing a value on flag: ${name}`);
      const lower = (value ?? 'true').toLowerCase();
      if (lower !== 'true' && lower !== 'false')
        throw invalidParameter(`Expecting boolean value for flag ${name}, not: ${value}`);
      out.set(name, lower);
    } else {
      if (value === undefined) throw invalidParameter(`Missing a value on flag: ${name}`);
      out.set(name, value);
    }
  }
  return out;
}

const noFlags = (node: Node) => parseFlags(node, {});

/** Pairs out of the node's flat [k, v, k, v…]. */
function pairs(node: Node, cmd: string): Array<[string, string]> {
  const a = node.args;
  if (a.length === 0) throw atLeastOne(cmd);
  if (a.length % 2 !== 0) throw invalidParameter(`Bad input to ${cmd}, too many arguments`);
  const out: Array<[string, string]> = [];
  for (let i = 0; i < a.length; i += 2) {
    if (a[i] === '') throw invalidParameter(`${cmd} names can not be blank`);
    out.push([a[i]!, a[i + 1]!]);
  }
  return out;
}

const STAGE_NAME = /^[a-z][a-z0-9-_.]*$/;

/**
 * A node as a typed instruction. Throws invalidParameter with dockerd's wording;
 * an unknown command is "unknown instruction: FOO".
 */
export function parseInstruction(node: Node): Instruction {
  const n = node;
  switch (n.command) {
    case 'from': {
      const a = n.args;
      let name: string | undefined;
      if (a.length === 3 && a[1]!.toLowerCase() === 'as') {
        name = a[2]!.toLowerCase();
        if (!STAGE_NAME.test(name))
          throw invalidParameter(
            `invalid name for build stage: ${goQuote(a[2]!)}, name can't start with a number or contain symbols`,
          );
      } else if (a.length !== 1) throw invalidParameter('FROM requires either one or three arguments');
      const flags = parseFlags(n, { platform: 'string' });
      const platform = flags.get('platform');
      return {
        kind: 'from',
        node: n,
        image: a[0]!,
        ...(name !== undefined ? { name } : {}),
        ...(platform ? { platform } : {}),
      };
    }
    case 'run': {
      // --security is refused as dockerd's classic builder refuses it.
      const lists = new Map<string, string[]>();
      const flags = parseFlags(n, { mount: 'list', network: 'string' }, ['security'], lists);
      const mounts = lists.get('mount') ?? [];
      // Mounts without variables are checked now, the others once expanded.
      for (const m of mounts) if (!m.includes('$')) parseMount(m);
      const network = flags.get('network') ?? 'default';
      if (!['default', 'none', 'host'].includes(network)) throw invalidParameter(`invalid network mode "${network}"`);
      return {
        kind: 'run',
        node: n,
        args: n.args,
        json: n.json !== null,
        mounts,
        heredocs: n.heredocs ?? [],
        ...(network !== 'default' ? { network: network as 'none' | 'host' } : {}),
      };
    }
    case 'cmd':
    case 'entrypoint':
      noFlags(n);
      return { kind: n.command, node: n, args: n.args, json: n.json !== null };
    case 'env':
    case 'label': {
      noFlags(n);
      return { kind: n.command, node: n, pairs: pairs(n, n.command.toUpperCase()) };
    }
    case 'arg': {
      if (n.args.length === 0) throw atLeastOne('ARG');
      // dockerd drops flags on ARG unread; berth refuses them rather than ignore them.
      noFlags(n);
      const args = n.args.map((w) => {
        const eq = w.indexOf('=');
        if (eq < 0) return { name: w };
        if (eq === 0) throw invalidParameter('ARG names can not be blank');
        return { name: w.slice(0, eq), value: w.slice(eq + 1) };
      });
      return { kind: 'arg', node: n, args };
    }
    case 'expose':
      if (n.args.length === 0) throw atLeastOne('EXPOSE');
      noFlags(n);
      return { kind: 'expose', node: n, ports: [...n.args].sort() };
    case 'copy':
    case 'add': {
      const cmd = n.command.toUpperCase();
      if (n.args.length < 2)
        throw invalidParameter(
          `${cmd} requires at least two arguments, but only one was provided. Destination could not be determined`,
        );
      const flags =
        n.command === 'copy'
          ? parseFlags(n, { chown: 'string', from: 'string', chmod: 'string', link: 'bool' }, ['parents', 'exclude'])
          : parseFlags(n, { chown: 'string', chmod: 'string', link: 'bool', checksum: 'string' }, [
              'keep-git-dir',
              'exclude',
            ]);
      const from = flags.get('from');
      const chown = flags.get('chown');
      const chmod = flags.get('chmod');
      const checksum = flags.get('checksum');
      if (chmod !== undefined && !/^[0-7]{1,4}$/.test(chmod))
        throw invalidParameter(`invalid chmod parameter: ${goQuote(chmod)}. it should be octal string`);
      const dest = n.args.at(-1)!;
      if (parseHeredocWord(dest)) throw invalidParameter(`${cmd} cannot accept a heredoc as a destination`);
      const docs = new Map((n.heredocs ?? []).map((h) => [h.name, h]));
      const sources: string[] = [];
      const contents: CopyInstr['contents'] = [];
      for (const src of n.args.slice(0, -1)) {
        const h = n.json === null ? parseHeredocWord(src) : null;
        if (!h) sources.push(src);
        else {
          const doc = docs.get(h.name);
          contents.push({ name: h.name, data: doc ? heredocBody(doc) : '', expand: h.expand });
        }
      }
      return {
        kind: n.command,
        node: n,
        sources,
        contents,
        dest,
        ...(from ? { from } : {}),
        ...(chown ? { chown } : {}),
        ...(chmod ? { chmod } : {}),
        ...(flags.get('link') === 'true' ? { link: true } : {}),
        ...(checksum ? { checksum } : {}),
        json: n.json !== null,
      };
    }
    case 'workdir':
    case 'user': {
      if (n.args.length !== 1) throw exactlyOne(n.command.toUpperCase());
      noFlags(n);
      return { kind: n.command, node: n, value: n.args[0]! };
    }
    case 'stopsignal':
      if (n.args.length !== 1) throw exactlyOne('STOPSIGNAL');
      // dockerd drops flags on STOPSIGNAL unread; berth refuses them rather than ignore them.
      noFlags(n);
      return { kind: 'stopsignal', node: n, value: n.args[0]! };
    case 'volume': {
      if (n.args.length === 0) throw atLeastOne('VOLUME');
      noFlags(n);
      const paths = n.args.map((v) => v.trim());
      if (paths.includes('')) throw invalidParameter('VOLUME specified can not be an empty string');
      return { kind: 'volume', node: n, paths };
    }
    case 'healthcheck':
      return healthcheck(n);
    case 'shell': {
      noFlags(n);
      if (n.args.length === 0) throw atLeastOne('SHELL');
      if (n.json === null) throw invalidParameter('SHELL requires the arguments to be in JSON form');
      return { kind: 'shell', node: n, args: n.args };
    }
    case 'onbuild': {
      if (n.args.length === 0) throw atLeastOne('ONBUILD');
      noFlags(n);
      const trigger = n.args[0]!.trim().toUpperCase();
      if (trigger === 'ONBUILD') throw invalidParameter("Chaining ONBUILD via `ONBUILD ONBUILD` isn't allowed");
      if (trigger === 'MAINTAINER' || trigger === 'FROM')
        throw invalidParameter(`${trigger} isn't allowed as an ONBUILD trigger`);
      return { kind: 'onbuild', node: n, expression: n.original.replace(/^\s*ONBUILD\s*/i, '') };
    }
    case 'maintainer':
      if (n.args.length !== 1) throw exactlyOne('MAINTAINER');
      noFlags(n);
      return { kind: 'maintainer', node: n, name: n.args[0]! };
    default:
      throw invalidParameter(`unknown instruction: ${n.command.toUpperCase()}`);
  }
}

function healthcheck(n: Node): HealthcheckInstr {
  if (n.args.length === 0) throw atLeastOne('HEALTHCHECK');
  const type = n.args[0]!.toUpperCase();
  const rest = n.args.slice(1);
  if (type === 'NONE') {
    // dockerd drops flags on HEALTHCHECK NONE unread; berth refuses them rather than ignore them.
    if (rest.length !== 0 || n.flags.length !== 0) throw invalidParameter('HEALTHCHECK NONE takes no arguments');
    return { kind: 'healthcheck', node: n, test: 'NONE' };
  }
  const flags = parseFlags(n, {
    interval: 'string',
    timeout: 'string',
    'start-period': 'string',
    'start-interval': 'string',
    retries: 'string',
  });
  if (type !== 'CMD') throw invalidParameter(`Unknown type ${goQuote(type)} in HEALTHCHECK (try CMD)`);
  if (rest.length === 0) throw invalidParameter('Missing command after HEALTHCHECK CMD');
  const out: HealthcheckInstr = {
    kind: 'healthcheck',
    node: n,
    test: n.json !== null ? ['CMD', ...rest] : ['CMD-SHELL', rest.join(' ')],
  };
  const durations = [
    ['interval', 'interval'],
    ['timeout', 'timeout'],
    ['start-period', 'startPeriod'],
    ['start-interval', 'startInterval'],
  ] as const;
  for (const [flag, field] of durations) {
    const v = flags.get(flag);
    if (!v) continue;
    const ns = goDuration(v);
    // Zero is "inherit", as the API takes it; anything else below a millisecond is refused.
    if (ns !== 0 && ns < 1_000_000) throw invalidParameter(`Interval "${flag}" cannot be less than 1ms`);
    out[field] = ns;
  }
  const retries = flags.get('retries');
  if (retries) {
    if (!/^[+-]?\d+$/.test(retries))
      throw invalidParameter(`strconv.ParseInt: parsing ${goQuote(retries)}: invalid syntax`);
    const r = Number(retries);
    if (r > 2147483647 || r < -2147483648)
      throw invalidParameter(`strconv.ParseInt: parsing ${goQuote(retries)}: value out of range`);
    if (r < 1) throw invalidParameter(`--retries must be at least 1 (not ${r})`);
    out.retries = r;
  }
  return out;
}

const UNITS: Record<string, number> = { ns: 1, us: 1e3, µs: 1e3, μs: 1e3, ms: 1e6, s: 1e9, m: 60e9, h: 3600e9 };

/** Go's time.ParseDuration, in nanoseconds. */
export function goDuration(s: string): number {
  const bad = () => invalidParameter(`time: invalid duration ${goQuote(s)}`);
  let body = s;
  let sign = 1;
  if (body.startsWith('-') || body.startsWith('+')) {
    sign = body[0] === '-' ? -1 : 1;
    body = body.slice(1);
  }
  if (body === '0') return 0;
  if (body === '') throw bad();
  const re = /(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)/y;
  let total = 0;
  let at = 0;
  for (let m = re.exec(body); m; m = re.exec(body)) {
    total += Number(m[1]) * UNITS[m[2]!]!;
    at = re.lastIndex;
  }
  if (at === 0 || at !== body.length) {
    if (at === 0 && /^(\d+(\.\d*)?|\.\d+)$/.test(body))
      throw invalidParameter(`time: missing unit in duration ${goQuote(s)}`);
    throw bad();
  }
  return sign * Math.round(total);
}

/**
 * The Dockerfile's stages, as dockerd's instructions.Parse makes them: ARGs before
 * the first FROM are the meta args; any other instruction there is refused.
 * Errors of an instruction read "dockerfile parse error line N: …".
 */
export function parseStages(df: { nodes: readonly Node[] }): { metaArgs: ArgInstr[]; stages: Stage[] } {
  const metaArgs: ArgInstr[] = [];
  const stages: Stage[] = [];
  for (const node of df.nodes) {
    let instr: Instruction;
    try {
      instr = parseInstruction(node);
    } catch (e) {
      if (e instanceof Error && !dispatchErrors.has(e))
        throw invalidParameter(`dockerfile parse error line ${node.startLine}: ${e.message}`);
      throw e;
    }
    if (instr.kind === 'from') {
      stages.push({
        ...(instr.name !== undefined ? { name: instr.name } : {}),
        index: stages.length,
        from: instr,
        instructions: [],
      });
      continue;
    }
    if (stages.length === 0) {
      if (instr.kind === 'arg') {
        metaArgs.push(instr);
        continue;
      }
      throw invalidParameter('no build stage in current context');
    }
    stages.at(-1)!.instructions.push(instr);
  }
  return { metaArgs, stages };
}

/**
 * An ONBUILD trigger (from an image's OnBuild) as the instruction it runs, parsed
 * as dockerd parses it when the next FROM fires it: alone, with the default escape.
 */
export function parseTrigger(expression: string): Instruction {
  const nodes = parseDockerfile(expression).nodes;
  if (nodes.length !== 1) throw invalidParameter('onbuild trigger should be a single expression');
  const instr = parseInstruction(nodes[0]!);
  // dockerd's ParseCommand takes no stage: a FROM trigger is no command.
  if (instr.kind === 'from') throw invalidParameter('*instructions.Stage is not a command type');
  return instr;
}

/** ARG's names and defaults expanded, and dockerd's step comment (`ARG a=1 b`). */
export function expandArg(
  instr: ArgInstr,
  env: readonly string[],
): { args: Array<{ name: string; value?: string }>; comment: string } {
  const expand = (w: string) => expandWord(w, env, instr.node.escape);
  const args = instr.args.map((a) => ({
    name: expand(a.name),
    ...(a.value !== undefined ? { value: expand(a.value) } : {}),
  }));
  return {
    args,
    comment: `ARG ${args.map((a) => (a.value !== undefined ? `${a.name}=${a.value}` : a.name)).join(' ')}`,
  };
}

/** COPY/ADD's words expanded as dockerd expands them (sources, destination, --chown; not --from). */
export function expandCopy(
  instr: CopyInstr,
  env: readonly string[],
): { sources: string[]; dest: string; chown?: string; contents: Array<{ name: string; data: string }> } {
  const expand = (w: string) => expandWord(w, env, instr.node.escape);
  const chown = instr.chown !== undefined ? expand(instr.chown) : undefined;
  return {
    sources: instr.sources.map(expand),
    dest: expand(instr.dest),
    ...(chown ? { chown } : {}),
    // As BuildKit's ExpandRaw: variables only, quotes and backslashes kept as written.
    contents: instr.contents.map((c) => ({ name: c.name, data: c.expand ? expandVariables(c.data, env) : c.data })),
  };
}

/**
 * A label of the build's `labels` query as the step dockerd appends to the last
 * stage for it: `LABEL k=v`, its words taken as given (no quotes, no expansion).
 */
export function queryLabel(key: string, value: string): LabelInstr {
  const original = `LABEL ${key}=${value}`;
  return {
    kind: 'label',
    pairs: [[key, value]],
    noExpand: true,
    node: {
      command: 'label',
      flags: [],
      rest: `${key}=${value}`,
      original,
      startLine: 0,
      endLine: 0,
      json: null,
      args: [key, value],
      escape: '\\',
    },
  };
}
