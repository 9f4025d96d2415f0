// Docker's container verbs, as the API calls them. This file wires the parts
// and holds create, rename and wait. containers/ is in layers, each
// importing only those below it; a lower module that must call back up is
// given a function or a small interface by this one:
//   service.ts      ContainerService (this file): the top
//   remove.ts       docker rm; update.ts docker update; exec.ts docker exec, and the health
//                   checks' execs; health.ts health checks of the running containers
//   run/            a container's process: bundle.ts (the OCI bundle), lifecycle.ts (start, stop,
//                   kill, pause…), exits.ts (an exit, recovery at berthd's start; restart.ts
//                   decides restarts), netjoin.ts, rootview.ts (docker cp's view)
//   io/             what a client reads: logs, attach, resize, top, stats (container-io.ts);
//                   attach.ts, stats.ts, jsonlog.ts, logrotation.ts
//   create/         what a create is checked against and defaults (create.ts), mounts, names,
//                   LogConfig (logconfig.ts), the fields berth refuses (unsupported.ts)
//   spec/           the OCI spec builders (spec.ts) and their parts: capabilities, cgroups,
//                   devices, limits, namespaces, seccomp, ulimits, user, paths
//   the bottom      config.ts (the request shapes), container.ts (the Container view),
//                   lookup.ts (find and list), links.ts, waits.ts, status.ts
// State lives in SQLite; processes live under conmon, which outlives berthd.
import { randomBytes } from 'node:crypto';
import { mkdir, rm } from 'node:fs/promises';
import path from 'node:path';
import { conflict, invalidParameter, systemError } from '../../errors.js';
import type { Logger } from '../../log.js';
import type { EventBus } from '../events.js';
import { checkFilters, matchLabels, parseUntil, type Filters } from '../filters.js';
import type { ImageConfig } from '../images/config.js';
import type { ImageService } from '../images/service.js';
import type { ContainerNetworking, Endpoints } from '../network/endpoints.js';
import type { RootView, ViewMount } from '../os/rooted.js';
import type { ExitWatcher } from '../runtime/exits.js';
import type { LogEntry, ReadLogOptions } from '../runtime/logs.js';
import type { Runtime } from '../runtime/runtime.js';
import { type ContainerRepository, isUniqueViolation } from '../store/containers.js';
import type { VolumeService } from '../volumes/service.js';
import type { CreateRequest, Given, UpdateBody } from './config.js';
import { type Container, isRunning, memberOf, publish } from './container.js';
import { checkConfig, createSettings } from './create/create.js';
import { checkBindSources, type ContainerMount, containerMounts, planMounts } from './create/mounts.js';
import { checkName, generateName } from './create/names.js';
import { checkImagePlatform } from './create/platform.js';
import { RUNC_ONLY, type RuntimeNames } from './create/runtimes.js';
import { HealthMonitor, type Prober } from './health.js';
import { Attachments, type AttachSession } from './io/attach.js';
import { type AttachOptions, ContainerIo } from './io/container-io.js';
import { JsonLogs } from './io/jsonlog.js';
import { LogRotation } from './io/logrotation.js';
import { legacyLinks, splitLinkName, withUserNetworkLinks } from './links.js';
import { ContainerLookup } from './lookup.js';
import { Bundles } from './run/bundle.js';
import { ExitHandler } from './run/exits.js';
import { Lifecycle } from './run/lifecycle.js';
import { openContainerView, viewMounts } from './run/rootview.js';
import type { RealtimeBudget } from './spec/realtime.js';
import { withDonorIds } from './spec/namespaces.js';
import { networkDisabled } from './spec/network.js';
import { type RemoveDeps, removeContainer } from './remove.js';
import { updateContainer } from './update.js';
import { waitCondition, type WaitResult, Waits } from './waits.js';

/** The daemon's parts the containers are given (compose.ts). */
export interface ContainerDeps {
  repo: ContainerRepository;
  images: ImageService;
  runtime: Runtime;
  exits: ExitWatcher;
  logger: Logger;
  /** <data-root>/containers */
  root: string;
  initPath?: string;
  /** The real-time budget given to the containers' parent cgroup before each start (spec/realtime.ts). */
  realtime?: RealtimeBudget;
  /** The parent cgroup of containers that name none (--cgroup-parent); berth's own when absent. */
  cgroupParent?: string;
  /** Default cap on a container's log, bytes. */
  logSizeMax: number;
  events: EventBus;
  /** The container's places on networks (network/endpoints.ts). */
  endpoints: Endpoints;
  /** Volumes, and the mount points containers hold on them (volumes/service.ts). */
  volumes: VolumeService;
  /** The daemon's OCI runtimes by name (HostConfig.Runtime); runc alone when absent. */
  runtimes?: RuntimeNames;
}

