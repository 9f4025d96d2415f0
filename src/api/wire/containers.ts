// Docker's container shapes as the API answers them: list entries and inspect.
import {
  type Container,
  type ContainerMount,
  type ContainerNetworking,
  isoOrZero,
  protectedPaths,
  reportedExposedPorts,
  statusText,
  visibleLogPath,
} from '../../engine/index.js';
import { versionBelow } from '../version.js';
import { containerNetworks, listedPorts, portMap } from './networks.js';
import { mountsShape } from './volumes.js';

// ------------------------------------------------------------------ responses

/**
 * Docker's zero values of the cgroup fields, for a container stored without
 * them (a client that sent none, or made before berth took them): before
 * this, no container had a cgroup namespace of its own.
 */
const CGROUP_DEFAULTS = {
  CgroupParent: '',
  CgroupnsMode: 'host',
  BlkioWeight: 0,
  BlkioWeightDevice: null,
  BlkioDeviceReadBps: null,
  BlkioDeviceWriteBps: null,
  BlkioDeviceReadIOps: null,
  BlkioDeviceWriteIOps: null,
  CpuPeriod: 0,
  CpuQuota: 0,
  CpusetMems: '',
  MemoryReservation: 0,
  KernelMemory: 0,
  KernelMemoryTCP: 0,
  OomKillDisable: false,
  CpuCount: 0,
  CpuPercent: 0,
  IOMaximumIOps: 0,
  IOMaximumBandwidth: 0,
};

/** Whether the container's process runs now (its network interfaces exist). */
const isLive = (c: Container) => (c.status === 'running' || c.status === 'paused') && c.pid > 0;

const commandLine = (c: Container) => [c.path, ...c.args].map((a) => (/\s/.test(a) ? `'${a}'` : a)).join(' ');

/** One entry of `GET /containers/json`. */
export function containerSummary(
  c: Container,
  imageName: string,
  net: ContainerNetworking,
  mounts: ContainerMount[],
  apiVersion: string,
): Record<string, unknown> {
  return {
    Id: c.id,
    // dockerd's names of it: its own and those its links give it (/<parent>/<alias>), sorted.
    Names: [`/${c.name}`, ...c.linkNames].sort(),
    Image: imageName,
    ImageID: c.imageId,
    Command: commandLine(c),
    Created: Math.floor(c.created / 1000),
    Ports: listedPorts(reportedExposedPorts(c.config, c.hostConfig), isLive(c) ? net.ports : []),
    Labels: c.config.Labels ?? {},
    State: c.status,
    Status: statusText(c),
    HostConfig: { NetworkMode: c.hostConfig.NetworkMode },
    NetworkSettings: { Networks: containerNetworks(net.endpoints, isLive(c), apiVersion) },
    Mounts: mountsShape(mounts),
    // API 1.52 added the health summary to the list.
    ...(versionBelow(apiVersion, '1.52')
      ? {}
      : { Health: { Status: c.health?.Status ?? 'none', FailingStreak: c.health?.FailingStreak ?? 0 } }),
  };
}

/** `GET /containers/{id}/json`. */
/** A list entry's sizes (`size=1`): dockerd omits a zero (omitempty), e.g. the SizeRw of a container that wrote nothing. */
export function listedSizes(sizes: { SizeRw: number; SizeRootFs: number }): Partial<typeof sizes> {
  return Object.fromEntries(Object.entries(sizes).filter(([, v]) => v !== 0));
}

