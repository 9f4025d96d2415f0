// What a create is checked against and what it defaults. Everything dockerd
// refuses at create is refused here, in dockerd's words, before anything is
// written (moby daemon/container.go verifyContainerSettings,
// daemon/daemon_unix.go verifyPlatformContainerSettings, oci/caps); what a
// start would otherwise refuse later is refused now. The stored Config is the
// request over the image's config, the stored HostConfig the request over
// Docker's defaults.
import { parsePortBindings } from '../../network/ports.js';
import { isIP } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { invalidParameter, messageOf } from '../../../errors.js';
import type { ImageConfig } from '../../images/config.js';
import { normalizeSignal } from '../../signals.js';
import { checkCapability } from '../spec/capabilities.js';
import {
  type ConfigBody,
  type ContainerConfig,
  type Given,
  type HealthConfig,
  HealthConfigSchema,
  type HostConfig,
  type HostConfigBody,
  type Mount,
  RESTART_POLICIES,
  type RestartPolicy,
} from '../config.js';
import { checkDevice } from '../spec/devices.js';
import { checkCgroupnsMode, defaultCgroupnsMode } from '../spec/cgroups.js';
import { anyCase } from './fields.js';
import { checkNamespaceModes } from '../spec/namespaces.js';
import { checkLogConfig } from './logconfig.js';
import { refuseUnappliedSecurityOptions } from './lsm.js';
import { protectedPaths } from '../spec/paths.js';
import { verifyResources } from './resources.js';
import { containerRuntime, RUNC_ONLY, type RuntimeNames } from './runtimes.js';
import { seccompOption, type SeccompProfile } from '../spec/seccomp.js';
import { type BindMount, deviceCgroupRule, type Propagation } from '../spec/spec.js';
import { checkStorageOpt } from './storageopt.js';
import { checkSysctls } from './sysctls.js';
import { checkUlimits } from '../spec/ulimits.js';
import { refuseUnhonoured, refuseUnhonouredConfig } from './unsupported.js';

/** What `--security-opt` asks of the process, parsed once at create. */
export interface SecurityOptions {
  noNewPrivileges: boolean;
  /** 'unconfined', a custom profile (dockerd's format), or absent for berth's own. */
  seccomp?: 'unconfined' | SeccompProfile;
}

/** A new container's stored Config and HostConfig, its security options, and dockerd's warnings about them. */
export interface CreateSettings {
  config: ContainerConfig;
  hostConfig: HostConfig;
  security: SecurityOptions;
  warnings: string[];
}

/** The Config checks dockerd makes before it looks up the image (validateContainerConfig). */
export function checkConfig(c: Given<ConfigBody>): string {
  if (!c.Image) throw invalidParameter('Config cannot be empty in order to create a container');
  // runc refuses a relative cwd at start; dockerd refuses it here.
  if (c.WorkingDir && !path.isAbsolute(c.WorkingDir)) {
    throw invalidParameter(`the working directory '${c.WorkingDir}' is invalid, it needs to be an absolute path`);
  }
  if (c.StopSignal) normalizeSignal(c.StopSignal);
  refuseUnhonouredConfig(c);
  for (const e of c.Env ?? []) {
    if (e.split('=', 1)[0] === '') throw invalidParameter(`invalid environment variable: ${e}`);
  }
  if (c.Healthcheck) checkHealthcheck(c.Healthcheck);
  return c.Image;
}

/** dockerd's shortest health check duration (1ms), in nanoseconds. */
const MIN_HEALTH_DURATION_NS = 1_000_000;
const HEALTH_TYPES = ['CMD', 'CMD-SHELL', 'NONE'];