export class ContainerService {
  private readonly lookup: ContainerLookup;
  private readonly waits = new Waits();
  private readonly bundles: Bundles;
  /** Health checks of the running containers (health.ts). */
  private readonly health: HealthMonitor;
  /** Rotation of the running containers' logs (io/logrotation.ts). */
  private readonly logRotation: LogRotation;
  /** json-file's file at dockerd's place, kept beside the log (io/jsonlog.ts). */
  private readonly jsonLogs: JsonLogs;
  private readonly lifecycle: Lifecycle;
  private readonly exits: ExitHandler;
  private readonly io: ContainerIo;
  private readonly removal: RemoveDeps;

  constructor(private readonly deps: ContainerDeps) {
    const log = deps.logger.child({ component: 'containers' });
    const lookup: ContainerLookup = new ContainerLookup(deps.repo, deps.images, deps.root, (id) => health.current(id));
    this.lookup = lookup;
    const health: HealthMonitor = new HealthMonitor({
      repo: deps.repo,
      events: deps.events,
      lookup,
      log: log.child({ health: true }),
    });
    this.health = health;
    this.bundles = new Bundles({
      images: deps.images,
      exits: deps.exits,
      initPath: deps.initPath,
      realtime: deps.realtime,
      cgroupParent: deps.cgroupParent,
      lookup,
      endpoints: deps.endpoints,
      volumes: deps.volumes,
      dataRoot: path.dirname(deps.root),
    });
    // Clients attached to containers' stdio (io/attach.ts): a start joins them to its run, attach opens them.
    const attachments = new Attachments(log);
    this.logRotation = new LogRotation({
      lookup,
      reopenLog: (dir) => deps.runtime.reopenLog(dir),
      log: log.child({ logRotation: true }),
    });
    this.jsonLogs = new JsonLogs(lookup, log.child({ jsonLog: true }));
    const { repo, runtime, events, endpoints, volumes, exits, root, logSizeMax } = deps;
    const { waits, bundles, logRotation, jsonLogs } = this;
    const autoRemove = (id: string) =>
      this.remove(id, { force: true, volumes: true }).catch((err) => log.warn({ err, id }, 'auto-remove failed'));
    const startOf = (id: string) => this.lifecycle.startOf(id);
    this.exits = new ExitHandler(
      { repo, runtime, exits, endpoints, volumes, events, root, lookup, waits, log, jsonLogs, logRotation, health },
      {
        startOf,
        startAgain: (id, count) => this.lifecycle.startAgain(id, count),
        autoRemove,
      },
    );
    this.lifecycle = new Lifecycle(
      {
        repo,
        runtime,
        exits,
        endpoints,
        volumes,
        events,
        logSizeMax,
        lookup,
        waits,
        bundles,
        attachments,
        jsonLogs,
        logRotation,
        health,
        log,
      },
      this.exits,
      autoRemove,
    );
    // Each runtime command on a container runs the runtime it was created with (HostConfig.Runtime).
    runtime.useRuntimeNames((id) => lookup.byId(id)?.hostConfig.Runtime);
    this.io = new ContainerIo({
      lookup,
      waits,
      attachments,
      runtime,
      images: deps.images,
      cgroupParent: deps.cgroupParent,
      startOf,
    });
    this.removal = {
      repo,
      runtime,
      exits,
      volumes,
      events,
      root,
      log,
      lookup,
      waits,
      bundles,
      health,
      logRotation,
      jsonLogs,
      lifecycle: this.lifecycle,
      exitHandler: this.exits,
    };
  }

  /** Subscribes to exits and reconciles what happened while berthd was down; rotates the running ones' logs again. */
  async recover(): Promise<void> {
    // Volumes of the containers recorded as running stay mounted; those found ended are released by recover.
    for (const c of this.lookup.withStatus(['running', 'paused'])) this.deps.volumes.stillActive(c.id);
    await this.exits.recover();
    for (const c of this.lookup.withStatus(['running', 'paused'])) {
      this.jsonLogs.started(c.id);
      this.logRotation.started(c.id);
    }
  }

  /**
   * Runs health checks with `prober` (execs: their service is built on this
   * one), beginning with the containers running now.
   */
  monitorHealth(prober: Prober): void {
    this.health.useProber(prober);
  }

