// Docker's container Config and HostConfig, and an exec's, written once: as
// berth stores them (after create's defaults) and, derived from that, as a
// create body may carry them (every field absent or null, as Docker's clients
// send both). The TypeScript types are these schemas' outputs.
//
// Field names are Docker's; the schemas name every field berth applies. A
// create's field outside them is refused when it asks for anything
// (unsupported.ts). The checks with dockerd's wording are create.ts's: a
// schema only refuses a value of the wrong type.
import { z } from 'zod';
import { lazySchema } from '../../lazy-schema.js';
import type { Platform } from '../registry/manifest.js';

const int = lazySchema(() => z.number().int());
/** Cmd and Entrypoint: a list, or one string (the shell form some clients send). */
const strList = lazySchema(() => z.union([z.array(z.string()), z.string().transform((s) => [s])]));
const strMap = lazySchema(() => z.record(z.string(), z.string()));
/** ExposedPorts and Volumes: names to empty objects (Go's struct{}), whatever an image put in them kept. */
const objMap = lazySchema(() =>
  z.record(
    z.string(),
    z.custom<object>((v) => typeof v === 'object' && v !== null && !Array.isArray(v), { error: 'expected object' }),
  ),
);

type NullishShape<S extends z.ZodRawShape> = { -readonly [K in keyof S]: z.ZodOptional<z.ZodNullable<S[K]>> };

/** The same fields, each of which may be absent or null. */
function nullish<S extends z.ZodRawShape>(shape: S): NullishShape<S> {
  return Object.fromEntries(Object.entries(shape).map(([k, s]) => [k, z.optional(z.nullable(s))])) as NullishShape<S>;
}

/**
 * Fields a body gave: nulls dropped (the api drops them, as dockerd's Go
 * structs read null and absent alike).
 */
export type Given<T> = Partial<{ [K in keyof T]: NonNullable<T[K]> }>;

// ------------------------------------------------------------------ Config

/**
 * Docker's HealthConfig: durations in nanoseconds, 0 (or absent) inheriting
 * the image's or the default. Test: [] inherits, ["NONE"] disables,
 * ["CMD", argv...] or ["CMD-SHELL", command]. (health.ts runs it.)
 */
export const HealthConfigSchema = lazySchema(() =>
  z.looseObject({
    Test: z.array(z.string()).nullish(),
    Interval: int.nullish(),
    Timeout: int.nullish(),
    StartPeriod: int.nullish(),
    StartInterval: int.nullish(),
    Retries: int.nullish(),
  }),
);
export type HealthConfig = z.output<typeof HealthConfigSchema>;

/** A container's Config as stored and inspected: the request over its image's defaults. */
export const ContainerConfigSchema = lazySchema(() =>
  z.looseObject({
    Hostname: z.string(),
    Domainname: z.string(),
    User: z.string(),
    AttachStdin: z.boolean(),
    AttachStdout: z.boolean(),
    AttachStderr: z.boolean(),
    ExposedPorts: objMap.nullable(),
    Tty: z.boolean(),
    OpenStdin: z.boolean(),
    StdinOnce: z.boolean(),
    Env: z.array(z.string()).nullable(),
    Cmd: strList.nullable(),
    Healthcheck: HealthConfigSchema.optional(),
    Image: z.string(),
    Volumes: objMap.nullable(),
    WorkingDir: z.string(),
    Entrypoint: strList.nullable(),
    OnBuild: z.array(z.string()).nullable(),
    Labels: strMap.nullable(),
    StopSignal: z.string().optional(),
    StopTimeout: int.optional(),
    /** No network at all: no endpoint, a network namespace of its own with only loopback (network.ts). */
    NetworkDisabled: z.boolean().optional(),
    /** The shell of CMD-SHELL health checks (dockerd's getShell); /bin/sh -c when absent. */
    Shell: z.array(z.string()).optional(),
  }),
);
export type ContainerConfig = z.output<typeof ContainerConfigSchema>;

// -------------------------------------------------------------- HostConfig

