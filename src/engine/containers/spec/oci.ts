// The parts of the OCI runtime spec (runc's config.json) that berth writes.
import type { OciSeccomp } from './seccomp.js';

export interface OciUser {
  uid: number;
  gid: number;
  additionalGids?: number[];
}

export interface OciCapabilities {
  bounding: string[];
  effective: string[];
  permitted: string[];
}

export interface OciRlimit {
  type: string;
  hard: number;
  soft: number;
}

export interface OciProcess {
  terminal: boolean;
  user: OciUser;
  args: string[];
  env: string[];
  cwd: string;
  capabilities: OciCapabilities;
  rlimits: OciRlimit[];
  noNewPrivileges: boolean;
  /** /proc/<pid>/oom_score_adj of the process. */
  oomScoreAdj?: number;
  /** The terminal's initial size (runc sets it before the process runs). */
  consoleSize?: { height: number; width: number };
}

export interface OciMount {
  destination: string;
  type: string;
  source: string;
  options: string[];
}

export interface OciDeviceRule {
  allow: boolean;
  type?: 'a' | 'c' | 'b';
  major?: number;
  minor?: number;
  access: string;
}

export interface OciResources {
  devices: OciDeviceRule[];
  memory?: {
    limit?: number;
    reservation?: number;
    swap?: number;
    kernelTCP?: number;
    swappiness?: number;
    disableOOMKiller?: boolean;
  };
  cpu?: {
    shares?: number;
    quota?: number;
    period?: number;
    realtimePeriod?: number;
    realtimeRuntime?: number;
    cpus?: string;
    mems?: string;
  };
  pids?: { limit: number };
  blockIO?: {
    weight?: number;
    weightDevice?: { major: number; minor: number; weight: number }[];
    throttleReadBpsDevice?: OciThrottleDevice[];
    throttleWriteBpsDevice?: OciThrottleDevice[];
    throttleReadIOPSDevice?: OciThrottleDevice[];
    throttleWriteIOPSDevice?: OciThrottleDevice[];
  };
}

export interface OciThrottleDevice {
  major: number;
  minor: number;
  rate: number;
}

/** What `runc update` changes of a running container. */
export type OciResourcesUpdate = Omit<OciResources, 'devices'>;

export type OciNamespaceType = 'pid' | 'network' | 'mount' | 'ipc' | 'uts' | 'user' | 'cgroup';

/** A device node runc makes in the container's /dev. */
export interface OciLinuxDevice {
  path: string;
  type: 'c' | 'b';
  major: number;
  minor: number;
  fileMode: number;
  uid: number;
  gid: number;
}

export interface OciLinux {
  namespaces: { type: OciNamespaceType; path?: string }[];
  devices?: OciLinuxDevice[];
  resources: OciResources;
  cgroupsPath: string;
  maskedPaths: string[];
  readonlyPaths: string[];
  sysctl?: Record<string, string>;
  rootfsPropagation?: string;
  seccomp?: OciSeccomp;
}

export interface OciSpec {
  ociVersion: string;
  process: OciProcess;
  root: { path: string; readonly: boolean };
  hostname: string;
  mounts: OciMount[];
  annotations: Record<string, string>;
  linux: OciLinux;
}