/** dockerd's validateHealthCheck; and a test type berth would not run is refused, not stored. */
function checkHealthcheck(h: NonNullable<ConfigBody['Healthcheck']>): void {
  for (const field of ['Interval', 'Timeout', 'Retries', 'StartPeriod', 'StartInterval'] as const) {
    const v = h[field] ?? 0;
    if (field === 'Retries') {
      if (v < 0) throw invalidParameter('Retries in Healthcheck cannot be negative');
    } else if (v !== 0 && v < MIN_HEALTH_DURATION_NS) {
      throw invalidParameter(`${field} in Healthcheck cannot be less than 1ms`);
    }
  }
  const type = h.Test?.[0];
  if (type !== undefined && !HEALTH_TYPES.includes(type)) {
    throw invalidParameter(`Unknown healthcheck type '${type}' (expected 'CMD', 'CMD-SHELL' or 'NONE')`);
  }
}

/** What of the daemon a create's defaults and checks read. */
export interface DaemonFacts {
  runtimes: RuntimeNames;
  /** Where the containers' layers live (StorageOpt depends on its filesystem). */
  root: string;
}

/** A daemon of runc alone (unit tests' default). */
const PLAIN_DAEMON: DaemonFacts = { runtimes: RUNC_ONLY, root: '' };

/**
 * The rest of a create, once its image is known: the HostConfig checked and
 * defaulted, the Config merged over the image's. `id` names the container
 * (its default hostname).
 */
export function createSettings(
  c: Given<ConfigBody>,
  h: Given<HostConfigBody>,
  image: { ref: string; config: ImageConfig['config'] },
  id: string,
  daemon: DaemonFacts = PLAIN_DAEMON,
): CreateSettings {
  const { hostConfig, security, warnings } = checkHostConfig(h, daemon);
  checkNamespaceModes(h, {
    hostname: c.Hostname ?? undefined,
    domainname: c.Domainname ?? undefined,
    exposedPorts: c.ExposedPorts,
  });
  const config = mergeConfig(c, image.ref, image.config ?? {});
  if (!config.Cmd?.length && !config.Entrypoint?.length) throw invalidParameter('No command specified');
  // Checked now; how read-only ones are made is decided at each start.
  bindMounts(hostConfig, false, daemon.root && path.dirname(daemon.root));
  // dockerd: a container in the host's network or UTS namespace takes the host's name, others their short id.
  const hostName = hostConfig.NetworkMode === 'host' || hostConfig.UTSMode === 'host';
  if (!config.Hostname) config.Hostname = hostName ? os.hostname() : id.slice(0, 12);
  return { config, hostConfig, security, warnings };
}

/** The container's effective config: the request over the image's defaults, as dockerd merges them. */
function mergeConfig(c: Given<ConfigBody>, image: string, img: NonNullable<ImageConfig['config']>): ContainerConfig {
  // A new Entrypoint drops the image's Cmd (dockerd's rule); a Cmd alone keeps the image's Entrypoint.
  const entrypoint =
    c.Entrypoint !== undefined ? (c.Entrypoint?.length ? c.Entrypoint : null) : (img.Entrypoint ?? null);
  const cmd = c.Cmd?.length ? c.Cmd : c.Entrypoint !== undefined ? null : (img.Cmd ?? null);
  const labels = { ...(img.Labels ?? {}), ...(c.Labels ?? {}) };
  const ports = { ...(img.ExposedPorts ?? {}), ...(c.ExposedPorts ?? {}) };
  const volumes = { ...(img.Volumes ?? {}), ...(c.Volumes ?? {}) };
  return {
    ...c,
    Hostname: c.Hostname ?? '',
    Domainname: c.Domainname ?? '',
    User: c.User || img.User || '',
    AttachStdin: c.AttachStdin ?? false,
    AttachStdout: c.AttachStdout ?? false,
    AttachStderr: c.AttachStderr ?? false,
    ExposedPorts: Object.keys(ports).length ? ports : null,
    Tty: c.Tty ?? false,
    OpenStdin: c.OpenStdin ?? false,
    StdinOnce: c.StdinOnce ?? false,
    Env: mergeEnv(img.Env, c.Env),
    Cmd: cmd,
    Healthcheck: mergeHealthcheck(c.Healthcheck, img.Healthcheck),
    Image: image,
    Volumes: Object.keys(volumes).length ? volumes : null,
    WorkingDir: c.WorkingDir || img.WorkingDir || '',
    Entrypoint: entrypoint,
    OnBuild: img.OnBuild ?? null,
    Labels: labels,
    ...(c.StopSignal || img.StopSignal ? { StopSignal: c.StopSignal || img.StopSignal } : {}),
    ...(c.StopTimeout !== undefined ? { StopTimeout: c.StopTimeout } : {}),
  };
}