const MountSchema = lazySchema(() =>
  z.looseObject({
    Type: z.string().optional(),
    Source: z.string().optional(),
    Target: z.string().optional(),
    ReadOnly: z.boolean().optional(),
    BindOptions: z
      .looseObject({
        Propagation: z.string().optional(),
        // API 1.44: a read-only bind is recursively read-only unless this says otherwise.
        ReadOnlyNonRecursive: z.boolean().nullish(),
        ReadOnlyForceRecursive: z.boolean().nullish(),
        // API 1.40: bind, not rbind. API 1.42: a missing source is made at start rather than refused (mounts.ts).
        NonRecursive: z.boolean().nullish(),
        CreateMountpoint: z.boolean().nullish(),
      })
      .nullish(),
    // Type volume (mounts.ts): NoCopy skips the copy-up; Labels and DriverConfig serve a volume created now.
    VolumeOptions: z
      .looseObject({
        NoCopy: z.boolean().nullish(),
        Labels: z.record(z.string(), z.string()).nullish(),
        DriverConfig: z
          .looseObject({ Name: z.string().nullish(), Options: z.record(z.string(), z.string()).nullish() })
          .nullish(),
        Subpath: z.string().nullish(),
      })
      .nullish(),
    // Type tmpfs: size in bytes, mode as a number (0o1777), and exec/noexec.
    TmpfsOptions: z
      .looseObject({
        SizeBytes: int.nullish(),
        Mode: int.nullish(),
        Options: z.array(z.array(z.string())).nullish(),
      })
      .nullish(),
  }),
);
export type Mount = z.output<typeof MountSchema>;

export const RESTART_POLICIES = ['', 'no', 'always', 'unless-stopped', 'on-failure'] as const;
const RestartPolicySchema = lazySchema(() => z.looseObject({ Name: z.enum(RESTART_POLICIES), MaximumRetryCount: int }));
export type RestartPolicy = z.output<typeof RestartPolicySchema>;

/** A block device's blkio weight, or one of its throttles (bytes or operations per second), by the device's path on the host. */
const WeightDeviceSchema = lazySchema(() => z.looseObject({ Path: z.string(), Weight: int }));
const ThrottleDeviceSchema = lazySchema(() => z.looseObject({ Path: z.string(), Rate: int }));

/**
 * The cgroup limits beyond memory, CPU count and pids (resources.ts checks
 * them as dockerd does, limits.ts writes them into the spec), and where the
 * container's cgroups are (cgroups.ts). CpuPeriod and CpuQuota are CFS
 * bandwidth in µs (a quota of -1 is none). CpuCount, CpuPercent and
 * IOMaximum* are Windows': dockerd on Linux keeps the first, discards the
 * second with a warning and refuses the others. KernelMemory is deprecated:
 * kept and shown, applied by no kernel berth runs on.
 */
const cgroupLimitsShape = () => ({
  CpuPeriod: int.optional(),
  CpuQuota: int.optional(),
  CpuCount: int.optional(),
  CpuPercent: int.optional(),
  CpusetMems: z.string().optional(),
  MemoryReservation: int.optional(),
  KernelMemory: int.optional(),
  KernelMemoryTCP: int.optional(),
  /** false unless asked (dockerd's default); null where the kernel cannot, the request discarded. */
  OomKillDisable: z.boolean().nullish(),
  BlkioWeight: int.optional(),
  BlkioWeightDevice: z.array(WeightDeviceSchema).nullish(),
  BlkioDeviceReadBps: z.array(ThrottleDeviceSchema).nullish(),
  BlkioDeviceWriteBps: z.array(ThrottleDeviceSchema).nullish(),
  BlkioDeviceReadIOps: z.array(ThrottleDeviceSchema).nullish(),
  BlkioDeviceWriteIOps: z.array(ThrottleDeviceSchema).nullish(),
  IOMaximumIOps: int.optional(),
  IOMaximumBandwidth: int.optional(),
  /** The cgroup the container's is made in (cgroups.ts). */
  CgroupParent: z.string().optional(),
  /** host or private (a cgroup namespace of its own); create stores dockerd's default for the host. */
  CgroupnsMode: z.string().optional(),
});

