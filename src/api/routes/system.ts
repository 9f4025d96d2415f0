// /_ping, /version, /info: shaped exactly as dockerd shapes them.
import type { FastifyInstance, FastifyReply } from 'fastify';
import type { Engine } from '../../engine/index.js';
import { MAX_API_VERSION, MIN_API_VERSION, versionBelow } from '../version.js';
import { PING_HEADERS } from '../headers.js';

export function systemRoutes(app: FastifyInstance, engine: Engine): void {
  const ping = (reply: FastifyReply) => reply.headers(PING_HEADERS).code(200);
  // Answered synchronously (no promise to settle): the cheapest request, as dockerd's.
  app.get('/_ping', (_req, reply) => {
    ping(reply).send('OK');
  });
  app.head('/_ping', (_req, reply) => {
    ping(reply).header('Content-Length', '2').send();
  });

  app.get('/version', async () => {
    const sys = engine.system;
    const h = sys.host;
    const runtime = await sys.ociRuntimeVersion();
    const details = {
      ApiVersion: MAX_API_VERSION,
      Arch: h.arch,
      BuildTime: '',
      Experimental: 'false',
      GitCommit: '',
      GoVersion: `node${process.versions.node}`,
      KernelVersion: h.kernelVersion,
      MinAPIVersion: MIN_API_VERSION,
      Os: 'linux',
    };
    return {
      Platform: { Name: 'berth' },
      Components: [
        { Name: 'Engine', Version: sys.version, Details: details },
        { Name: sys.settings.defaultRuntime, Version: runtime, Details: { GitCommit: '' } },
      ],
      Version: sys.version,
      ApiVersion: MAX_API_VERSION,
      MinAPIVersion: MIN_API_VERSION,
      GitCommit: '',
      GoVersion: details.GoVersion,
      Os: 'linux',
      Arch: h.arch,
      KernelVersion: h.kernelVersion,
      BuildTime: '',
    };
  });

  app.get('/info', async (req) => {
    const sys = engine.system;
    const cfg = sys.settings;
    const h = sys.host;
    const c = sys.counts();
    const mirrors = cfg.registryMirrors.map((m) => (m.endsWith('/') ? m : `${m}/`));
    return {
      ID: sys.id,
      Containers: c.containers,
      ContainersRunning: c.running,
      ContainersPaused: c.paused,
      ContainersStopped: c.stopped,
      Images: c.images,
      Driver: 'overlay2',
      DriverStatus: [
        ['Backing Filesystem', 'extfs'],
        ['Supports d_type', 'true'],
        ['Native Overlay Diff', 'true'],
      ],
      Plugins: { Volume: ['local'], Network: ['host', 'null'], Authorization: null, Log: ['json-file'] },
      MemoryLimit: h.cgroups.memoryLimit,
      SwapLimit: h.cgroups.swapLimit,
      KernelMemory: h.cgroups.kernelMemory,
      KernelMemoryTCP: h.cgroups.kernelMemoryTCP,
      CpuCfsPeriod: h.cgroups.cpuCfs,
      CpuCfsQuota: h.cgroups.cpuCfs,
      CPUShares: h.cgroups.cpuShares,
      CPUSet: h.cgroups.cpuset,
      PidsLimit: h.cgroups.pidsLimit,
      IPv4Forwarding: false,
      BridgeNfIptables: false,
      BridgeNfIp6tables: false,
      Debug: cfg.logLevel === 'debug',
      NFd: sys.openFds(),
      OomKillDisable: h.cgroups.oomKillDisable,
      NGoroutines: sys.activeResources() + engine.containers.pendingWaits,
      SystemTime: new Date().toISOString(),
      LoggingDriver: 'json-file',
      CgroupDriver: 'cgroupfs',
      CgroupVersion: h.cgroupVersion,
      NEventsListener: engine.events.subscribers,
      KernelVersion: h.kernelVersion,
      OperatingSystem: h.operatingSystem,
      OSVersion: h.osVersion,
      OSType: 'linux',
      Architecture: process.arch === 'x64' ? 'x86_64' : process.arch,
      IndexServerAddress: 'https://index.docker.io/v1/',
      RegistryConfig: {
        AllowNondistributableArtifactsCIDRs: [],
        AllowNondistributableArtifactsHostnames: [],
        InsecureRegistryCIDRs: ['127.0.0.0/8'],
        IndexConfigs: {
          'docker.io': { Name: 'docker.io', Mirrors: mirrors, Secure: true, Official: true },
          ...Object.fromEntries(
            cfg.insecureRegistries.map((r) => [r, { Name: r, Mirrors: [], Secure: false, Official: false }]),
          ),
        },
        Mirrors: mirrors,
      },
      NCPU: h.ncpu,
      MemTotal: h.memTotal,
      GenericResources: null,
      DockerRootDir: cfg.dataRoot,
      HttpProxy: process.env.HTTP_PROXY ?? process.env.http_proxy ?? '',
      HttpsProxy: process.env.HTTPS_PROXY ?? process.env.https_proxy ?? '',
      NoProxy: process.env.NO_PROXY ?? process.env.no_proxy ?? '',
      Name: h.hostname,
      Labels: [],
      ExperimentalBuild: false,
      ServerVersion: sys.version,
      Runtimes: Object.fromEntries(
        Object.entries(cfg.runtimes).map(([name, r]) => [
          name,
          { path: r.path, ...(r.runtimeArgs.length ? { runtimeArgs: r.runtimeArgs } : {}) },
        ]),
      ),
      DefaultRuntime: cfg.defaultRuntime,
      Swarm: {
        NodeID: '',
        NodeAddr: '',
        LocalNodeState: 'inactive',
        ControlAvailable: false,
        Error: '',
        RemoteManagers: null,
      },
      LiveRestoreEnabled: true,
      Isolation: '',
      InitBinary: 'catatonit',
      ContainerdCommit: { ID: '', Expected: '' },
      RuncCommit: { ID: '', Expected: '' },
      InitCommit: { ID: '', Expected: '' },
      SecurityOptions: ['name=seccomp,profile=builtin'],
      Warnings: null,
      // API 1.44: the CDI spec directories; empty, as dockerd's without CDI (berth injects no CDI devices).
      ...(versionBelow(req.apiVersion, '1.44') ? {} : { CDISpecDirs: [] }),
      // Runtimes' `status` (1.44) and `Containerd` (1.46) are omitted when empty, as dockerd omits them:
      // berth gathers no runtime features and runs no containerd.
    };
  });
}