/**
 * dockerd's merge of the request's health check over the image's: an empty
 * Test and each zero (or absent) field inherit the image's. Only set fields
 * are kept, as Go's omitempty writes them.
 */
function mergeHealthcheck(user: ConfigBody['Healthcheck'], fromImage: unknown): HealthConfig | undefined {
  const parsed = HealthConfigSchema.safeParse(fromImage);
  const img = parsed.success ? parsed.data : undefined;
  if (!user && !img) return undefined;
  const out: HealthConfig = {};
  const test = user?.Test?.length ? user.Test : img?.Test;
  if (test?.length) out.Test = test;
  for (const k of ['Interval', 'Timeout', 'StartPeriod', 'StartInterval', 'Retries'] as const) {
    const v = user?.[k] || img?.[k];
    if (v) out[k] = v;
  }
  return out;
}

/** An image's environment under the request's: a name set in both takes the request's value. */
export function mergeEnv(image: string[] | null | undefined, user: string[] | null | undefined): string[] {
  const out = new Map<string, string>();
  for (const e of [...(image ?? []), ...(user ?? [])]) {
    const k = e.split('=', 1)[0]!;
    out.set(k, e);
  }
  return [...out.values()];
}

function checkHostConfig(h: Given<HostConfigBody>, daemon: DaemonFacts): Omit<CreateSettings, 'config'> {
  const warnings: string[] = [];
  checkStorageOpt(anyCase(h, 'StorageOpt'), daemon.root);
  if (Object.keys(h.Annotations ?? {}).includes('')) {
    throw invalidParameter('invalid Annotations: the empty string is not permitted as an annotation key');
  }
  const restartPolicy = checkRestartPolicy(h);
  if (h.AutoRemove && restartPolicy.Name !== '' && restartPolicy.Name !== 'no') {
    throw invalidParameter("can't create 'AutoRemove' container with restart policy");
  }
  for (const e of h.ExtraHosts ?? []) parseExtraHost(e);
  for (const [field, caps] of [
    ['CapAdd', h.CapAdd],
    ['CapDrop', h.CapDrop],
  ] as const) {
    for (const c of caps ?? []) {
      try {
        checkCapability(c);
      } catch (e) {
        throw invalidParameter(`invalid ${field}: ${messageOf(e)}`);
      }
    }
  }
  const mode = h.NetworkMode || 'default';
  refuseUnhonoured(h);
  parsePortBindings(h.PortBindings, null); // dockerd's "invalid port specification" at create
  checkLogConfig(h.LogConfig);
  for (const rule of h.DeviceCgroupRules ?? []) deviceCgroupRule(rule);
  for (const device of h.Devices ?? []) checkDevice(device);
  checkUlimits(h.Ulimits ?? []);
  checkSysctls(h.Sysctls ?? {}, { network: mode, ipc: h.IpcMode ?? '' });
  const verified = verifyResources(h);
  warnings.push(...verified.warnings);
  const r = verified.resources;
  checkCgroupnsMode(h.CgroupnsMode, warnings);
  if (h.ShmSize && h.ShmSize < 0) throw invalidParameter('SHM size can not be less than 0');
  refuseUnappliedSecurityOptions(h.SecurityOpt ?? []);
  const security = securityOptions(h.SecurityOpt ?? []);
  const hostConfig: HostConfig = {
    ...r,
    Binds: h.Binds ?? null,
    AutoRemove: h.AutoRemove ?? false,
    NetworkMode: mode,
    RestartPolicy: restartPolicy,
    Privileged: h.Privileged ?? false,
    ReadonlyRootfs: h.ReadonlyRootfs ?? false,
    CapAdd: h.CapAdd ?? null,
    CapDrop: h.CapDrop ?? null,
    SecurityOpt: h.SecurityOpt ?? null,
    ...protectedPaths(h),
    Runtime: containerRuntime(h.Runtime, daemon.runtimes),
    Memory: r.Memory ?? 0,
    // dockerd's default swap limit: twice the memory limit (adaptContainerSettings).
    MemorySwap: r.Memory && r.Memory > 0 && !r.MemorySwap ? r.Memory * 2 : (r.MemorySwap ?? 0),
    MemorySwappiness: r.MemorySwappiness ?? null,
    NanoCpus: r.NanoCpus ?? 0,
    CpuShares: r.CpuShares ?? 0,
    CpusetCpus: r.CpusetCpus ?? '',
    OomKillDisable: r.OomKillDisable ?? false,
    // dockerd's create keeps no limit for 0 or a negative one (unlimited): inspect shows null.
    PidsLimit: r.PidsLimit && r.PidsLimit > 0 ? r.PidsLimit : null,
    CgroupnsMode: h.CgroupnsMode || defaultCgroupnsMode(),
    // As given, json-file when none is named (dockerd's default driver); logconfig.ts reads it.
    LogConfig: { Type: h.LogConfig?.Type || 'json-file', Config: h.LogConfig?.Config ?? {} },
  };
  return { hostConfig, security, warnings };
}