/** A container's HostConfig as stored and inspected, create's defaults applied. */
export const HostConfigSchema = lazySchema(() =>
  z.looseObject({
    Binds: z.array(z.string()).nullable(),
    Mounts: z.array(MountSchema).nullish(),
    /** Containers whose mounts this one takes, `id[:ro|rw]` (mounts.ts). */
    VolumesFrom: z.array(z.string()).nullish(),
    /** The driver of the volumes Binds and Config.Volumes create: only local (mounts.ts refuses another when it would be used). */
    VolumeDriver: z.string().nullish(),
    /** Destination to tmpfs options (`size=64m,mode=1777`). */
    Tmpfs: z.record(z.string(), z.string()).nullish(),
    AutoRemove: z.boolean(),
    NetworkMode: z.string(),
    RestartPolicy: RestartPolicySchema,
    Privileged: z.boolean(),
    ReadonlyRootfs: z.boolean(),
    CapAdd: z.array(z.string()).nullable(),
    CapDrop: z.array(z.string()).nullable(),
    SecurityOpt: z.array(z.string()).nullable(),
    /** null: none (privileged); create stores the defaults when none are given (paths.ts). */
    MaskedPaths: z.array(z.string()).nullish(),
    ReadonlyPaths: z.array(z.string()).nullish(),
    /** The OCI runtime, one of the daemon's (runtimes.ts); create stores the default's name when none is given. */
    Runtime: z.string().optional(),
    /** Into the OCI spec's annotations (API 1.43). */
    Annotations: strMap.nullish(),
    Init: z.boolean().nullish(),
    Memory: int,
    MemorySwap: int,
    /** null: the kernel's (dockerd's nil; -1 from a client means that too). */
    MemorySwappiness: int.nullish(),
    NanoCpus: int,
    CpuShares: int,
    CpusetCpus: z.string(),
    /** Real-time scheduling of the cgroup, µs (realtime.ts). */
    CpuRealtimePeriod: int.optional(),
    CpuRealtimeRuntime: int.optional(),
    PidsLimit: int.nullish(),
    ...cgroupLimitsShape(),
    ShmSize: int.optional(),
    ExtraHosts: z.array(z.string()).nullish(),
    /** Legacy links on the default bridge (links.ts), or a user network's links (endpoints.ts). */
    Links: z.array(z.string()).nullish(),
    Dns: z.array(z.string()).nullish(),
    DnsSearch: z.array(z.string()).nullish(),
    DnsOptions: z.array(z.string()).nullish(),
    PortBindings: z
      .record(
        z.string(),
        z.array(z.looseObject({ HostIp: z.string().nullish(), HostPort: z.string().nullish() })).nullable(),
      )
      .nullish(),
    PublishAllPorts: z.boolean().nullish(),
    LogConfig: z.looseObject({ Type: z.string(), Config: strMap }),
    PidMode: z.string().optional(),
    UTSMode: z.string().optional(),
    IpcMode: z.string().optional(),
    UsernsMode: z.string().optional(),
    Isolation: z.string().optional(),
    GroupAdd: z.array(z.string()).nullish(),
    DeviceCgroupRules: z.array(z.string()).nullish(),
    OomScoreAdj: int.optional(),
    Ulimits: z.array(z.looseObject({ Name: z.string(), Soft: int, Hard: int })).nullish(),
    Sysctls: strMap.nullish(),
    Devices: z
      .array(
        z.looseObject({
          PathOnHost: z.string().nullish(),
          PathInContainer: z.string().nullish(),
          CgroupPermissions: z.string().nullish(),
        }),
      )
      .nullish(),
  }),
);
export type HostConfig = z.output<typeof HostConfigSchema>;

// ------------------------------------------------------------- create body

/** A create body's HostConfig: any name may come as a restart policy (create.ts refuses it in dockerd's words). */
const HostConfigBodySchema = lazySchema(() =>
  z.looseObject({
    ...nullish(HostConfigSchema.shape),
    RestartPolicy: z.looseObject({ Name: z.string().nullish(), MaximumRetryCount: int.nullish() }).nullish(),
    LogConfig: z.looseObject({ Type: z.string().nullish(), Config: strMap.nullish() }).nullish(),
  }),
);
export type HostConfigBody = z.output<typeof HostConfigBodySchema>;

