// Docker's container Config and HostConfig, as berth stores and acts on them.
// Field names are Docker's; unknown fields are kept (and ignored) as dockerd does.

export interface ContainerConfig {
  Hostname: string;
  Domainname: string;
  User: string;
  AttachStdin: boolean;
  AttachStdout: boolean;
  AttachStderr: boolean;
  ExposedPorts: Record<string, object> | null;
  Tty: boolean;
  OpenStdin: boolean;
  StdinOnce: boolean;
  Env: string[] | null;
  Cmd: string[] | null;
  Image: string;
  Volumes: Record<string, object> | null;
  WorkingDir: string;
  Entrypoint: string[] | null;
  OnBuild: string[] | null;
  Labels: Record<string, string> | null;
  StopSignal?: string;
  StopTimeout?: number;
  [k: string]: unknown;
}

export interface Mount {
  Type?: string;
  Source?: string;
  Target?: string;
  ReadOnly?: boolean;
  BindOptions?: { Propagation?: string } | null;
}

export interface RestartPolicy {
  Name: '' | 'no' | 'always' | 'unless-stopped' | 'on-failure';
  MaximumRetryCount: number;
}

export interface HostConfig {
  Binds: string[] | null;
  Mounts?: Mount[] | null;
  AutoRemove: boolean;
  NetworkMode: string;
  RestartPolicy: RestartPolicy;
  Privileged: boolean;
  ReadonlyRootfs: boolean;
  CapAdd: string[] | null;
  CapDrop: string[] | null;
  SecurityOpt: string[] | null;
  Init?: boolean | null;
  Memory: number;
  MemorySwap: number;
  NanoCpus: number;
  CpuShares: number;
  CpusetCpus: string;
  PidsLimit?: number | null;
  LogConfig: { Type: string; Config: Record<string, string> };
  ExtraHosts?: string[] | null;
  Dns?: string[] | null;
  ShmSize?: number;
  [k: string]: unknown;
}

export interface CreateRequest {
  name?: string;
  config: Partial<ContainerConfig> & { Image: string };
  hostConfig: Partial<HostConfig>;
}
