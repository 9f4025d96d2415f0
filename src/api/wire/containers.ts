// The create body's schema: Docker-lenient (unknown fields kept, nulls allowed,
// Cmd/Entrypoint as a string or a list) and precise where dockerd is.
import { z } from 'zod';
import type { Container } from '../../engine/index.js';
import { isoOrZero, statusText } from '../../engine/index.js';

const strList = z.union([z.array(z.string()), z.string().transform((s) => [s])]).nullish();
const strMap = z.record(z.string(), z.string()).nullish();
const objMap = z.record(z.string(), z.looseObject({})).nullish();
const int = z.number().int().nullish();

export const HostConfigSchema = z.looseObject({
  Binds: z.array(z.string()).nullish(),
  Mounts: z
    .array(
      z.looseObject({
        Type: z.string().optional(),
        Source: z.string().optional(),
        Target: z.string().optional(),
        ReadOnly: z.boolean().optional(),
        BindOptions: z.looseObject({ Propagation: z.string().optional() }).nullish(),
      }),
    )
    .nullish(),
  AutoRemove: z.boolean().nullish(),
  NetworkMode: z.string().nullish(),
  RestartPolicy: z.looseObject({ Name: z.string().nullish(), MaximumRetryCount: int }).nullish(),
  Privileged: z.boolean().nullish(),
  ReadonlyRootfs: z.boolean().nullish(),
  CapAdd: z.array(z.string()).nullish(),
  CapDrop: z.array(z.string()).nullish(),
  SecurityOpt: z.array(z.string()).nullish(),
  Init: z.boolean().nullish(),
  Memory: int,
  MemorySwap: int,
  NanoCpus: int,
  CpuShares: int,
  CpusetCpus: z.string().nullish(),
  PidsLimit: int,
  ShmSize: int,
  ExtraHosts: z.array(z.string()).nullish(),
  Dns: z.array(z.string()).nullish(),
  LogConfig: z.looseObject({ Type: z.string().nullish(), Config: strMap }).nullish(),
});

export const CreateBodySchema = z.looseObject({
  Image: z.string({ error: 'Config.Image is required' }).nullish(),
  Hostname: z.string().nullish(),
  Domainname: z.string().nullish(),
  User: z.string().nullish(),
  AttachStdin: z.boolean().nullish(),
  AttachStdout: z.boolean().nullish(),
  AttachStderr: z.boolean().nullish(),
  ExposedPorts: objMap,
  Tty: z.boolean().nullish(),
  OpenStdin: z.boolean().nullish(),
  StdinOnce: z.boolean().nullish(),
  Env: z.array(z.string()).nullish(),
  Cmd: strList,
  Entrypoint: strList,
  Volumes: objMap,
  WorkingDir: z.string().nullish(),
  Labels: strMap,
  StopSignal: z.string().nullish(),
  StopTimeout: int,
  HostConfig: HostConfigSchema.nullish(),
  NetworkingConfig: z.unknown().optional(),
});

export type CreateBody = z.infer<typeof CreateBodySchema>;

// ------------------------------------------------------------------ responses

const networkName = (mode: string) => (mode === 'default' || mode === 'bridge' ? 'bridge' : mode);

function networks(c: Container): Record<string, unknown> {
  // berth has no bridge networking yet: the default is a private namespace with
  // loopback only, reported under Docker's default network name with no address.
  const name = networkName(c.hostConfig.NetworkMode);
  return {
    [name]: {
      IPAMConfig: null,
      Links: null,
      Aliases: null,
      NetworkID: name,
      EndpointID: '',
      Gateway: '',
      IPAddress: '',
      IPPrefixLen: 0,
      IPv6Gateway: '',
      GlobalIPv6Address: '',
      GlobalIPv6PrefixLen: 0,
      MacAddress: '',
      DriverOpts: null,
    },
  };
}