export function checkRestartPolicy(h: Pick<Given<HostConfigBody>, 'RestartPolicy'>): RestartPolicy {
  const name = h.RestartPolicy?.Name ?? '';
  const count = h.RestartPolicy?.MaximumRetryCount ?? 0;
  if (!isPolicyName(name)) throw invalidParameter(`invalid restart policy '${name}'`);
  if (name === 'on-failure') {
    if (count < 0) throw invalidParameter('maximum retry count cannot be negative');
  } else if (count > 0 || (name !== '' && count !== 0)) {
    throw invalidParameter(`maximum retry count cannot be used with restart policy '${name}'`);
  }
  return { Name: name, MaximumRetryCount: count };
}

const POLICY_NAMES: readonly string[] = RESTART_POLICIES;
const isPolicyName = (s: string): s is RestartPolicy['Name'] => POLICY_NAMES.includes(s);

/**
 * `--security-opt`: no-new-privileges, seccomp (refused now if its profile
 * cannot be used, not at start), apparmor and label (lsm.ts).
 */
export function securityOptions(opts: readonly string[]): SecurityOptions {
  for (const o of opts) {
    if (!/^no-new-privileges(?:[:=](true|false))?$|^(seccomp|apparmor|label)[:=]/.test(o)) {
      throw invalidParameter(`Invalid --security-opt: ${JSON.stringify(o)}`);
    }
  }
  const seccomp = seccompOption(opts);
  return {
    noNewPrivileges: opts.some((o) => /^no-new-privileges(?:[:=]true)?$/.test(o)),
    ...(seccomp === undefined ? {} : { seccomp }),
  };
}

/** `name:ip` (or `name=ip`) of ExtraHosts, checked as dockerd's ValidateExtraHost checks it. */
export function parseExtraHost(spec: string): { name: string; ip: string } {
  const sep = spec.includes('=') ? '=' : ':';
  const at = spec.indexOf(sep);
  const name = at < 0 ? '' : spec.slice(0, at);
  if (!name || name.includes(':')) throw invalidParameter(`bad format for add-host: ${JSON.stringify(spec)}`);
  let ip = spec.slice(at + 1);
  if (/^\[.+\]$/.test(ip)) ip = ip.slice(1, -1);
  // dockerd's name for the host's address as the container sees it; it passes unchecked.
  if (ip !== 'host-gateway' && isIP(ip.trim()) === 0) {
    throw invalidParameter(`invalid IP address in add-host: ${JSON.stringify(ip)}`);
  }
  return { name, ip };
}

// ------------------------------------------------------------------ mounts

/** dockerd's ErrVolumeTargetIsRoot, in its words (the moby tests read them). */
export const TARGET_IS_ROOT = "invalid specification: destination can't be '/'";

