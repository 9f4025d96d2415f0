// How the classic build names and says things: image ids in its stream, the
// tags it sets, BuildKit's names for its vertices, the download progress, and
// the cache key two steps must share.
import { invalidParameter } from '../../errors.js';
import {
  DEFAULT_SHELL,
  expandWord,
  type Instruction,
  parseHeredocWord,
  sourceCode,
  summarizeHeredoc,
} from '../dockerfile/index.js';
import type { ContainerConfigFields } from '../images/config.js';
import { parseReference, type Reference, withTag } from '../reference.js';
import type { AuthConfig } from '../registry/auth.js';
import type { BuildEvent } from './build-types.js';

export const short = (id: string) => id.replace(/^sha256:/, '').slice(0, 12);

/** A `t` of a build: a name, `:latest` when it has no tag; never a digest. */
export function buildTag(t: string): Reference {
  const ref = parseReference(t, { defaultTag: false });
  if (ref.digest) throw invalidParameter(`invalid reference format: ${t} is a digest reference`);
  return ref.tag ? ref : withTag(ref, 'latest');
}

/** A base image as BuildKit's FROM vertex names it: the full name, its tag or digest only when given. */
export function fromName(name: string): string {
  try {
    const ref = parseReference(name, { defaultTag: false });
    return ref.name + (ref.tag ? `:${ref.tag}` : '') + (ref.digest ? `@${ref.digest}` : '');
  } catch {
    return name;
  }
}

/** A step as BuildKit's vertex names it: the keyword upper-cased and, but in RUN, variables expanded. */
export function stepText(instr: Instruction, env: string[]): string {
  const code = sourceCode(instr);
  const [word = '', ...rest] = code.split(' ');
  let text = [word.toUpperCase(), ...rest].join(' ');
  if (instr.kind !== 'run' && text.includes('$')) {
    try {
      text = expandWord(text, env, instr.node.escape);
    } catch {
      // As BuildKit's processCmdEnv: the text as written when it does not expand.
    }
  }
  // BuildKit names a RUN of one heredoc after its body's first line.
  if (instr.kind === 'run' && instr.heredocs[0] && parseHeredocWord(instr.args[0] ?? ''))
    text += ` (${summarizeHeredoc(instr.heredocs[0].content)})`;
  return text;
}

export function findDockerHub(auths: Record<string, AuthConfig>): AuthConfig | undefined {
  return auths['https://index.docker.io/v1/'] ?? auths['index.docker.io'] ?? auths['registry-1.docker.io'];
}

export const hasWildcard = (p: string) => /[*?[]/.test(p);

export function shellOf(config: ContainerConfigFields): string[] {
  return config.Shell?.length ? [...config.Shell] : [...DEFAULT_SHELL];
}

/** dockerd's "Downloading" progress records for a download the build makes, at most a few a second. */
export function downloading(run: { emit: (e: BuildEvent) => void }): (current: number, total: number | null) => void {
  let last = 0;
  return (current, total) => {
    const now = Date.now();
    if (now - last < 100 && (total === null || current < total)) return;
    last = now;
    run.emit({ pull: { status: 'Downloading', layer: true, current, ...(total !== null ? { total } : {}) } });
  };
}

/** JSON with sorted keys: history entries compare by content. */
export function canonical(v: unknown): string {
  if (!v || typeof v !== 'object') return JSON.stringify(v ?? null);
  const o = v as Record<string, unknown>;
  return `{${Object.keys(o)
    .sort()
    .map((k) => `${JSON.stringify(k)}:${canonical(o[k])}`)
    .join(',')}}`;
}

/** What two steps' configs must share for one to stand for the other (dockerd's compare). */
export function cacheKey(c: ContainerConfigFields): string {
  const sortObj = (o: Record<string, unknown> | null | undefined) =>
    o && Object.keys(o).length ? Object.keys(o).sort() : null;
  return JSON.stringify([
    c.Cmd ?? null,
    c.Entrypoint?.length ? c.Entrypoint : null,
    c.Env ?? null,
    c.Labels && Object.keys(c.Labels).length ? Object.entries(c.Labels).sort() : null,
    sortObj(c.ExposedPorts as Record<string, unknown> | null | undefined),
    sortObj(c.Volumes as Record<string, unknown> | null | undefined),
    c.WorkingDir ?? '',
    c.User ?? '',
    c.OnBuild?.length ? c.OnBuild : null,
    c.StopSignal ?? '',
    c.Healthcheck ?? null,
    c.Shell?.length ? c.Shell : null,
  ]);
}