function mounts(c: Container): Record<string, unknown>[] {
  const binds = (c.hostConfig.Binds ?? []).map((b) => {
    const [src = '', dst = '', mode = ''] = b.split(':');
    return {
      Type: 'bind',
      Source: src,
      Destination: dst,
      Mode: mode,
      RW: !mode.split(',').includes('ro'),
      Propagation: 'rprivate',
    };
  });
  const ms = (c.hostConfig.Mounts ?? []).map((m) => ({
    Type: m.Type ?? 'bind',
    Source: m.Source ?? '',
    Destination: m.Target ?? '',
    Mode: '',
    RW: !m.ReadOnly,
    Propagation: m.BindOptions?.Propagation || 'rprivate',
  }));
  return [...binds, ...ms];
}

const commandLine = (c: Container) => [c.path, ...c.args].map((a) => (/\s/.test(a) ? `'${a}'` : a)).join(' ');

/** One entry of `GET /containers/json`. */
export function containerSummary(c: Container, imageName: string): Record<string, unknown> {
  return {
    Id: c.row.id,
    Names: [`/${c.row.name}`],
    Image: imageName,
    ImageID: c.row.image_id,
    Command: commandLine(c),
    Created: Math.floor(c.row.created / 1000),
    Ports: [],
    Labels: c.config.Labels ?? {},
    State: c.row.status,
    Status: statusText(c.row),
    HostConfig: { NetworkMode: c.hostConfig.NetworkMode },
    NetworkSettings: { Networks: networks(c) },
    Mounts: mounts(c),
  };
}

/** `GET /containers/{id}/json`. */
export function containerInspect(c: Container, graph: { lowerDirs: string[] }): Record<string, unknown> {
  const r = c.row;
  const running = r.status === 'running' || r.status === 'paused' || r.status === 'restarting';
  const b = c.bundleDir;
  return {
    Id: r.id,
    Created: new Date(r.created).toISOString(),
    Path: c.path,
    Args: c.args,
    State: {
      Status: r.status,
      Running: running,
      Paused: r.status === 'paused',
      Restarting: r.status === 'restarting',
      OOMKilled: r.oom_killed === 1,
      Dead: r.status === 'dead',
      Pid: running ? r.pid : 0,
      ExitCode: r.exit_code,
      Error: r.error,
      StartedAt: isoOrZero(r.started_at),
      FinishedAt: isoOrZero(r.finished_at),
    },
    Image: r.image_id,
    ResolvConfPath: `${b}/resolv.conf`,
    HostnamePath: `${b}/hostname`,
    HostsPath: `${b}/hosts`,
    LogPath: `${b}/ctr.log`,
    Name: `/${r.name}`,
    RestartCount: r.restart_count,
    Driver: 'overlay2',
    Platform: 'linux',
    MountLabel: '',
    ProcessLabel: '',
    AppArmorProfile: '',
    ExecIDs: null,
    HostConfig: {
      ...c.hostConfig,
      ContainerIDFile: '',
      PortBindings: c.hostConfig.PortBindings ?? {},
      VolumeDriver: '',
      VolumesFrom: null,
      Dns: c.hostConfig.Dns ?? [],
      DnsOptions: [],
      DnsSearch: [],
      ExtraHosts: c.hostConfig.ExtraHosts ?? null,
      IpcMode: 'private',
      PidMode: '',
      UTSMode: '',
      UsernsMode: '',
      ShmSize: c.hostConfig.ShmSize ?? 67108864,
      Runtime: 'runc',
      Isolation: '',
      PidsLimit: c.hostConfig.PidsLimit ?? null,
      OomKillDisable: false,
      Init: c.hostConfig.Init ?? null,
      MaskedPaths: [],
      ReadonlyPaths: [],
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
    Mounts: mounts(c),
    Config: c.config,
    NetworkSettings: {
      Bridge: '',
      SandboxID: '',
      HairpinMode: false,
      LinkLocalIPv6Address: '',
      LinkLocalIPv6PrefixLen: 0,
      Ports: {},
      SandboxKey: '',
      SecondaryIPAddresses: null,
      SecondaryIPv6Addresses: null,
      EndpointID: '',
      Gateway: '',
      GlobalIPv6Address: '',
      GlobalIPv6PrefixLen: 0,
      IPAddress: '',
      IPPrefixLen: 0,
      IPv6Gateway: '',
      MacAddress: '',
      Networks: networks(c),
    },
  };
}