  /** berthd stops: health checks stop (their results kept in the records). */
  close(): void {
    this.health.close();
    this.logRotation.close();
    void this.jsonLogs.close();
  }

  // ------------------------------------------------------------------ lookup

  /** Resolves a full id, a unique id prefix, or a name (with or without '/'). */
  get(ref: string): Container {
    return this.lookup.find(ref);
  }

  /**
   * The container's filesystem as it sees it, for `docker cp` (rootview.ts):
   * its rootfs (mounted if it was not) with its mounts over it, in a private
   * mount namespace. The caller closes both descriptors.
   */
  async openView(ref: string): Promise<{ c: Container; view: RootView; mounts: ViewMount[] }> {
    const c = this.get(ref);
    const mounts = viewMounts(c, this.mountPoints(c));
    return { c, view: await openContainerView(c, this.deps.images, mounts), mounts };
  }

  /** Publishes a container event (dockerd's attributes). */
  publish(c: Container, action: string): void {
    publish(this.deps.events, c, action);
  }

  /** `GET /containers/json`; the `volume` filter (a volume's name, a bind's source, or a destination) is applied here. */
  list(opts: { all?: boolean; limit?: number; filters?: Filters } = {}): Container[] {
    const wanted = opts.filters?.volume;
    if (!wanted?.length) return this.lookup.list(opts);
    const { volume: _, ...filters } = opts.filters ?? {};
    const limit = opts.limit ?? 0;
    const found = this.lookup
      .list({ all: opts.all || limit > 0, filters })
      .filter((c) =>
        this.mountPoints(c).some((m) => wanted.some((w) => w === m.name || w === m.source || w === m.destination)),
      );
    return limit > 0 ? found.slice(0, limit) : found;
  }

  /**
   * Everything the container mounts (volumes, binds, tmpfs), with host paths:
   * what inspect's Mounts shows, and where a path of the container lies on the host.
   */
  mountPoints(ref: string | Container): ContainerMount[] {
    const c = typeof ref === 'string' ? this.lookup.find(ref) : ref;
    return containerMounts(c.hostConfig, this.deps.volumes.mountsOf(c.id), path.dirname(this.deps.root));
  }

  // ------------------------------------------------------------------ create

  async create(req: CreateRequest): Promise<{ Id: string; Warnings: string[] }> {
    const { deps, lookup } = this;
    const imageRef = checkConfig(req.config);
    const name = req.name ? checkName(req.name) : undefined;
    if (name) this.checkNameFree(name);
    const image = deps.images.find(imageRef);
    const imageDoc = JSON.parse(image.config) as ImageConfig;
    const imageConfig = imageDoc.config;
    const id = randomBytes(32).toString('hex');
    const settings = createSettings(req.config, req.hostConfig, { ref: imageRef, config: imageConfig }, id, {
      runtimes: deps.runtimes ?? RUNC_ONLY,
      root: deps.root,
    });
    const { config, security, warnings } = settings;
    const hostConfig = withDonorIds(settings.hostConfig, (ref) => {
      try {
        return lookup.find(ref).id;
      } catch {
        return undefined;
      }
    });
    checkImagePlatform(imageRef, imageDoc, req.platform, warnings);
    // NetworkDisabled: no network at all (network.ts); its links are registered and give nothing, as with dockerd.
    const disabled = networkDisabled(config);
    const links = hostConfig.Links ?? [];
    const legacy = links.length ? legacyLinks(hostConfig.NetworkMode, links, (ref) => this.lookup.find(ref)) : [];
    const endpointsConfig = withUserNetworkLinks(
      req.networkingConfig?.EndpointsConfig ?? {},
      hostConfig.NetworkMode,
      legacy.length ? [] : links,
    );
    const mounts = planMounts(hostConfig, config.Volumes, (ref) => this.mountPoints(ref));
    checkBindSources(hostConfig);
    const bundleDir = path.join(deps.root, id);
    await mkdir(bundleDir, { recursive: true, mode: 0o700 });
    try {
      deps.repo.insert({
        id,
        name: name ?? generateName((n) => deps.repo.findByName(n) !== undefined),
        image_id: image.id,
        image_ref: imageRef,
        config: JSON.stringify(config),
        host_config: JSON.stringify(hostConfig),
        created: Date.now(),
        recursive_ro_binds: req.nonRecursiveReadonlyBinds ? 0 : 1,
      });
    } catch (e) {
      await rm(bundleDir, { recursive: true, force: true });
      if (isUniqueViolation(e) && name) this.checkNameFree(name);
      throw e;
    }
    let networkWarnings: string[];
    try {
      await deps.volumes.recordMounts(id, mounts);
      networkWarnings = disabled
        ? []
        : deps.endpoints.createEndpoints(id, hostConfig.NetworkMode, endpointsConfig, {
            macAddress: req.config.MacAddress ?? '',
            publishes: Object.keys(hostConfig.PortBindings ?? {}).length > 0 || !!hostConfig.PublishAllPorts,
          });
      // Registered (the names they give show) wherever dockerd registers them; off the default
      // bridge (network none, a berthd without one) they give the container nothing, as with dockerd.
      if (legacy.length) deps.repo.insertLinks(id, legacy);
    } catch (e) {
      // The anonymous volumes made for it go with it; named ones stay, as after any removal.
      const recorded = deps.volumes.mountsOf(id);
      deps.repo.remove(id);
      await deps.volumes.removed(recorded, true);
      await rm(bundleDir, { recursive: true, force: true });
      throw e;
    }
    const c = lookup.byId(id)!;
    await this.jsonLogs.created(c);
    publish(deps.events, c, 'create');
    this.bundles.prepareEarly(c, security);
    // dockerd answers [] rather than null when there is nothing to warn of.
    return { Id: id, Warnings: [...warnings, ...networkWarnings] };
  }