const PROPAGATIONS: readonly string[] = ['private', 'rprivate', 'shared', 'rshared', 'slave', 'rslave'];
const isPropagation = (s: string): s is Propagation => PROPAGATIONS.includes(s);

/**
 * The container's bind mounts of host paths: Binds, then Mounts. A read-only one is made
 * recursively read-only (rro: its submounts too) when `recursiveReadonly` and
 * the kernel can, unless the mount asks for non-recursive; dockerd does so from
 * API 1.44 and falls back to plain ro where rro is not there. Volumes and
 * tmpfs mounts are mounts.ts's.
 */
export function bindMounts(h: HostConfig, recursiveReadonly: boolean, dataRoot = ''): BindMount[] {
  const rro = recursiveReadonly && recursiveReadonlySupported() === undefined;
  return [
    ...(h.Binds ?? []).map(parseBindSpec).flatMap((b) => (b.kind === 'bind' ? [withRecursion(b.bind, rro)] : [])),
    ...(h.Mounts ?? []).filter((m) => (m.Type ?? 'bind') === 'bind').map((m) => mountOf(m, rro)),
  ].map((b) => nearDataRoot(b, dataRoot));
}

/**
 * dockerd's validateBindDaemonRoot: a bind whose source holds the data root or
 * lies in it (`/`, `/var/lib`, a layer) is rslave unless asked otherwise, so
 * that the container holds no private copy of the mounts berthd makes there;
 * asked, only rslave or rshared will do. Its source compared as dockerd
 * compares it: as a string prefix either way.
 */
function nearDataRoot(b: BindMount, dataRoot: string): BindMount {
  if (!dataRoot || !(b.source.startsWith(dataRoot) || dataRoot.startsWith(b.source))) return b;
  if (b.propagation === undefined) return { ...b, propagation: 'rslave', slaveOfDataRoot: true };
  if (b.propagation === 'rslave' || b.propagation === 'rshared') return b;
  throw invalidParameter(
    `invalid mount config: must use either propagation mode "rslave" or "rshared" when mount source is within the daemon root, daemon root: "${dataRoot}", bind mount source: "${b.source}", propagation: "${b.propagation}"`,
  );
}

const withRecursion = (b: BindMount, rro: boolean): BindMount => (b.readonly && rro ? { ...b, recursive: true } : b);

/** Why this kernel cannot make a mount recursively read-only (mount_setattr came in 5.12), or undefined. */
export function recursiveReadonlySupported(release = os.release()): string | undefined {
  const [major = 0, minor = 0] = release.split(/[.-]/).map(Number);
  return major > 5 || (major === 5 && minor >= 12) ? undefined : `the kernel (${release}) is older than 5.12`;
}

/** A Binds entry: a host path bound, or a volume (named, or anonymous for a lone `/path`). */
export type BindSpec =
  | { kind: 'bind'; bind: BindMount; destination: string; mode: string }
  | { kind: 'volume'; name?: string; destination: string; rw: boolean; mode: string; copy: boolean };

const MODE_GROUPS: readonly (readonly string[])[] = [
  ['ro', 'rw'],
  ['z', 'Z'],
  PROPAGATIONS,
  ['nocopy'],
  ['consistent', 'cached', 'delegated'],
];

/** dockerd's linuxValidMountMode: known options, at most one of each kind. */
function validMode(mode: string): boolean {
  if (mode === '') return true;
  const opts = mode.split(',');
  const counts = MODE_GROUPS.map((g) => opts.filter((o) => g.includes(o)).length);
  return counts.every((n) => n <= 1) && counts.reduce((a, b) => a + b, 0) === opts.length;
}

