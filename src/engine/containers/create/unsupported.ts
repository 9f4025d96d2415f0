// What berth does not honour yet is refused at create, never stored and
// dropped. A field of Docker's Config or HostConfig outside berth's schemas
// (config.ts, where every field berth applies is named) passes only when it
// asks nothing: absent, null, zero, false, empty, or Docker's own default for
// it. Clients send whole HostConfigs full of such values (the docker CLI sends
// ~50 fields), so only a value that would change something is refused. Names
// that are not Docker's are ignored, as dockerd's JSON decoding ignores them
// (dockerode, for one, leaves `name` in the body).
import { invalidParameter } from '../../../errors.js';
import { ContainerConfigSchema, HostConfigSchema, UpdateBodySchema } from '../config.js';

/**
 * Fields not in the stored schema that are fine to take: ConsoleSize is read
 * as given; ContainerIDFile is the CLI's own (--cidfile: the CLI writes it,
 * dockerd only keeps the name); StorageOpt is refused by storageopt.ts in
 * dockerd's words; Cgroup is read by no dockerd code at all, so it is taken
 * and ignored. (The Windows-only CpuCount, CpuPercent and IOMaximum* are
 * config.ts's, checked by resources.ts as dockerd does on Linux.)
 */
const READ_ELSEWHERE = new Set(['ConsoleSize', 'ContainerIDFile', 'StorageOpt', 'Cgroup']);

/** Docker's defaults that are not "empty": a client may send them, and they ask nothing. */
const DOCKER_DEFAULTS: Record<string, readonly unknown[]> = {
  VolumeDriver: ['local'],
};

/** Whether a value asks for nothing: nothing in it but nulls, zeros, falses and empty strings. */
export function asksNothing(v: unknown): boolean {
  if (v === null || v === undefined || v === false || v === 0 || v === '') return true;
  if (Array.isArray(v)) return v.every(asksNothing);
  if (typeof v === 'object') return Object.values(v).every(asksNothing);
  return false;
}

/** Docker's Resources (API 1.47): part of a HostConfig, and what an update may carry. */
const DOCKER_RESOURCES = [
  'CpuShares',
  'Memory',
  'CgroupParent',
  'BlkioWeight',
  'BlkioWeightDevice',
  'BlkioDeviceReadBps',
  'BlkioDeviceWriteBps',
  'BlkioDeviceReadIOps',
  'BlkioDeviceWriteIOps',
  'CpuPeriod',
  'CpuQuota',
  'CpuRealtimePeriod',
  'CpuRealtimeRuntime',
  'CpusetCpus',
  'CpusetMems',
  'Devices',
  'DeviceCgroupRules',
  'DeviceRequests',
  'KernelMemory',
  'KernelMemoryTCP',
  'MemoryReservation',
  'MemorySwap',
  'MemorySwappiness',
  'NanoCpus',
  'OomKillDisable',
  'PidsLimit',
  'Ulimits',
  'CpuCount',
  'CpuPercent',
  'IOMaximumIOps',
  'IOMaximumBandwidth',
];

/** Docker's HostConfig (API 1.47), Resources included. */
const DOCKER_HOST_CONFIG = [
  'Binds',
  'ContainerIDFile',
  'LogConfig',
  'NetworkMode',
  'PortBindings',
  'RestartPolicy',
  'AutoRemove',
  'VolumeDriver',
  'VolumesFrom',
  'Mounts',
  'ConsoleSize',
  'Annotations',
  'CapAdd',
  'CapDrop',
  'CgroupnsMode',
  'Dns',
  'DnsOptions',
  'DnsSearch',
  'ExtraHosts',
  'GroupAdd',
  'IpcMode',
  'Cgroup',
  'Links',
  'OomScoreAdj',
  'PidMode',
  'Privileged',
  'PublishAllPorts',
  'ReadonlyRootfs',
  'SecurityOpt',
  'StorageOpt',
  'Tmpfs',
  'UTSMode',
  'UsernsMode',
  'ShmSize',
  'Sysctls',
  'Runtime',
  'Isolation',
  'MaskedPaths',
  'ReadonlyPaths',
  'Init',
  ...DOCKER_RESOURCES,
];