  private checkNameFree(name: string): void {
    const taken = this.lookup.byName(name);
    if (taken) {
      throw conflict(
        `Conflict. The container name "/${name}" is already in use by container "${taken.id}". You have to remove (or rename) that container to be able to reuse that name.`,
      );
    }
  }

  rename(ref: string, newName: string): void {
    const c = this.lookup.find(ref);
    if (!newName) throw invalidParameter('Neither old nor new names may be empty');
    const name = checkName(newName);
    if (name === c.name) throw invalidParameter('Renaming a container with the same name as its current name');
    this.checkNameFree(name);
    try {
      this.deps.repo.rename(c.id, name);
    } catch (e) {
      if (isUniqueViolation(e)) this.checkNameFree(name);
      throw e;
    }
    publish(this.deps.events, { ...c, name }, 'rename', { oldName: `/${c.name}` });
  }

  // ------------------------------------------------------------------ lifecycle (run/lifecycle.ts)

  start(ref: string): Promise<void> {
    return this.lifecycle.start(ref);
  }

  stop(ref: string, opts: { timeoutSec?: number; signal?: string } = {}): Promise<void> {
    return this.lifecycle.stop(ref, opts);
  }

  kill(ref: string, signal?: string): Promise<void> {
    return this.lifecycle.kill(ref, signal);
  }

  restart(ref: string, opts: { timeoutSec?: number; signal?: string } = {}): Promise<void> {
    return this.lifecycle.restart(ref, opts);
  }

  pause(ref: string): Promise<void> {
    return this.lifecycle.pause(ref);
  }

  unpause(ref: string): Promise<void> {
    return this.lifecycle.unpause(ref);
  }

  /** Pauses a running container for a commit (lifecycle.ts). */
  freeze(ref: string): Promise<void> {
    return this.lifecycle.freeze(ref);
  }

  thaw(ref: string): Promise<void> {
    return this.lifecycle.thaw(ref);
  }

  // ------------------------------------------------------------------ update (update.ts)

  /** `POST /containers/{id}/update`. */
  update(ref: string, body: Given<UpdateBody>): Promise<{ Warnings: string[] | null }> {
    return updateContainer(
      {
        repo: this.deps.repo,
        runtime: this.deps.runtime,
        events: this.deps.events,
        lookup: this.lookup,
        bundles: this.bundles,
        startOf: (id) => this.lifecycle.startOf(id),
      },
      ref,
      body,
    );
  }

  // ------------------------------------------------------------------ wait

  /** Waits not yet answered (the wait route's, log followers', internal ones). */
  get pendingWaits(): number {
    return this.waits.pending;
  }

  /**
   * `POST /containers/{id}/wait`. Validates at once (so the caller can answer
   * 404 before streaming), then returns the promise of the exit. When `signal`
   * aborts (the client went away), the wait is forgotten and the promise rejects.
   */
  wait(ref: string, condition = 'not-running', signal?: AbortSignal): Promise<WaitResult> {
    const cond = waitCondition(condition);
    return this.lifecycle.waitFor(this.lookup.find(ref), cond, signal);
  }

  // ------------------------------------------------------------------ networks

  /** The container's endpoints and the host ports it publishes, for inspect and the list. */
  networkingOf(c: Container): ContainerNetworking {
    return { endpoints: this.deps.endpoints.of(c.id, c.name), ports: this.deps.endpoints.published(c.id) };
  }