/** A Config as a body carries it (a create's, beside HostConfig; a commit's). */
export const ConfigBodySchema = lazySchema(() =>
  z.looseObject({
    ...nullish(ContainerConfigSchema.shape),
    Image: z.string({ error: 'Config.Image is required' }).nullish(),
    // Container-wide before API 1.44, the endpoint's since: the first network's (network/endpoints.ts).
    MacAddress: z.string().nullish(),
  }),
);
export type ConfigBody = z.output<typeof ConfigBodySchema>;

/**
 * `POST /containers/{id}/update`'s body (Docker's UpdateConfig: its Resources
 * and a RestartPolicy): the fields berth changes; unsupported.ts refuses the
 * rest of Docker's when they ask for something.
 */
export const UpdateBodySchema = lazySchema(() =>
  z.looseObject({
    ...nullish(
      HostConfigSchema.pick({
        Memory: true,
        MemorySwap: true,
        NanoCpus: true,
        CpuShares: true,
        CpusetCpus: true,
        PidsLimit: true,
        CpuPeriod: true,
        CpuQuota: true,
        CpusetMems: true,
        MemoryReservation: true,
        KernelMemory: true,
        BlkioWeight: true,
        CpuPercent: true,
        IOMaximumIOps: true,
        IOMaximumBandwidth: true,
      }).shape,
    ),
    RestartPolicy: HostConfigBodySchema.shape.RestartPolicy,
  }),
);
export type UpdateBody = z.output<typeof UpdateBodySchema>;

/** NetworkingConfig: the settings of each network's endpoint, by network name (an entry may be null). */
const NetworkingConfigSchema = lazySchema(() =>
  z.looseObject({
    EndpointsConfig: z.record(z.string(), z.looseObject({}).nullable()).nullish(),
  }),
);
export type NetworkingConfig = z.output<typeof NetworkingConfigSchema>;

/** `POST /containers/create`'s body: a Config with HostConfig and NetworkingConfig beside its fields. */
export const CreateBodySchema = lazySchema(() =>
  ConfigBodySchema.extend({
    HostConfig: HostConfigBodySchema.nullish(),
    NetworkingConfig: NetworkingConfigSchema.nullish(),
  }),
);

/** What create takes: the body's Config, HostConfig and NetworkingConfig, nulls dropped. */
export interface CreateRequest {
  name?: string;
  config: Given<ConfigBody>;
  hostConfig: Given<HostConfigBody>;
  networkingConfig?: NetworkingConfig;
  /**
   * Read-only binds stay non-recursively read-only unless a mount asks
   * otherwise (dockerd's DefaultReadOnlyNonRecursive, for clients older than
   * API 1.44); by default they are recursively read-only where the kernel can.
   */
  nonRecursiveReadonlyBinds?: boolean;
  /** Create's `platform=`: the image must be of it. */
  platform?: Platform | undefined;
}

// -------------------------------------------------------------------- exec

/** An exec's configuration, as kept and inspected. */
const ExecConfigSchema = lazySchema(() =>
  z.object({
    Cmd: strList,
    AttachStdin: z.boolean(),
    AttachStdout: z.boolean(),
    AttachStderr: z.boolean(),
    Tty: z.boolean(),
    Env: z.array(z.string()).nullable(),
    User: z.string(),
    WorkingDir: z.string(),
    Privileged: z.boolean(),
    DetachKeys: z.string(),
    /** [height, width] of the terminal from the start. */
    ConsoleSize: z.tuple([int, int]).nullish(),
  }),
);
export type ExecConfig = z.output<typeof ExecConfigSchema>;

/** `POST /containers/{id}/exec`'s body. */
export const ExecCreateSchema = lazySchema(() => z.looseObject(nullish(ExecConfigSchema.shape)));
export type ExecCreateBody = z.output<typeof ExecCreateSchema>;
