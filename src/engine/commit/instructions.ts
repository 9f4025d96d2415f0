// `docker commit --change`: Dockerfile instructions applied to a container
// config, parsed and dispatched as dockerd's builder does (BuildFromConfig),
// and dockerd's merge of the result over the container's own config. The
// language itself (parsing, expansion, the config instructions) is
// engine/dockerfile's, shared with the builder.
import { invalidParameter } from '../../errors.js';
import {
  type ConfigInstruction,
  type HealthConfig,
  applyConfigInstruction,
  envKey,
  parseDockerfile,
  parseInstruction,
} from '../dockerfile/index.js';
import type { ContainerConfigFields } from '../images/config.js';

export { expandWord } from '../dockerfile/index.js';

/** What dockerd lets `--change` say: the instructions that only touch the config. */
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

/**
 * Applies `changes` (each one or more Dockerfile lines) to a copy of `config`.
 * Throws `invalid` with dockerd's wording on anything it would refuse.
 */
export function applyChanges(config: ContainerConfigFields, changes: readonly string[]): ContainerConfigFields {
  const out = structuredClone(config);
  if (changes.length === 0) return out;
  const df = parseDockerfile(changes.join('\n'));
  for (const n of df.nodes) {
    if (!COMMANDS.has(n.command)) throw invalidParameter(`${n.command} is not a valid change command`);
  }
  // Every instruction is checked before any is applied, as dockerd does.
  const instructions = df.nodes.map((n) => parseInstruction(n) as ConfigInstruction);
  const state = { cmdSet: false };
  // Every word of an instruction sees the Env from before it (`ENV A=1 B=$A` takes the old A).
  for (const i of instructions) applyConfigInstruction(out, i, out.Env ?? [], state);
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
