// Facts about the daemon and its host, for /version, /info and /_ping.
import { execFile } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import os from 'node:os';
import { promisify } from 'node:util';
import type { Config } from '../config.js';
import { VERSION } from '../config.js';
import { type CgroupFeatures, cgroupFeatures } from './os/cgroupinfo.js';
import { cgroupVersion } from './os/kernel.js';
import type { ContainerRepository, ContainerStatus } from './store/containers.js';
import type { ImageRepository } from './store/images.js';

const run = promisify(execFile);

export interface Counts {
  containers: number;
  running: number;
  paused: number;
  stopped: number;
  images: number;
}

export interface HostFacts {
  kernelVersion: string;
  operatingSystem: string;
  osVersion: string;
  ncpu: number;
  memTotal: number;
  hostname: string;
  cgroupVersion: '1' | '2';
  /** The limits the host's cgroups can apply (dockerd's sysinfo, shown by /info). */
  cgroups: CgroupFeatures;
  arch: string;
}

import { goArch } from './registry/manifest.js';

export { goArch };

function osRelease(): Record<string, string> {
  try {
    const out: Record<string, string> = {};
    for (const line of readFileSync('/etc/os-release', 'utf8').split('\n')) {
      const m = /^([A-Z_]+)=("?)(.*)\2$/.exec(line);
      if (m) out[m[1]!] = m[3]!;
    }
    return out;
  } catch {
    return {};
  }
}

function hostFacts(): HostFacts {
  const rel = osRelease();
  return {
    kernelVersion: os.release(),
    operatingSystem: rel.PRETTY_NAME ?? 'Linux',
    osVersion: rel.VERSION_ID ?? '',
    ncpu: os.availableParallelism(),
    memTotal: os.totalmem(),
    hostname: os.hostname(),
    cgroupVersion: cgroupVersion(),
    cgroups: cgroupFeatures(),
    arch: goArch(),
  };
}

export class SystemService {
  private hostFacts: HostFacts | undefined;
  private runtimeVersion: Promise<string> | undefined;
  readonly id: string;
  readonly startedAt = new Date();

  constructor(
    private readonly config: Config,
    private readonly repos: { containers: ContainerRepository; images: ImageRepository },
    daemonId: string,
  ) {
    this.id = daemonId;
  }

  /** The host as /info and /version describe it: read at the first of them, not at start (cgroup probes). */
  get host(): HostFacts {
    this.hostFacts ??= hostFacts();
    return this.hostFacts;
  }

  /** Descriptors berthd has open (`/info`'s NFd, as dockerd counts its own). */
  openFds(): number {
    return readdirSync('/proc/self/fd').length - 1; // less the one reading the directory
  }

  /**
   * What berthd's event loop is waiting on: sockets, timers, file watchers and
   * operations in flight. With the waits it holds for clients, `/info`'s
   * NGoroutines: what dockerd counts there (and its tests watch for leaks) is
   * the same thing in Go's terms.
   */
  activeResources(): number {
    return process.getActiveResourcesInfo().length;
  }

  counts(): Counts {
    const byStatus = this.repos.containers.countByStatus();
    const by = (s: ContainerStatus) => byStatus.get(s) ?? 0;
    const containers = [...byStatus.values()].reduce((a, n) => a + n, 0);
    const running = by('running') + by('restarting');
    const paused = by('paused');
    return { containers, running, paused, stopped: containers - running - paused, images: this.repos.images.count() };
  }

  /** The OCI runtime's own version line, asked once and remembered. */
  ociRuntimeVersion(): Promise<string> {
    const rt = this.config.runtimes[this.config.defaultRuntime]!;
    this.runtimeVersion ??= run(rt.path, ['--version'])
      .then(({ stdout }) => /version\s+(\S+)/.exec(stdout)?.[1] ?? 'unknown')
      .catch(() => 'unknown');
    return this.runtimeVersion;
  }

  get version(): string {
    return VERSION;
  }

  get settings(): Config {
    return this.config;
  }
}