/** `source:destination[:mode]` or `destination` (dockerd's ParseMountRaw). */
export function parseBindSpec(spec: string): BindSpec {
  const parts = spec.split(':');
  const invalid = () => invalidParameter(`invalid volume specification: '${spec}'`);
  if (parts.length > 3 || !parts[0]) throw invalid();
  // A lone path (Docker's anonymous volume), or `source:destination` where the second is no mode.
  if (parts.length === 2 && validMode(parts[1]!)) throw invalid();
  const [source, destination, mode = ''] = parts.length === 1 ? ['', parts[0]!] : (parts as [string, string, string?]);
  if (!validMode(mode)) throw invalidParameter(`invalid mode: ${mode}`);
  if (!destination.startsWith('/')) {
    throw invalidParameter(
      `invalid volume specification: '${spec}': invalid mount config for type "${source.startsWith('/') ? 'bind' : 'volume'}": invalid mount path: '${destination}' mount path must be absolute`,
    );
  }
  const opts = mode.split(',').filter(Boolean);
  const dest = path.posix.normalize(destination).replace(/(.)\/+$/, '$1');
  if (dest === '/')
    throw invalidParameter(
      `invalid volume specification: '${spec}': invalid mount config for type "${source.startsWith('/') ? 'bind' : 'volume'}": ${TARGET_IS_ROOT}`,
    );
  if (source.startsWith('/')) {
    // Absent when not asked: rprivate, or rslave near the data root (nearDataRoot).
    const propagation = opts.find(isPropagation);
    return {
      kind: 'bind',
      bind: { source, destination, readonly: opts.includes('ro'), ...(propagation ? { propagation } : {}) },
      destination: dest,
      mode,
    };
  }
  return {
    kind: 'volume',
    ...(source ? { name: source } : {}),
    destination: dest,
    rw: !opts.includes('ro'),
    mode,
    copy: !opts.includes('nocopy'),
  };
}

function mountOf(m: Mount, rro: boolean): BindMount {
  // dockerd's words (API 1.42 on): another type's options on a bind are refused, not dropped.
  if (m.VolumeOptions) throw invalidParameter('VolumeOptions must not be specified on mount type "bind"');
  if (m.TmpfsOptions) throw invalidParameter('TmpfsOptions must not be specified on mount type "bind"');
  if (!m.Source?.startsWith('/'))
    throw invalidParameter('invalid mount config for type "bind": invalid mount path: must be absolute');
  if (!m.Target?.startsWith('/'))
    throw invalidParameter('invalid mount config for type "bind": invalid mount path: must be absolute');
  const propagation = m.BindOptions?.Propagation || undefined;
  if (propagation !== undefined && !isPropagation(propagation)) {
    throw invalidParameter(`invalid mount config for type "bind": invalid propagation mode: ${propagation}`);
  }
  const readonly = m.ReadOnly ?? false;
  // NonRecursive: the source alone, not the mounts under it (bind, not rbind).
  const nonRecursive = m.BindOptions?.NonRecursive ? { nonRecursive: true as const } : {};
  return {
    source: m.Source,
    destination: m.Target,
    readonly,
    ...(propagation ? { propagation } : {}),
    ...nonRecursive,
    ...readonlyRecursion(m, rro),
  };
}

/** BindOptions' ReadOnlyNonRecursive and ReadOnlyForceRecursive (API 1.44), checked as dockerd checks them at start. */
function readonlyRecursion(m: Mount, rro: boolean): { recursive?: true } {
  const nonRecursive = m.BindOptions?.ReadOnlyNonRecursive ?? false;
  const force = m.BindOptions?.ReadOnlyForceRecursive ?? false;
  if (!m.ReadOnly && nonRecursive)
    throw invalidParameter('mount options conflict: !ReadOnly && BindOptions.ReadOnlyNonRecursive');
  if (!m.ReadOnly && force)
    throw invalidParameter('mount options conflict: !ReadOnly && BindOptions.ReadOnlyForceRecursive');
  if (nonRecursive && force)
    throw invalidParameter('mount options conflict: ReadOnlyNonRecursive && BindOptions.ReadOnlyForceRecursive');
  if (force) {
    const why = recursiveReadonlySupported();
    if (why) throw invalidParameter(`rro is not supported: ${why}`);
    return { recursive: true };
  }
  return m.ReadOnly && rro && !nonRecursive ? { recursive: true } : {};
}