/**
 * Docker's container Config (API 1.47). ArgsEscaped serves Windows: nothing
 * to a run. (Shell is in config.ts: CMD-SHELL health checks run under it.)
 */
const DOCKER_CONFIG = [
  'Hostname',
  'Domainname',
  'User',
  'AttachStdin',
  'AttachStdout',
  'AttachStderr',
  'ExposedPorts',
  'Tty',
  'OpenStdin',
  'StdinOnce',
  'Env',
  'Cmd',
  'Healthcheck',
  'Image',
  'Volumes',
  'WorkingDir',
  'Entrypoint',
  'NetworkDisabled',
  // MacAddress: refused by networking.ts, with the reason.
  'OnBuild',
  'Labels',
  'StopSignal',
  'StopTimeout',
];

/** Refuses the first field of a create's HostConfig berth would otherwise accept and not apply. */
export function refuseUnhonoured(h: Record<string, unknown>): void {
  const applied = new Set([...Object.keys(HostConfigSchema.shape), ...READ_ELSEWHERE]);
  refuseFields(
    'HostConfig',
    h,
    DOCKER_HOST_CONFIG.filter((f) => !applied.has(f)),
  );
}

/**
 * The Resources dockerd's update keeps (container.UpdateContainer): it takes
 * the others too (Devices, Ulimits, OomKillDisable, the blkio device lists…)
 * and changes nothing, so berth takes and ignores them as well.
 */
const UPDATED_BY_DOCKERD = [
  'BlkioWeight',
  'CpuShares',
  'NanoCpus',
  'CpuPeriod',
  'CpuQuota',
  'CpusetCpus',
  'CpusetMems',
  'Memory',
  'MemorySwap',
  'MemoryReservation',
  'KernelMemory',
  'CpuRealtimePeriod',
  'CpuRealtimeRuntime',
  'PidsLimit',
];

/**
 * Refuses the first field of an update (Docker's UpdateConfig: Resources and
 * RestartPolicy) that dockerd would keep and berth does not change.
 */
export function refuseUnhonouredUpdate(body: Record<string, unknown>): void {
  const applied = new Set(Object.keys(UpdateBodySchema.shape));
  refuseFields(
    'UpdateConfig',
    body,
    UPDATED_BY_DOCKERD.filter((f) => !applied.has(f)),
  );
}

/** Refuses the first field of a create's Config berth would otherwise accept and not apply. */
export function refuseUnhonouredConfig(c: Record<string, unknown>): void {
  const applied = new Set(Object.keys(ContainerConfigSchema.shape));
  refuseFields(
    'Config',
    c,
    DOCKER_CONFIG.filter((f) => !applied.has(f)),
  );
}

/** Docker's fields whose value is a map: any key in it asks for something (a port, a tmpfs, an option). */
const MAP_FIELDS = new Set(['PortBindings', 'Tmpfs', 'StorageOpt', 'Annotations']);

function refuseFields(where: string, body: Record<string, unknown>, unapplied: readonly string[]): void {
  // dockerd's decoder takes a field's name in any case ("tmpfs" is Tmpfs): so is it refused.
  const byLowerName = new Map(unapplied.map((f) => [f.toLowerCase(), f]));
  for (const [key, value] of Object.entries(body)) {
    const field = byLowerName.get(key.toLowerCase());
    if (field === undefined || asksNothingOf(field, value)) continue;
    throw invalidParameter(`${where}.${field} is not supported by berth yet (asked: ${JSON.stringify(value)})`);
  }
}

function asksNothingOf(field: string, value: unknown): boolean {
  if (MAP_FIELDS.has(field) && typeof value === 'object' && value !== null && !Array.isArray(value)) {
    return Object.keys(value).length === 0;
  }
  return asksNothing(value) || (DOCKER_DEFAULTS[field]?.includes(value) ?? false);
}
