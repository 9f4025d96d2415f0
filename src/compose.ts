// The composition root: the only place that builds the parts and wires them.
import { accessSync, constants, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import type { Config } from './config.js';
import { ExecService, execProber } from './engine/containers/exec.js';
import { ContainerService } from './engine/containers/service.js';
import { ContentStore } from './engine/content/store.js';
import { EventBus } from './engine/events.js';
import { ArchiveService } from './engine/archive/service.js';
import { BuildService } from './engine/builder/service.js';
import { CommitService } from './engine/commit/service.js';
import { ImageService } from './engine/images/service.js';
import type { Engine } from './engine/index.js';
import { Extractor } from './engine/layers/extractor.js';
import { LayerStore } from './engine/layers/layer-store.js';
import { backgroundDeletions, spreadChildren } from './engine/os/dirs.js';
import { randomUuid } from './engine/os/random.js';
import { RegistryClient } from './engine/registry/client.js';
import { Dns } from './engine/network/dns.js';
import { Endpoints } from './engine/network/endpoints.js';
import { Firewall } from './engine/network/firewall.js';
import { HostPlumbing } from './engine/network/host.js';
import { HostPorts } from './engine/network/ports.js';
import { NetworkService } from './engine/network/service.js';
import { ExitWatcher } from './engine/runtime/exits.js';
import { DEFAULT_LOG_SIZE_MAX, Runtime } from './engine/runtime/runtime.js';
import { ContainerRepository } from './engine/store/containers.js';
import { EMPTY_DB_TEMPLATE, guardFullDisk, loadMigrations, openDb, shrinkMemory, type Db } from './engine/store/db.js';
import { ImageRepository } from './engine/store/images.js';
import { NetworkRepository } from './engine/store/networks.js';
import { SystemService } from './engine/system.js';
import { VolumeRepository } from './engine/store/volumes.js';
import { VolumeService } from './engine/volumes/service.js';
import { PluginService } from './engine/plugins/service.js';
import type { Logger } from './log.js';

export interface Built {
  engine: Engine;
  db: Db;
  /** Frees the engine's caches that an idle daemon does not need (src/idle.ts). */
  releaseMemory(): void;
  /** Work that can wait until the daemon has answered (the database's reserve, runc's sealed copy). */
  afterServing(): Promise<void>;
  close(): Promise<void>;
}

/** A stable id for this daemon's data root, as dockerd's engine-id. */
function daemonId(dataRoot: string): string {
  const file = path.join(dataRoot, 'engine-id');
  try {
    return readFileSync(file, 'utf8').trim();
  } catch {
    const id = randomUuid();
    writeFileSync(file, `${id}\n`, { mode: 0o600 });
    return id;
  }
}

/** A program's absolute path: conmon needs one for the runtime. Searches PATH and the sbin dirs. */
function which(prog: string): string {
  if (prog.includes('/')) return path.resolve(prog);
  const dirs = [...(process.env.PATH ?? '').split(':'), '/usr/local/sbin', '/usr/sbin', '/sbin'];
  for (const d of dirs.filter(Boolean)) {
    const p = path.join(d, prog);
    try {
      accessSync(p, constants.X_OK);
      return p;
    } catch {
      // keep looking
    }
  }
  return prog; // reported when first used
}

/** Podman's DNS server, as Debian installs it: names on user networks. */
const AARDVARK_DNS = '/usr/lib/podman/aardvark-dns';

/** Networks: their records, the host's side of them (bridges, firewall, host ports, DNS), and endpoints. */
async function buildNetworks(config: Config, db: Db, events: EventBus, logger: Logger) {
  const n = config.network;
  const log = logger.child({ component: 'networks' });
  if (n.ipForward) enableIpForwarding(log);
  const repo = new NetworkRepository(db);
  const plumbing = new HostPlumbing({
    firewall: new Firewall({ prefix: n.iptablesChainPrefix, enabled: n.iptables, log }),
    // dockerd's ip6tables needs its iptables on as well.
    firewall6: new Firewall({ prefix: n.iptablesChainPrefix, enabled: n.iptables && n.ip6tables, family: 6, log }),
    ipForward6: n.ipForward,
    ports: new HostPorts({ proxy: n.userlandProxy }),
    dns: new Dns({ configDir: path.join(config.execRoot, 'dns'), binary: AARDVARK_DNS, logger: log }),
    log,
  });
  const settings = {
    defaultBridge: n.bridge,
    pools: n.defaultAddressPools,
    ...(n.bip ? { bip: n.bip } : {}),
    ...(n.fixedCidr ? { fixedCidr: n.fixedCidr } : {}),
    ipv6: n.ipv6,
    ...(n.fixedCidrV6 ? { fixedCidrV6: n.fixedCidrV6 } : {}),
  };
  const networks = new NetworkService({ repo, events, logger, settings, plumbing });
  await networks.init();
  const dnsDefaults = { dns: n.dns, search: n.dnsSearch, options: n.dnsOptions };
  const endpoints = new Endpoints({ repo, networks, plumbing, events, logger, dnsDefaults });
  return { networks, endpoints, plumbing };
}

/** dockerd turns on IPv4 forwarding: without it no container traffic leaves the host. */
function enableIpForwarding(log: Logger): void {
  const file = '/proc/sys/net/ipv4/ip_forward';
  try {
    if (readFileSync(file, 'utf8').trim() !== '1') writeFileSync(file, '1\n');
  } catch (err) {
    log.warn({ err }, 'could not turn on IPv4 forwarding: containers may not reach outside the host');
  }
}

export async function buildEngine(config: Config, logger: Logger): Promise<Built> {
  mkdirSync(config.dataRoot, { recursive: true, mode: 0o710 });
  const dir = (name: string) => {
    const p = path.join(config.dataRoot, name);
    mkdirSync(p, { recursive: true, mode: 0o700 });
    return p;
  };
  /** A directory of independent trees (see os/dirs.ts). */
  const spreadDir = (name: string) => {
    const p = dir(name);
    spreadChildren(p);
    return p;
  };
  const db = openDb(path.join(config.dataRoot, 'berth.db'), loadMigrations(), EMPTY_DB_TEMPLATE);
  const reserve = guardFullDisk(
    db,
    path.join(config.dataRoot, 'berth.db.reserve'),
    logger.child({ component: 'store' }),
  );
  const imageRepo = new ImageRepository(db);
  const events = new EventBus();

  const content = new ContentStore(dir('content'));
  const layers = new LayerStore(dir('layers'));
  await layers.init();
  // Leftovers of pulls and commits cut short by a crash: nothing records them. Layers a
  // failed pull kept for its next attempt go too, unless an image took them since.
  imageRepo.deleteUnusedLayers();
  await content.init();
  await layers.cleanup(imageRepo.layerDirs());
  // Blobs stored by a pull or commit that a crash cut short before it recorded its image.
  const swept = await content.sweep(imageRepo.heldBlobs());
  if (swept.length) logger.info({ blobs: swept.length }, 'removed blobs that no image holds');

  const registry = new RegistryClient({
    insecureRegistries: config.insecureRegistries,
    mirrors: config.registryMirrors,
    certsDirs: config.certsDirs,
    headerTimeoutMs: config.registryStallTimeoutMs,
    idleTimeoutMs: config.registryStallTimeoutMs,
    logger: logger.child({ component: 'registry' }),
  });
  const extractor = new Extractor({ logger: logger.child({ component: 'extractor' }) });
  const images = new ImageService({
    repo: imageRepo,
    layers,
    extractor,
    content,
    registry,
    logger,
    events,
    maxConcurrentDownloads: config.maxConcurrentDownloads,
  });

  const runtimeCfg = config.runtimes[config.defaultRuntime]!;
  const otherRuntimes = Object.fromEntries(
    Object.entries(config.runtimes)
      .filter(([name]) => name !== config.defaultRuntime)
      .map(([name, r]) => [name, { path: which(r.path), runtimeArgs: r.runtimeArgs }]),
  );
  const runtime = new Runtime({
    runcPath: which(runtimeCfg.path),
    runtimeArgs: runtimeCfg.runtimeArgs,
    runtimes: otherRuntimes,
    conmonPath: which(config.conmonPath),
    execRoot: config.execRoot,
    logger,
  });
  await runtime.prepare();
  const exits = new ExitWatcher(path.join(config.execRoot, 'exits'));
  const containerRepo = new ContainerRepository(db);
  const { networks, endpoints, plumbing } = await buildNetworks(config, db, events, logger);
  const volumes = new VolumeService({
    repo: new VolumeRepository(db),
    root: dir('volumes'),
    subpathRoot: path.join(config.execRoot, 'volume-subpaths'),
    events,
    logger: logger.child({ component: 'volumes' }),
  });
  const containers = new ContainerService({
    repo: containerRepo,
    images,
    runtime,
    exits,
    logger,
    root: spreadDir('containers'),
    logSizeMax: DEFAULT_LOG_SIZE_MAX,
    events,
    realtime: { period: config.cpuRtPeriod, runtime: config.cpuRtRuntime },
    cgroupParent: config.cgroupParent,
    endpoints,
    volumes,
    runtimes: { default: config.defaultRuntime, names: Object.keys(config.runtimes) },
  });
  networks.knowContainers((id) => containerRepo.find(id)?.name ?? id.slice(0, 12));
  await containers.recover();
  const execs = new ExecService({ containers, runtime, events, logger });
  containers.monitorHealth(execProber(execs));

  const system = new SystemService(config, { containers: containerRepo, images: imageRepo }, daemonId(config.dataRoot));
  const commits = new CommitService({
    containers,
    images,
    repo: imageRepo,
    layers,
    extractor,
    content,
    events,
    logger,
  });
  const archives = new ArchiveService({ containers, extractor });
  const builds = new BuildService({
    images,
    repo: imageRepo,
    containers,
    commits,
    archives,
    tmpDir: dir('builds'),
    cacheMountDir: dir('build-cache-mounts'),
    extractor,
    logger,
  });
  await builds.sweep();
  const plugins = new PluginService({ registry });
  const engine: Engine = {
    system,
    images,
    containers,
    execs,
    events,
    commits,
    networks,
    archives,
    volumes,
    builds,
    plugins,
  };
  return {
    engine,
    db,
    releaseMemory: () => shrinkMemory(db),
    async afterServing() {
      const made = reserve.makeReserve();
      await runtime.seal();
      await made;
    },
    async close() {
      containers.close();
      exits.close();
      await plumbing.close();
      await extractor.close();
      await backgroundDeletions(); // a clean stop leaves nothing half deleted
      reserve.close();
      db.close();
    },
  };
}
