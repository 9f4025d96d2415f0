// Docker's container verbs: create, start, stop, kill, wait, restart, pause,
// rename, remove, prune, and what list/inspect/logs read. State lives in SQLite;
// processes live under conmon, which outlives berthd; exits arrive by inotify.
import { randomBytes } from 'node:crypto';
import { access, lstat, mkdir, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import {
  conflict,
  invalidParameter,
  isEngineError,
  messageOf,
  noSuchContainer,
  notFound,
  notModified,
  systemError,
} from '../../errors.js';
import type { Logger } from '../../log.js';
import type { EventBus } from '../events.js';
import { checkFilters, globMatch, matchLabels, type Filters } from '../filters.js';
import type { ImageConfig } from '../images/config.js';
import type { ImageService } from '../images/service.js';
import { prepareRootfs, releaseRootfs } from '../layers/store.js';
import { removeInBackground, TRASH_PREFIX } from '../os/dirs.js';
import { seccompOption, type SeccompProfile } from './seccomp.js';
import { RuntimeCreateError } from '../runtime/errors.js';
import { processEnded } from '../runtime/proc.js';
import type { ExitWatcher } from '../runtime/exits.js';
import { readLog, type LogEntry, type ReadLogOptions } from '../runtime/logs.js';
import type { Runtime } from '../runtime/runtime.js';
import { Attachments, DEFAULT_DETACH_KEYS, parseDetachKeys, type AttachSession } from './attach.js';
import { buildSpec, consoleSize, withDefaultEnv, type BindMount, type Propagation } from './spec.js';
import {
  isUniqueViolation,
  type ContainerRepository,
  type ContainerRow,
  type ContainerStatus,
} from '../store/containers.js';
import { checkName, generateName } from './names.js';
import type { ContainerConfig, CreateRequest, HostConfig, HostConfigBody, Given, Mount } from './config.js';
import { resolveUser } from './user.js';
import { normalizeSignal, SIGNALS } from '../signals.js';
import { cgroupStats, top } from './stats.js';

export type WaitCondition = 'not-running' | 'next-exit' | 'removed';

export interface Container {
  row: ContainerRow;
  config: ContainerConfig;
  hostConfig: HostConfig;
  /** The command run: Path and Args as inspect shows them. */
  path: string;
  args: string[];
  bundleDir: string;
  /** The overlay mount point, runc's root.path. */
  rootfs: string;
  logPath: string;
}

export interface ContainerDeps {
  repo: ContainerRepository;
  images: ImageService;
  runtime: Runtime;
  exits: ExitWatcher;
  logger: Logger;
  /** <data-root>/containers */
  root: string;
  initPath?: string;
  /** Default cap on a container's log, bytes. */
  logSizeMax: number;
  events: EventBus;
}

const RUNNING: ContainerStatus[] = ['running', 'paused', 'restarting'];
/** In a container's bundle while a commit holds it paused (freeze/thaw). */
const FROZEN = 'frozen-for-commit';
const isRunning = (r: ContainerRow) => r.status === 'running' || r.status === 'paused';
/** How often a wait for a signalled container's exit looks whether its monitor is still there. */
const LOST_EXIT_CHECK_MS = 2000;

/** Parses sizes like `10m`, `1g`, `512k` (log-opts max-size). */
export function parseSize(s: string): number {
  const m = /^(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?$/i.exec(s.trim());
  if (!m) throw invalidParameter(`invalid size: '${s}'`);
  const mult = { '': 1, k: 1024, m: 1024 ** 2, g: 1024 ** 3, t: 1024 ** 4 }[
    m[2]!.toLowerCase() as '' | 'k' | 'm' | 'g' | 't'
  ];
  return Math.floor(Number(m[1]) * mult);
}

export function mergeEnv(image: string[] | null | undefined, user: string[] | null | undefined): string[] {
  const out = new Map<string, string>();
  for (const e of [...(image ?? []), ...(user ?? [])]) {
    const k = e.split('=', 1)[0]!;
    out.set(k, e);
  }
  return [...out.values()];
}

export class ContainerService {
  private readonly waiters = new Map<
    string,
    { condition: WaitCondition; resolve: (r: { StatusCode: number; Error: { Message: string } | null }) => void }[]
  >();
  /** Starts in progress, so an exit that races a start is handled after it. */
  private readonly starting = new Map<string, Promise<unknown>>();
  private readonly restartTimers = new Map<string, NodeJS.Timeout>();
  /** Bundles being prepared right after create, taken by the first start. */
  private readonly prepared = new Map<string, Promise<void>>();
  /**
   * Tear-downs after an exit (runc's state), done after the waiters are
   * told: `docker run --rm` need not wait for them. A start or removal of the
   * container waits for them (settled()).
   */
  private readonly settling = new Map<string, Promise<void>>();
  private readonly log: Logger;
  /** Clients attached to containers' stdio (attach.ts). */
  private readonly attachments: Attachments;

  constructor(private readonly deps: ContainerDeps) {
    this.log = deps.logger.child({ component: 'containers' });
    this.attachments = new Attachments(this.log);
  }

  /** Publishes a container event with dockerd's attributes (image, name, labels). */
  private event(row: ContainerRow, action: string, extra: Record<string, string> = {}): void {
    const labels = (JSON.parse(row.config) as ContainerConfig).Labels ?? {};
    this.deps.events.publish('container', action, row.id, {
      ...labels,
      image: row.image_ref,
      name: row.name,
      ...extra,
    });
  }

  // ------------------------------------------------------------------ lookup

  /** Resolves a full id, a unique id prefix, or a name (with or without '/'). */
  find(ref: string): ContainerRow {
    const { repo } = this.deps;
    if (!ref) throw noSuchContainer(ref);
    const byId = /^[0-9a-f]{64}$/.test(ref) ? repo.find(ref) : undefined;
    if (byId) return byId;
    const byName = repo.findByName(ref.replace(/^\//, ''));
    if (byName) return byName;
    if (/^[0-9a-f]+$/.test(ref)) {
      const rows = repo.findByPrefix(ref);
      if (rows.length > 1) throw notFound(`Multiple IDs found with provided prefix: ${ref}`);
      if (rows[0]) return rows[0];
    }
    throw noSuchContainer(ref);
  }

  get(ref: string): Container {
    return this.hydrate(this.find(ref));
  }

  private hydrate(row: ContainerRow): Container {
    const config = JSON.parse(row.config) as ContainerConfig;
    const hostConfig = JSON.parse(row.host_config) as HostConfig;
    const argv = [...(config.Entrypoint ?? []), ...(config.Cmd ?? [])];
    const bundleDir = path.join(this.deps.root, row.id);
    return {
      row,
      config,
      hostConfig,
      path: argv[0] ?? '',
      args: argv.slice(1),
      bundleDir,
      rootfs: path.join(bundleDir, 'rootfs'),
      logPath: path.join(bundleDir, 'ctr.log'),
    };
  }

  list(opts: { all?: boolean; limit?: number; filters?: Filters } = {}): Container[] {
    const f = opts.filters ?? {};
    checkFilters(f, [
      'id',
      'name',
      'label',
      'status',
      'ancestor',
      'exited',
      'before',
      'since',
      'health',
      'network',
      'volume',
      'publish',
      'expose',
      'isolation',
      'is-task',
    ]);
    for (const s of f.status ?? []) {
      if (!['created', 'restarting', 'running', 'removing', 'paused', 'exited', 'dead'].includes(s)) {
        throw invalidParameter(`invalid filter 'status=${s}'`);
      }
    }
    const before = f.before?.[0] ? this.find(f.before[0]).seq : undefined;
    const since = f.since?.[0] ? this.find(f.since[0]).seq : undefined;
    const ancestors = (f.ancestor ?? []).map((a) => {
      try {
        return this.deps.images.find(a).id;
      } catch {
        return undefined;
      }
    });
    const all =
      opts.all || (opts.limit ?? 0) > 0 || !!f.status || !!f.exited || before !== undefined || since !== undefined;
    const out: Container[] = [];
    for (const row of this.deps.repo.list()) {
      if (!all && !RUNNING.includes(row.status)) continue;
      const c = this.hydrate(row);
      if (f.id?.length && !f.id.some((p) => row.id.startsWith(p))) continue;
      if (f.name?.length && !f.name.some((n) => new RegExp(n.replace(/^\//, '')).test(row.name))) continue;
      if (f.status?.length && !f.status.includes(row.status)) continue;
      if (f.exited?.length && !(row.status === 'exited' && f.exited.map(Number).includes(row.exit_code))) continue;
      if (!matchLabels(f, c.config.Labels)) continue;
      if (before !== undefined && row.seq >= before) continue;
      if (since !== undefined && row.seq <= since) continue;
      if (
        f.ancestor?.length &&
        !ancestors.includes(row.image_id) &&
        !f.ancestor.some((a) => globMatch(a, row.image_ref))
      )
        continue;
      out.push(c);
      if (opts.limit && opts.limit > 0 && out.length >= opts.limit) break;
    }
    return out;
  }

  // ------------------------------------------------------------------ create

  async create(req: CreateRequest): Promise<{ Id: string; Warnings: string[] | null }> {
    if (!req.config.Image) throw invalidParameter('Config cannot be empty in order to create a container');
    // runc refuses a relative cwd at start; dockerd refuses it here.
    if (req.config.WorkingDir && !path.isAbsolute(req.config.WorkingDir)) {
      throw invalidParameter(
        `the working directory '${req.config.WorkingDir}' is invalid, it needs to be an absolute path`,
      );
    }
    const name = req.name ? checkName(req.name) : undefined;
    if (name) this.checkNameFree(name);
    const image = this.deps.images.find(req.config.Image);
    const imgCfg = (JSON.parse(image.config) as ImageConfig).config ?? {};
    const hc = this.hostConfig(req.hostConfig);
    const config = this.mergeConfig(req.config, req.config.Image, imgCfg);
    if (!config.Cmd?.length && !config.Entrypoint?.length) throw invalidParameter('No command specified');
    for (const b of hc.Binds ?? []) parseBind(b);
    for (const m of hc.Mounts ?? []) mountOf(m);
    const id = randomBytes(32).toString('hex');
    // dockerd: a host-network container takes the host's name, others their short id.
    if (!config.Hostname) config.Hostname = hc.NetworkMode === 'host' ? os.hostname() : id.slice(0, 12);
    const bundleDir = path.join(this.deps.root, id);
    await mkdir(bundleDir, { recursive: true, mode: 0o700 });
    try {
      this.deps.repo.insert({
        id,
        name: name ?? generateName((n) => this.deps.repo.findByName(n) !== undefined),
        image_id: image.id,
        image_ref: req.config.Image,
        config: JSON.stringify(config),
        host_config: JSON.stringify(hc),
        created: Date.now(),
      });
    } catch (e) {
      await rm(bundleDir, { recursive: true, force: true });
      if (isUniqueViolation(e) && name) this.checkNameFree(name);
      throw e;
    }
    const row = this.deps.repo.find(id)!;
    this.event(row, 'create');
    // Clients start right after create (docker run attaches and waits first):
    // the bundle is prepared meanwhile, off the start's critical path. A
    // failure here is retried, and reported, by start.
    const early = this.prepareBundle(this.hydrate(row));
    early.catch(() => undefined);
    this.prepared.set(id, early);
    return { Id: id, Warnings: null };
  }

  private checkNameFree(name: string): void {
    const taken = this.deps.repo.findByName(name);
    if (taken) {
      throw conflict(
        `Conflict. The container name "/${name}" is already in use by container "${taken.id}". You have to remove (or rename) that container to be able to reuse that name.`,
      );
    }
  }

  /** The container's effective config: the request over the image's defaults, as dockerd merges them. */
  private mergeConfig(
    c: CreateRequest['config'],
    image: string,
    img: NonNullable<ImageConfig['config']>,
  ): ContainerConfig {
    // A new Entrypoint drops the image's Cmd (dockerd's rule); a Cmd alone keeps the image's Entrypoint.
    const entrypoint =
      c.Entrypoint !== undefined ? (c.Entrypoint?.length ? c.Entrypoint : null) : (img.Entrypoint ?? null);
    const cmd = c.Cmd?.length ? c.Cmd : c.Entrypoint !== undefined ? null : (img.Cmd ?? null);
    const labels = { ...(img.Labels ?? {}), ...(c.Labels ?? {}) };
    const ports = { ...(img.ExposedPorts ?? {}), ...(c.ExposedPorts ?? {}) };
    const volumes = { ...(img.Volumes ?? {}), ...(c.Volumes ?? {}) };
    return {
      ...c,
      Hostname: c.Hostname ?? '',
      Domainname: c.Domainname ?? '',
      User: c.User || img.User || '',
      AttachStdin: c.AttachStdin ?? false,
      AttachStdout: c.AttachStdout ?? false,
      AttachStderr: c.AttachStderr ?? false,
      ExposedPorts: Object.keys(ports).length ? ports : null,
      Tty: c.Tty ?? false,
      OpenStdin: c.OpenStdin ?? false,
      StdinOnce: c.StdinOnce ?? false,
      Env: mergeEnv(img.Env, c.Env),
      Cmd: cmd,
      Image: image,
      Volumes: Object.keys(volumes).length ? volumes : null,
      WorkingDir: c.WorkingDir || img.WorkingDir || '',
      Entrypoint: entrypoint,
      OnBuild: img.OnBuild ?? null,
      Labels: labels,
      ...(c.StopSignal || img.StopSignal ? { StopSignal: c.StopSignal || img.StopSignal } : {}),
      ...(c.StopTimeout !== undefined ? { StopTimeout: c.StopTimeout } : {}),
    };
  }

  private hostConfig(h: Given<HostConfigBody>): HostConfig {
    const policy = h.RestartPolicy ?? { Name: '', MaximumRetryCount: 0 };
    const name = policy.Name ?? '';
    if (!['', 'no', 'always', 'unless-stopped', 'on-failure'].includes(name)) {
      throw invalidParameter(`invalid restart policy '${name}'`);
    }
    if (name !== 'on-failure' && (policy.MaximumRetryCount ?? 0) > 0) {
      throw invalidParameter(`maximum retry count cannot be used with restart policy '${name}'`);
    }
    if (h.AutoRemove && name !== '' && name !== 'no') {
      throw invalidParameter("can't create 'AutoRemove' container with restart policy");
    }
    const mode = h.NetworkMode || 'default';
    if (!['default', 'bridge', 'none', 'host'].includes(mode)) {
      throw invalidParameter(`network ${mode} not found`);
    }
    if (h.LogConfig?.Config?.['max-size']) parseSize(h.LogConfig.Config['max-size']);
    // dockerd's checks: a limit below 6 MB (or negative) would otherwise run unlimited.
    if (h.Memory && h.Memory < 6 * 1024 * 1024) throw invalidParameter('Minimum memory limit allowed is 6MB');
    if (h.ShmSize && h.ShmSize < 0) throw invalidParameter('SHM size can not be less than 0');
    for (const o of h.SecurityOpt ?? []) {
      if (!/^no-new-privileges(?:[:=](true|false))?$|^(seccomp|apparmor|label)[:=]/.test(o)) {
        throw invalidParameter(`Invalid --security-opt: ${JSON.stringify(o)}`);
      }
    }
    seccompOption(h.SecurityOpt ?? []); // a profile that cannot be used is refused now, not at start
    return {
      ...h,
      Binds: h.Binds ?? null,
      AutoRemove: h.AutoRemove ?? false,
      NetworkMode: mode,
      RestartPolicy: {
        Name: name as HostConfig['RestartPolicy']['Name'],
        MaximumRetryCount: policy.MaximumRetryCount ?? 0,
      },
      Privileged: h.Privileged ?? false,
      ReadonlyRootfs: h.ReadonlyRootfs ?? false,
      CapAdd: h.CapAdd ?? null,
      CapDrop: h.CapDrop ?? null,
      SecurityOpt: h.SecurityOpt ?? null,
      Memory: h.Memory ?? 0,
      MemorySwap: h.MemorySwap ?? 0,
      NanoCpus: h.NanoCpus ?? 0,
      CpuShares: h.CpuShares ?? 0,
      CpusetCpus: h.CpusetCpus ?? '',
      // json-file: the driver whose behaviour berth's logs have (max-size, max-file, readable
      // through the API); clients such as docker-py read logs only for it or journald.
      LogConfig: { Type: h.LogConfig?.Type || 'json-file', Config: h.LogConfig?.Config ?? {} },
    };
  }

  // ------------------------------------------------------------------ start

  async start(ref: string): Promise<void> {
    const row = this.find(ref);
    if (row.status === 'running' || row.status === 'restarting') throw notModified();
    if (row.status === 'paused') throw conflict('cannot start a paused container, try unpause instead');
    await this.guardStart(row.id, () =>
      this.startRow(row.id, { stoppedByUser: false }).catch(async (e) => {
        // As dockerd: an AutoRemove container that cannot start is removed (`docker run --rm`
        // waits for condition=removed after a failed start).
        if (this.hydrate(row).hostConfig.AutoRemove)
          await this.remove(row.id, { force: true }).catch((err) =>
            this.log.warn({ err, id: row.id }, 'auto-remove failed'),
          );
        throw e;
      }),
    );
  }

  private async guardStart<T>(id: string, fn: () => Promise<T>): Promise<T> {
    if (this.starting.has(id)) throw conflict(`container ${id} is already being started`);
    const job = fn();
    this.starting.set(
      id,
      job.catch(() => undefined),
    );
    try {
      return await job;
    } finally {
      this.starting.delete(id);
    }
  }

  private async startRow(id: string, o: { stoppedByUser: boolean; restartCount?: number }): Promise<void> {
    await this.settled(id); // runc's record of the last run is gone before this one is created
    const c = this.hydrate(
      this.deps.repo.find(id) ??
        (() => {
          throw noSuchContainer(id);
        })(),
    );
    const { runtime, exits } = this.deps;
    // Usually done already, between create and start (see create()).
    const early = this.prepared.get(id);
    this.prepared.delete(id);
    if (
      !(
        early &&
        (await early.then(
          () => true,
          () => false,
        ))
      )
    )
      await this.prepareBundle(c);
    try {
      const maxSize = c.hostConfig.LogConfig?.Config?.['max-size'];
      const created = await runtime.create({
        id,
        bundleDir: c.bundleDir,
        logPath: c.logPath,
        exitDir: exits.exitDir,
        tty: c.config.Tty,
        stdin: c.config.OpenStdin,
        stdinOnce: c.config.StdinOnce,
        logSizeMax: maxSize ? parseSize(maxSize) : this.deps.logSizeMax,
      });
      // The loopback of the container's own network namespace is up already: runc
      // brings it up in every network namespace it creates (libcontainer's "loopback" network).
      // Clients attached before the start join now, before the process runs.
      this.attachments.connect(id, runtime.attachSocket(id));
      await runtime.start(id);
      this.deps.repo.update(id, {
        status: 'running',
        pid: created.pid,
        conmon_pid: created.conmonPid,
        exit_code: 0,
        error: '',
        started_at: Date.now(),
        finished_at: 0,
        oom_killed: 0,
        stopped_by_user: o.stoppedByUser ? 1 : 0,
        ...(o.restartCount !== undefined ? { restart_count: o.restartCount } : {}),
      });
      // One who attached while this start was under way (and saw "created").
      this.attachments.connect(id, runtime.attachSocket(id));
      this.event(c.row, 'start');
    } catch (e) {
      this.attachments.fail(id);
      await runtime.delete(id, true).catch(() => undefined);
      await releaseRootfs(c.rootfs).catch(() => undefined);
      const code = e instanceof RuntimeCreateError ? e.code : 128;
      this.deps.repo.update(id, {
        status: c.row.finished_at ? 'exited' : 'created',
        exit_code: code,
        error: messageOf(e),
        pid: 0,
      });
      throw e;
    }
  }

  /** Mounts the rootfs and writes the OCI bundle: all a start needs before conmon. */
  private async prepareBundle(c: Container): Promise<void> {
    const { exits, images } = this.deps;
    const lowers = await images.readyLayerDirs(c.row.image_id);
    await exits.clear(c.row.id);
    await prepareRootfs({
      lowerDirs: lowers,
      upperDir: path.join(c.bundleDir, 'upper'),
      workDir: path.join(c.bundleDir, 'work'),
      target: c.rootfs,
    });
    const spec = await this.spec(c, c.rootfs);
    await writeFile(path.join(c.bundleDir, 'config.json'), JSON.stringify(spec));
  }

  private async spec(c: Container, rootfs: string) {
    const user = await resolveUser(rootfs, c.config.User ?? '');
    const files = await this.writeEtcFiles(c);
    const env = withDefaultEnv(c.config.Env ?? [], { hostname: c.config.Hostname, tty: c.config.Tty, home: user.home });
    const size = consoleSize(c.hostConfig.ConsoleSize);
    const h = c.hostConfig;
    const mounts: BindMount[] = [...(h.Binds ?? []).map(parseBind), ...(h.Mounts ?? []).map(mountOf)];
    return buildSpec({
      ...h,
      args: [c.path, ...c.args],
      env,
      cwd: c.config.WorkingDir || '/',
      user: { uid: user.uid, gid: user.gid, additionalGids: user.additionalGids },
      tty: c.config.Tty,
      ...(size ? { consoleSize: size } : {}),
      hostname: c.config.Hostname,
      rootfsPath: rootfs,
      mounts,
      hostsFiles: files,
      networkMode: h.NetworkMode === 'host' ? 'host' : h.NetworkMode === 'none' ? 'none' : 'private',
      noNewPrivileges: (h.SecurityOpt ?? []).some((o) => /^no-new-privileges(?:[:=]true)?$/.test(o)),
      ...withSeccomp(seccompOption(h.SecurityOpt ?? [])),
      ...(this.deps.initPath ? { initPath: this.deps.initPath } : {}),
      cgroupsPath: cgroupPath(c.row.id),
    });
  }

  /** /etc/hostname, /etc/hosts and /etc/resolv.conf: files berth owns, bind-mounted read-write. */
  private async writeEtcFiles(c: Container) {
    const hostname = path.join(c.bundleDir, 'hostname');
    const hosts = path.join(c.bundleDir, 'hosts');
    const resolvConf = path.join(c.bundleDir, 'resolv.conf');
    const host = c.hostConfig.NetworkMode === 'host';
    const name = host ? os.hostname() : c.config.Hostname;
    await writeFile(hostname, `${name}\n`);
    const extra = (c.hostConfig.ExtraHosts ?? []).map((e) => {
      const [n, ip] = e.split(':', 2);
      return `${ip}\t${n}`;
    });
    const hostsText = host
      ? await readFile('/etc/hosts', 'utf8').catch(() => '127.0.0.1\tlocalhost\n')
      : ['127.0.0.1\tlocalhost', '::1\tlocalhost ip6-localhost ip6-loopback', `127.0.1.1\t${name}`, ...extra, ''].join(
          '\n',
        );
    await writeFile(hosts, hostsText);
    const dns = c.hostConfig.Dns ?? [];
    const resolv = dns.length
      ? `${dns.map((d) => `nameserver ${d}`).join('\n')}\n`
      : await readFile('/etc/resolv.conf', 'utf8').catch(() => '');
    await writeFile(resolvConf, resolv);
    return { hosts, hostname, resolvConf };
  }

  // ------------------------------------------------------------------ exits

  /** Subscribes to exits and reconciles what happened while berthd was down. */
  async recover(): Promise<void> {
    const { exits, runtime, repo } = this.deps;
    exits.on(
      'exit',
      (e) =>
        void this.onExit(e.id, e.exitCode).catch((err) => this.log.error({ err, id: e.id }, 'exit handling failed')),
    );
    exits.on('error', (err) => this.log.error({ err }, 'exit watcher failed'));
    await exits.start();
    // Before the exits below are handled: their tear-down removes runc's records too.
    for (const id of await runtime.recorded()) {
      const row = repo.find(id);
      if (row && !RUNNING.includes(row.status)) await this.recoverStart(row);
    }
    for (const row of repo.withStatus(RUNNING)) {
      const code = await exits.readExit(row.id);
      if (code !== null) {
        await this.onExit(row.id, code);
        continue;
      }
      const st = await runtime.state(row.id).catch(() => null);
      if (st && (st.status === 'running' || st.status === 'paused')) {
        const status = await this.thawAfterCrash(this.hydrate(row), st.status);
        if (status !== row.status) repo.update(row.id, { status });
        continue;
      }
      // Neither running nor an exit recorded (the machine rebooted, conmon was killed).
      await this.onExit(row.id, 255, 'container was not running when berthd started');
    }
    await this.sweepOrphans();
    // Restart policies that were due while berthd was down.
    for (const id of repo.restartable(['exited'], ['always', 'unless-stopped'])) this.scheduleRestart(id, 0);
  }

  /**
   * A container that runc knows while its record says it does not run: a
   * start that a crash of berthd cut short between `runc create` and
   * recording the run (or an exit whose tear-down it cut short). A process
   * that the start had released runs on, as the container's run; one that has
   * ended since is recorded as exited, with its code; one never released is
   * ended, and the start leaves nothing behind.
   */
  private async recoverStart(row: ContainerRow): Promise<void> {
    const { runtime, exits, repo } = this.deps;
    const c = this.hydrate(row);
    await runtime.createSettled(row.id);
    let st = await runtime.state(row.id).catch(() => null);
    if (st?.status === 'created' && (await runtime.finishRelease(row.id))) st = { ...st, status: 'running' };
    if (st?.status === 'running' || st?.status === 'paused') {
      const conmonPid = (await runtime.conmonPid(c.bundleDir)) ?? 0;
      repo.update(row.id, {
        status: st.status,
        pid: st.pid,
        conmon_pid: conmonPid,
        exit_code: 0,
        error: '',
        started_at: Date.now(),
        finished_at: 0,
        oom_killed: 0,
        stopped_by_user: 0,
      });
      this.log.info({ id: row.id }, 'a start cut short by a crash had started the container: it runs on');
      return;
    }
    if (st?.status === 'stopped') {
      const [code, at] = await Promise.all([exits.readExit(row.id), exits.exitedAt(row.id)]);
      if (code !== null && at !== null && at > row.finished_at) {
        repo.update(row.id, {
          status: 'exited',
          exit_code: code,
          finished_at: at,
          started_at: row.started_at || at,
          pid: 0,
          error: '',
        });
      }
      await runtime.delete(row.id, true).catch((err: unknown) => this.log.warn({ err, id: row.id }, 'runc delete'));
      return;
    }
    await runtime.abandon(row.id, c.bundleDir);
    await exits.clear(row.id);
    this.log.info({ id: row.id }, 'ended a container whose start a crash cut short');
  }

  private async onExit(id: string, exitCode: number, error = ''): Promise<void> {
    await this.starting.get(id);
    const row = this.deps.repo.find(id);
    if (!row || !RUNNING.includes(row.status)) return;
    const c = this.hydrate(row);
    const oom = await this.deps.runtime.oomKilled(c.bundleDir).catch(() => false);
    const now = Date.now();
    const restart = this.shouldRestart(c, exitCode);
    this.deps.repo.update(id, {
      status: restart ? 'restarting' : 'exited',
      exit_code: exitCode,
      finished_at: now,
      pid: 0,
      oom_killed: oom ? 1 : 0,
      error,
    });
    this.log.debug({ id, exitCode, restart }, 'container exited');
    this.settle(c);
    this.event(row, 'die', { exitCode: String(exitCode) });
    this.notify(id, ['not-running', 'next-exit'], exitCode);
    if (restart) this.scheduleRestart(id, Math.min(100 * 2 ** row.restart_count, 60_000));
    else if (c.hostConfig.AutoRemove)
      await this.remove(id, { force: true }).catch((err) => this.log.warn({ err, id }, 'auto-remove failed'));
  }

  /**
   * Clears what an exited container's run left with the runtime (runc's state,
   * its cgroups), in the background. The rootfs stays mounted until the
   * container is removed (or started again, which reuses it): unmounting an
   * overlay syncs the whole filesystem under it, and at every exit that forced
   * flush would land on whatever comes next (a commit of what the container
   * wrote, say) instead of the kernel's own pace of writeback.
   */
  private settle(c: Container): void {
    const id = c.row.id;
    const job = this.deps.runtime.delete(id, true).catch((err) => this.log.debug({ err, id }, 'runc delete'));
    this.settling.set(id, job);
    void job.finally(() => {
      if (this.settling.get(id) === job) this.settling.delete(id);
    });
  }

  /**
   * Directories of containers that are in no record: removed just before a
   * crash, while their tear-down or deletion was under way (remove() answers
   * first, and deletes in the background).
   */
  private async sweepOrphans(): Promise<void> {
    const names = await readdir(this.deps.root).catch(() => [] as string[]);
    for (const name of names.filter((n) => n.startsWith(TRASH_PREFIX))) {
      // Renamed by remove(), whose deletion had not ended: maybe not even the unmount.
      const dir = path.join(this.deps.root, name);
      await releaseRootfs(path.join(dir, 'rootfs'))
        .then(() => rm(dir, { recursive: true, force: true }))
        .catch((err: unknown) => this.log.warn({ err, name }, 'removing a leftover container directory failed'));
    }
    const known = this.deps.repo.ids();
    for (const id of names) {
      if (!/^[0-9a-f]{64}$/.test(id) || known.has(id)) continue;
      const dir = path.join(this.deps.root, id);
      await this.deps.runtime.delete(id, true).catch(() => undefined);
      await releaseRootfs(path.join(dir, 'rootfs')).catch(() => undefined);
      await this.deps.exits.clear(id).catch(() => undefined);
      await rm(dir, { recursive: true, force: true }).catch((err: unknown) =>
        this.log.warn({ err, id }, 'removing a leftover container directory failed'),
      );
      this.log.info({ id }, 'removed the leftovers of a container removed before a crash');
    }
  }

  /** Resolves once the tear-down after the container's last exit is done. */
  private async settled(id: string): Promise<void> {
    await this.settling.get(id);
  }

  private shouldRestart(c: Container, exitCode: number): boolean {
    if (c.row.stopped_by_user) return false;
    const p = c.hostConfig.RestartPolicy;
    if (p.Name === 'always' || p.Name === 'unless-stopped') return true;
    if (p.Name === 'on-failure')
      return exitCode !== 0 && (p.MaximumRetryCount === 0 || c.row.restart_count < p.MaximumRetryCount);
    return false;
  }

  private scheduleRestart(id: string, delayMs: number): void {
    clearTimeout(this.restartTimers.get(id));
    const t = setTimeout(() => {
      this.restartTimers.delete(id);
      const row = this.deps.repo.find(id);
      if (!row || (row.status !== 'restarting' && row.status !== 'exited')) return;
      void this.guardStart(id, () =>
        this.startRow(id, { stoppedByUser: false, restartCount: row.restart_count + 1 }),
      ).catch((err) => {
        this.log.warn({ err, id }, 'restart failed');
        this.deps.repo.update(id, { status: 'exited' });
        this.notify(id, ['not-running'], row.exit_code);
      });
    }, delayMs);
    t.unref();
    this.restartTimers.set(id, t);
  }

  private notify(id: string, conditions: WaitCondition[], code: number, error = ''): void {
    const list = this.waiters.get(id);
    if (!list) return;
    const keep = list.filter((w) => {
      if (!conditions.includes(w.condition)) return true;
      w.resolve({ StatusCode: code, Error: error ? { Message: error } : null });
      return false;
    });
    if (keep.length) this.waiters.set(id, keep);
    else this.waiters.delete(id);
  }

  // ------------------------------------------------------------------ wait / stop / kill

  /** Waits not yet answered (the wait route's, log followers', internal ones). */
  get pendingWaits(): number {
    let n = 0;
    for (const list of this.waiters.values()) n += list.length;
    return n;
  }

  /**
   * `POST /containers/{id}/wait`. Validates at once (so the caller can answer
   * 404 before streaming), then returns the promise of the exit. When `signal`
   * aborts (the client went away), the wait is forgotten and the promise rejects.
   */
  wait(
    ref: string,
    condition: WaitCondition = 'not-running',
    signal?: AbortSignal,
  ): Promise<{ StatusCode: number; Error: { Message: string } | null }> {
    if (!['not-running', 'next-exit', 'removed'].includes(condition))
      throw invalidParameter(`invalid condition: "${condition}"`);
    const row = this.find(ref);
    if (condition === 'not-running' && !RUNNING.includes(row.status) && !this.starting.has(row.id)) {
      return Promise.resolve({ StatusCode: row.exit_code, Error: null });
    }
    return new Promise((resolve, reject) => {
      if (signal?.aborted) return reject(signal.reason);
      const waiter = {
        condition,
        resolve: (r: { StatusCode: number; Error: { Message: string } | null }) => {
          signal?.removeEventListener('abort', forget);
          resolve(r);
        },
      };
      const forget = () => {
        const list = this.waiters.get(row.id);
        const i = list?.indexOf(waiter) ?? -1;
        if (i >= 0) list!.splice(i, 1);
        if (list && !list.length) this.waiters.delete(row.id);
        reject(signal!.reason);
      };
      signal?.addEventListener('abort', forget, { once: true });
      const list = this.waiters.get(row.id) ?? [];
      list.push(waiter);
      this.waiters.set(row.id, list);
    });
  }

  async stop(ref: string, opts: { timeoutSec?: number; signal?: string } = {}): Promise<void> {
    const c = this.get(ref);
    if (!isRunning(c.row) && c.row.status !== 'restarting') throw notModified();
    const id = c.row.id;
    this.deps.repo.update(id, { stopped_by_user: 1 });
    if (c.row.status === 'restarting') {
      clearTimeout(this.restartTimers.get(id));
      this.deps.repo.update(id, { status: 'exited' });
      this.notify(id, ['not-running'], c.row.exit_code);
      return;
    }
    const signal = normalizeSignal(opts.signal || c.config.StopSignal || 'SIGTERM');
    const timeout = opts.timeoutSec ?? c.config.StopTimeout ?? 10;
    const exited = this.wait(id, 'not-running');
    if (c.row.status === 'paused') await this.deps.runtime.resume(id).catch(() => undefined);
    await this.signal(id, signal);
    // A negative timeout waits for as long as it takes, as dockerd's.
    if (timeout >= 0) {
      const timer = new Promise<'timeout'>((r) => setTimeout(() => r('timeout'), timeout * 1000).unref());
      if ((await Promise.race([exited, timer])) === 'timeout') await this.signal(id, 'SIGKILL');
    }
    await this.exitOf(id, exited);
    this.event(c.row, 'stop');
  }

  async kill(ref: string, signal = 'SIGKILL'): Promise<void> {
    const c = this.get(ref);
    const sig = normalizeSignal(signal);
    if (!isRunning(c.row)) throw conflict(`Cannot kill container: ${ref}: Container ${c.row.id} is not running`);
    if (sig === 'SIGKILL' || sig === 'SIGTERM' || sig === 'SIGINT')
      this.deps.repo.update(c.row.id, { stopped_by_user: 1 });
    await this.signal(c.row.id, sig);
    this.event(c.row, 'kill', { signal: String(SIGNALS[sig] ?? sig) });
  }

  /**
   * Signals a container's process. One that has exited since the caller
   * looked (its exit not yet recorded) needs no signal: its exit is on the way,
   * and whoever waits for it is told then. So the outcome of stop, kill and a
   * forced remove never depends on which of the two came first.
   */
  private async signal(id: string, sig: string): Promise<void> {
    await this.deps.runtime.kill(id, sig, { all: false });
  }

  /**
   * Waits for a signalled container's exit. conmon reports every exit, unless
   * it died itself (killed by hand, or by the OOM killer): then no report would
   * ever come, so now and then the monitor is looked for, and an exit it can
   * no longer report is recorded here.
   */
  private async exitOf(id: string, exited: Promise<unknown>): Promise<void> {
    let done = false;
    void exited.then(() => (done = true));
    for (;;) {
      await Promise.race([exited, new Promise((r) => setTimeout(r, LOST_EXIT_CHECK_MS).unref())]);
      if (done) return;
      const row = this.deps.repo.find(id);
      if (!row || !RUNNING.includes(row.status)) return;
      if ((await this.deps.runtime.conmonPid(this.hydrate(row).bundleDir)) !== null) continue;
      const code = await this.deps.exits.readExit(id);
      await this.onExit(
        id,
        code ?? 255,
        code === null ? 'container monitor (conmon) exited without reporting an exit' : '',
      );
    }
  }

  async restart(ref: string, timeoutSec?: number): Promise<void> {
    const row = this.find(ref);
    if (isRunning(row)) {
      // An exit that lands first leaves nothing to stop: go on to the start.
      await this.stop(row.id, timeoutSec !== undefined ? { timeoutSec } : {}).catch((e: unknown) => {
        if (!isEngineError(e, 'not-modified')) throw e;
      });
    }
    await this.guardStart(row.id, () => this.startRow(row.id, { stoppedByUser: false }));
    this.event(row, 'restart');
  }

  async pause(ref: string): Promise<void> {
    const row = this.find(ref);
    if (row.status === 'paused') throw conflict(`Container ${row.id} is already paused`);
    if (row.status !== 'running') throw conflict(`Container ${row.id} is not running`);
    await this.deps.runtime.pause(row.id);
    // An exit recorded meanwhile stands: a frozen cgroup with no process is not a paused container.
    if (!this.deps.repo.updateIf(row.id, 'running', { status: 'paused' }))
      throw conflict(`Container ${row.id} is not running`);
    this.event(row, 'pause');
  }

  /**
   * Pauses a running container for a commit, as pause() does, marked so in its
   * bundle until thaw(): a berthd killed in between unpauses it when it starts
   * again (thawAfterCrash), since nobody asked for that pause.
   */
  async freeze(ref: string): Promise<void> {
    const c = this.get(ref);
    const marker = path.join(c.bundleDir, FROZEN);
    await writeFile(marker, '');
    try {
      await this.pause(c.row.id);
    } catch (e) {
      await rm(marker, { force: true });
      throw e;
    }
  }

  /** Ends a freeze(). */
  async thaw(ref: string): Promise<void> {
    const c = this.get(ref);
    try {
      await this.unpause(c.row.id);
    } finally {
      await rm(path.join(c.bundleDir, FROZEN), { force: true });
    }
  }

  /** At start: a container left frozen by a commit that a crash cut short runs again. Returns its status. */
  private async thawAfterCrash(c: Container, status: 'running' | 'paused'): Promise<'running' | 'paused'> {
    const marker = path.join(c.bundleDir, FROZEN);
    if (
      !(await access(marker).then(
        () => true,
        () => false,
      ))
    )
      return status;
    if (status === 'paused') await this.deps.runtime.resume(c.row.id);
    await rm(marker, { force: true });
    this.log.info({ id: c.row.id }, 'unpaused a container that a commit cut short by a crash had paused');
    return 'running';
  }

  async unpause(ref: string): Promise<void> {
    const row = this.find(ref);
    if (row.status !== 'paused') throw conflict(`Container ${row.id} is not paused`);
    await this.deps.runtime.resume(row.id);
    if (!this.deps.repo.updateIf(row.id, 'paused', { status: 'running' }))
      throw conflict(`Container ${row.id} is not paused`);
    this.event(row, 'unpause');
  }

  rename(ref: string, newName: string): void {
    const row = this.find(ref);
    if (!newName) throw invalidParameter('Neither old nor new names may be empty');
    const name = checkName(newName);
    if (name === row.name) throw invalidParameter('Renaming a container with the same name as its current name');
    this.checkNameFree(name);
    try {
      this.deps.repo.rename(row.id, name);
    } catch (e) {
      if (isUniqueViolation(e)) this.checkNameFree(name);
      throw e;
    }
    this.event({ ...row, name }, 'rename', { oldName: `/${row.name}` });
  }

  // ------------------------------------------------------------------ remove

  async remove(ref: string, opts: { force?: boolean } = {}): Promise<void> {
    const c = this.get(ref);
    const id = c.row.id;
    if (isRunning(c.row) || c.row.status === 'restarting') {
      if (!opts.force) {
        throw conflict(
          `You cannot remove a ${c.row.status} container ${id}. Stop the container before attempting removal or force remove`,
        );
      }
      clearTimeout(this.restartTimers.get(id));
      this.deps.repo.update(id, { stopped_by_user: 1 });
      if (c.row.status === 'restarting') this.deps.repo.update(id, { status: 'exited' });
      else {
        const exited = this.wait(id, 'not-running');
        if (c.row.status === 'paused') await this.deps.runtime.resume(id).catch(() => undefined);
        await this.signal(id, 'SIGKILL');
        await this.exitOf(id, exited);
      }
    }
    // A bundle still being prepared after create must finish before it is torn down.
    await this.prepared.get(id)?.catch(() => undefined);
    this.prepared.delete(id);
    this.deps.repo.remove(id);
    // Gone from the API from here on: waiters (docker run --rm) need not wait for the
    // tear-down. A crash before it ends leaves a directory that recover() sweeps away.
    this.notify(id, ['not-running', 'next-exit', 'removed'], c.row.exit_code);
    this.event(c.row, 'destroy');
    await this.settled(id);
    await this.deps.runtime.delete(id, true).catch(() => undefined);
    await this.deps.exits.clear(id).catch(() => undefined);
    await this.discardDir(id, c.bundleDir);
  }

  /**
   * Deletes a removed container's directory in the background, its rootfs
   * unmounted first: what a container wrote can be thousands of files and
   * many MiB, and unmounting an overlay syncs the filesystem under it (~200 ms
   * after the commit bench's writer), all of which `docker rm` waited for.
   * A crash meanwhile leaves it renamed, for the next start (sweepOrphans).
   */
  private async discardDir(id: string, dir: string): Promise<void> {
    const onError = (err: unknown) => this.log.warn({ err, id }, "deleting a removed container's directory failed");
    try {
      await removeInBackground(dir, this.deps.root, onError, (renamed) => releaseRootfs(path.join(renamed, 'rootfs')));
    } catch (e) {
      throw systemError(`unable to remove filesystem for ${id}: ${messageOf(e)}`, e);
    }
  }

  async prune(filters: Filters = {}): Promise<{ ContainersDeleted: string[] | null; SpaceReclaimed: number }> {
    checkFilters(filters, ['label', 'label!', 'until']);
    const deleted: string[] = [];
    for (const row of this.deps.repo.withStatus(['created', 'exited', 'dead'])) {
      const c = this.hydrate(row);
      if (!matchLabels(filters, c.config.Labels)) continue;
      if (filters.until?.[0] && row.created >= Date.parse(filters.until[0])) continue;
      await this.remove(row.id, {});
      deleted.push(row.id);
    }
    return { ContainersDeleted: deleted.length ? deleted : null, SpaceReclaimed: 0 };
  }

  // ------------------------------------------------------------------ logs

  /**
   * The container's output from its log file. With follow, it goes on until the
   * container stops (or `signal` aborts).
   */
  async *logs(ref: string, o: Omit<ReadLogOptions, 'signal'> & { signal?: AbortSignal }): AsyncGenerator<LogEntry> {
    const c = this.get(ref);
    const stop = new AbortController();
    const onAbort = () => stop.abort();
    o.signal?.addEventListener('abort', onAbort, { once: true });
    if (o.follow) {
      if (!RUNNING.includes(c.row.status) && !this.starting.has(c.row.id)) stop.abort();
      // Ends the follow at the exit; forgotten (stop aborts it) if the reader ends first.
      else this.wait(c.row.id, 'next-exit', stop.signal).then(onAbort, () => undefined);
    }
    try {
      yield* readLog(c.logPath, { ...o, signal: stop.signal });
    } finally {
      o.signal?.removeEventListener('abort', onAbort);
      stop.abort();
    }
  }

  /**
   * Attaches a client to the container's stdio (attach.ts): the log so far
   * with `logs`, then with `stream` the live output until the process ends,
   * and its input to the process's stdin with `stdin` (and OpenStdin). A
   * created container may be attached before it starts: the start then waits
   * for the attach to be connected, so no output is missed.
   */
  attach(
    ref: string,
    o: { logs: boolean; stream: boolean; stdin: boolean; stdout: boolean; stderr: boolean; detachKeys?: string },
  ): AttachSession {
    const c = this.get(ref);
    if (c.row.status === 'exited' || c.row.status === 'dead') {
      if (o.stream) throw conflict('You cannot attach to a stopped container, start it first');
    }
    if (c.row.status === 'paused') throw conflict(`You cannot attach to a paused container, unpause it first`);
    const detachKeys = parseDetachKeys(o.detachKeys || DEFAULT_DETACH_KEYS);
    const id = c.row.id;
    const io = {
      tty: c.config.Tty,
      openStdin: c.config.OpenStdin,
      stdinOnce: c.config.StdinOnce,
      ended: () => processEnded(this.deps.repo.find(id)?.pid),
    };
    const session = this.attachments.open(c.row.id, io, {
      stdin: o.stdin,
      stdout: o.stdout,
      stderr: o.stderr,
      detachKeys,
      noStream: !o.stream,
      ...(o.logs ? { history: () => readLog(c.logPath, { stdout: o.stdout, stderr: o.stderr }) } : {}),
    });
    if (o.stream && isRunning(c.row)) this.attachments.connect(c.row.id, this.deps.runtime.attachSocket(c.row.id));
    return session;
  }

  /** `POST /containers/{id}/resize`: the terminal's size, through conmon. */
  async resize(ref: string, height: number, width: number): Promise<void> {
    const c = this.get(ref);
    if (!isRunning(c.row)) throw conflict(`Container ${c.row.id} is not running`);
    if (!c.config.Tty) return;
    await this.deps.runtime.resize(c.bundleDir, height, width);
  }

  /** Bytes in the container's writable layer (SizeRw), and with its image's (SizeRootFs). */
  async sizes(c: Container): Promise<{ SizeRw: number; SizeRootFs: number }> {
    const rw = await duBytes(path.join(c.bundleDir, 'upper'));
    const image = this.deps.images.layersOf(c.row.image_id).reduce((a, l) => a + l.size, 0);
    return { SizeRw: rw, SizeRootFs: rw + image };
  }

  /** `GET /containers/{id}/stats?stream=0`. */
  async stats(ref: string) {
    const c = this.get(ref);
    return cgroupStats({ path: cgroupPath(c.row.id) }, c.row.id, c.row.name);
  }

  /** `GET /containers/{id}/top`. */
  async top(ref: string, psArgs?: string) {
    const c = this.get(ref);
    if (!isRunning(c.row)) throw conflict(`Container ${c.row.id} is not running`);
    return top({ path: cgroupPath(c.row.id) }, psArgs || '-ef');
  }

  isTty(ref: string): boolean {
    return this.get(ref).config.Tty;
  }
}

/** Apparent size of the regular files under a directory (0 when it does not exist). */
async function duBytes(dir: string): Promise<number> {
  let total = 0;
  const entries = await readdir(dir, { withFileTypes: true, recursive: true }).catch(() => []);
  for (const e of entries) {
    if (e.isFile()) total += (await lstat(path.join(e.parentPath, e.name)).catch(() => ({ size: 0 }))).size;
  }
  return total;
}

/** Every container's cgroup, in each hierarchy: /berth/<id>, beside dockerd's /docker. */
const cgroupPath = (id: string) => `/berth/${id}`;

/** `host:container[:ro|rw][,propagation]` bind specs. */
export function parseBind(spec: string): BindMount {
  const parts = spec.split(':');
  if (parts.length < 2 || parts.length > 3) throw invalidParameter(`invalid volume specification: '${spec}'`);
  const [source, destination, mode = ''] = parts as [string, string, string?];
  if (!source.startsWith('/'))
    throw invalidParameter(`invalid volume specification: '${spec}': named volumes are not supported yet`);
  if (!destination.startsWith('/')) throw invalidParameter(`invalid volume specification: '${spec}'`);
  const opts = mode.split(',').filter(Boolean);
  for (const o of opts) {
    if (!['ro', 'rw', 'z', 'Z', 'private', 'rprivate', 'shared', 'rshared', 'slave', 'rslave', 'nocopy'].includes(o)) {
      throw invalidParameter(`invalid mode: ${o}`);
    }
  }
  return {
    source,
    destination,
    readonly: opts.includes('ro'),
    propagation: (opts.find((o) => /private|shared|slave/.test(o)) ?? 'rprivate') as Propagation,
  };
}

function mountOf(m: Mount): BindMount {
  if ((m.Type ?? 'bind') !== 'bind') throw invalidParameter(`mount type ${m.Type} is not supported yet`);
  if (!m.Source?.startsWith('/'))
    throw invalidParameter('invalid mount config for type "bind": invalid mount path: must be absolute');
  if (!m.Target?.startsWith('/'))
    throw invalidParameter('invalid mount config for type "bind": invalid mount path: must be absolute');
  return {
    source: m.Source,
    destination: m.Target,
    readonly: m.ReadOnly ?? false,
    propagation: (m.BindOptions?.Propagation || 'rprivate') as Propagation,
  };
}

const withSeccomp = (o: 'unconfined' | SeccompProfile | undefined) => (o === undefined ? {} : { seccomp: o });