  /**
   * networkingOf and mountPoints of each listed container, in the list's order:
   * a few queries for the whole list instead of a few per container.
   */
  listedDetails(list: Container[]): { networking: ContainerNetworking; mounts: ContainerMount[] }[] {
    if (!list.length) return [];
    const { endpoints, volumes } = this.deps;
    const networking = endpoints.ofMany(list);
    const mounts = volumes.mountsOfMany(list.map((c) => c.id));
    return list.map((c) => ({
      networking: networking.get(c.id) ?? { endpoints: [], ports: [] },
      mounts: containerMounts(c.hostConfig, mounts.get(c.id) ?? []),
    }));
  }

  /** `POST /networks/{id}/connect`: a running container gets its interface at once. */
  async connectNetwork(networkRef: string, ref: string, settings: unknown): Promise<void> {
    const c = this.lookup.find(ref);
    await this.deps.endpoints.connect(networkRef, { ...memberOf(c), mode: c.hostConfig.NetworkMode }, settings);
    await this.bundles.networksChanged(c);
    if (isRunning(c)) await this.bundles.linkTargetChanged(c);
  }

  /** `POST /networks/{id}/disconnect`. */
  async disconnectNetwork(networkRef: string, ref: string, _force: boolean): Promise<void> {
    const c = this.lookup.find(ref);
    await this.deps.endpoints.disconnect(networkRef, memberOf(c));
    await this.bundles.networksChanged(c);
  }

  // ------------------------------------------------------------------ remove

  /**
   * `DELETE /containers/{name}?link=1`: removes the link named
   * /<parent>/<alias>, neither container (dockerd's rmLink and wording).
   */
  removeLink(ref: string): void {
    this.lookup.find(ref); // dockerd's 404 for a name no container has
    const name = ref.startsWith('/') ? ref : `/${ref}`;
    const link = splitLinkName(name);
    if (!link) throw systemError('Conflict, cannot remove the default link name of the container');
    const parent = this.lookup.byName(link.parent);
    if (!parent) throw systemError(`Cannot get parent /${link.parent} for link name ${name}`);
    this.deps.repo.removeLink(parent.id, link.alias);
  }

  /** `volumes`: its anonymous volumes go too (`rm -v`); named ones never do (remove.ts). */
  remove(ref: string, opts: { force?: boolean; volumes?: boolean } = {}): Promise<void> {
    return removeContainer(this.removal, ref, opts);
  }

  async prune(filters: Filters = {}): Promise<{ ContainersDeleted: string[] | null; SpaceReclaimed: number }> {
    checkFilters(filters, ['label', 'label!', 'until']);
    const deleted: string[] = [];
    let reclaimed = 0;
    // "10m", a Unix time or a date, as the other prunes take it (seconds).
    const until = filters.until?.[0] ? parseUntil(filters.until[0]) : undefined;
    for (const c of this.lookup.withStatus(['created', 'exited', 'dead'])) {
      if (!matchLabels(filters, c.config.Labels)) continue;
      if (until !== undefined && c.created / 1000 >= until) continue;
      // dockerd counts what each container wrote (its layer's size), measured before it goes.
      const written = await this.io.sizes(c).then(
        (s) => s.SizeRw,
        () => 0,
      );
      await this.remove(c.id, {});
      deleted.push(c.id);
      reclaimed += written;
    }
    return { ContainersDeleted: deleted.length ? deleted : null, SpaceReclaimed: reclaimed };
  }

  // ------------------------------------------------------------------ io (io/container-io.ts)

  logs(ref: string, o: Omit<ReadLogOptions, 'signal'> & { signal?: AbortSignal }): AsyncGenerator<LogEntry> {
    return this.io.logs(ref, o);
  }

  logBatches(
    ref: string | Container,
    o: Omit<ReadLogOptions, 'signal'> & { signal?: AbortSignal },
  ): AsyncGenerator<LogEntry[]> {
    return this.io.logBatches(ref, o);
  }

  attach(ref: string, o: AttachOptions): AttachSession {
    return this.io.attach(ref, o);
  }

  resize(ref: string, height: number, width: number): Promise<void> {
    return this.io.resize(ref, height, width);
  }

  sizes(c: Container): Promise<{ SizeRw: number; SizeRootFs: number }> {
    return this.io.sizes(c);
  }

  stats(ref: string) {
    return this.io.stats(ref);
  }

  top(ref: string, psArgs?: string) {
    return this.io.top(ref, psArgs);
  }
}