export function containerInspect(
  c: Container,
  graph: { lowerDirs: string[] },
  net: ContainerNetworking,
  mounts: ContainerMount[],
  apiVersion: string,
): Record<string, unknown> {
  const running = c.status === 'running' || c.status === 'paused' || c.status === 'restarting';
  // The deprecated top-level fields are the default bridge's, as dockerd fills them.
  const bridge = isLive(c) ? net.endpoints.find((e) => e.network.name === 'bridge' && e.row.ip) : undefined;
  const b = c.bundleDir;
  return {
    Id: c.id,
    Created: new Date(c.created).toISOString(),
    Path: c.path,
    Args: c.args,
    State: {
      Status: c.status,
      Running: running,
      Paused: c.status === 'paused',
      Restarting: c.status === 'restarting',
      OOMKilled: c.oomKilled,
      Dead: c.status === 'dead',
      Pid: running ? c.pid : 0,
      ExitCode: c.exitCode,
      Error: c.error,
      StartedAt: isoOrZero(c.startedAt),
      FinishedAt: isoOrZero(c.finishedAt),
      // Only for a container that has run with a health check, as dockerd's omitempty.
      ...(c.health ? { Health: c.health } : {}),
    },
    Image: c.imageId,
    // A joiner's are its network donor's (netjoin.ts), as dockerd shows them.
    ResolvConfPath: `${c.etcDir}/resolv.conf`,
    HostnamePath: `${c.etcDir}/hostname`,
    HostsPath: `${c.etcDir}/hosts`,
    LogPath: visibleLogPath(c),
    Name: `/${c.name}`,
    RestartCount: c.restartCount,
    Driver: 'overlay2',
    Platform: 'linux',
    MountLabel: '',
    ProcessLabel: '',
    AppArmorProfile: '',
    ExecIDs: null,
    HostConfig: {
      ...CGROUP_DEFAULTS,
      ...c.hostConfig,
      ContainerIDFile: '',
      PortBindings: c.hostConfig.PortBindings ?? {},
      VolumeDriver: c.hostConfig.VolumeDriver ?? '',
      VolumesFrom: c.hostConfig.VolumesFrom ?? null,
      Dns: c.hostConfig.Dns ?? [],
      DnsOptions: c.hostConfig.DnsOptions ?? [],
      DnsSearch: c.hostConfig.DnsSearch ?? [],
      ExtraHosts: c.hostConfig.ExtraHosts ?? null,
      // dockerd's default IPC mode is private; the others are echoed as given.
      IpcMode: c.hostConfig.IpcMode || 'private',
      PidMode: c.hostConfig.PidMode ?? '',
      UTSMode: c.hostConfig.UTSMode ?? '',
      UsernsMode: c.hostConfig.UsernsMode ?? '',
      GroupAdd: c.hostConfig.GroupAdd ?? null,
      // Lists given as null (Go clients send nil slices so) are shown as null, never left out.
      Links: c.hostConfig.Links ?? null,
      Devices: c.hostConfig.Devices ?? null,
      DeviceRequests: c.hostConfig.DeviceRequests ?? null,
      Ulimits: c.hostConfig.Ulimits ?? null,
      DeviceCgroupRules: c.hostConfig.DeviceCgroupRules ?? null,
      OomScoreAdj: c.hostConfig.OomScoreAdj ?? 0,
      CpuRealtimePeriod: c.hostConfig.CpuRealtimePeriod ?? 0,
      CpuRealtimeRuntime: c.hostConfig.CpuRealtimeRuntime ?? 0,
      ShmSize: c.hostConfig.ShmSize ?? 67108864,
      // Containers stored before berth kept it ran with runc, the only runtime then.
      Runtime: c.hostConfig.Runtime ?? 'runc',
      Isolation: c.hostConfig.Isolation ?? '',
      PidsLimit: c.hostConfig.PidsLimit ?? null,
      MemorySwappiness: c.hostConfig.MemorySwappiness ?? null,
      // omitempty in dockerd's HostConfig (undefined leaves it out of the JSON), as Config.ExposedPorts.
      Init: c.hostConfig.Init ?? undefined,
      // Always there in dockerd's, given or not.
      Cgroup: c.hostConfig.Cgroup ?? '',
      ConsoleSize: c.hostConfig.ConsoleSize ?? [0, 0],
      PublishAllPorts: c.hostConfig.PublishAllPorts ?? false,
      // Containers stored before berth kept the lists have what the spec gives them.
      ...protectedPaths(c.hostConfig),
    },
    GraphDriver: {
      Data: {
        LowerDir: graph.lowerDirs.join(':'),
        MergedDir: `${b}/rootfs`,
        UpperDir: `${b}/upper`,
        WorkDir: `${b}/work`,
      },
      Name: 'overlay2',
    },
    Mounts: mountsShape(mounts),
    Config: { ...c.config, ExposedPorts: c.config.ExposedPorts ?? undefined },
    NetworkSettings: {
      Bridge: '',
      SandboxID: isLive(c) ? c.id : '',
      HairpinMode: false,
      LinkLocalIPv6Address: '',
      LinkLocalIPv6PrefixLen: 0,
      Ports: portMap(reportedExposedPorts(c.config, c.hostConfig), isLive(c) ? net.ports : []),
      SandboxKey: isLive(c) ? `/proc/${c.pid}/ns/net` : '',
      SecondaryIPAddresses: null,
      SecondaryIPv6Addresses: null,
      EndpointID: bridge?.row.id ?? '',
      Gateway: bridge?.network.gateway ?? '',
      GlobalIPv6Address: bridge?.row.ip6 ?? '',
      GlobalIPv6PrefixLen: bridge?.row.ip6 ? bridge.network.prefixLen6 : 0,
      IPAddress: bridge?.row.ip ?? '',
      IPPrefixLen: bridge?.network.prefixLen ?? 0,
      IPv6Gateway: bridge?.row.ip6 ? bridge.network.gateway6 : '',
      MacAddress: bridge?.row.mac ?? '',
      Networks: containerNetworks(net.endpoints, isLive(c), apiVersion),
    },
  };
}
