// Containers found by id, unique id prefix or name, and listed with Docker's
// filters: the Container view (container.ts) made from its database row,
// which stays in here.
import path from 'node:path';
import { invalidParameter, noSuchContainer, notFound } from '../../errors.js';
import { checkFilters, globMatch, matchLabels, type Filters } from '../filters.js';
import type { ImageService } from '../images/service.js';
import type { ContainerRepository, ContainerRow, LinkRow } from '../store/containers.js';
import type { ContainerConfig, HostConfig } from './config.js';
import { ACTIVE, type Container, type ContainerStatus, type HealthState } from './container.js';
import { registersLegacyLinks, linkViews, splitLinkName } from './links.js';

/** The list filter's health values: a container that never ran a check is "none". */
const HEALTH_FILTER_VALUES = ['none', 'starting', 'healthy', 'unhealthy'];

const healthStatusOf = (c: Pick<Container, 'health'>): string => c.health?.Status ?? 'none';

const LIST_FILTERS = [
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
];
const STATUSES = ['created', 'restarting', 'running', 'removing', 'paused', 'exited', 'dead'];

export class ContainerLookup {
  constructor(
    private readonly repo: ContainerRepository,
    private readonly images: ImageService,
    /** <data-root>/containers */
    private readonly root: string,
    /** The health of a container whose checks run: newer than its record's. */
    private readonly liveHealth: (id: string) => HealthState | undefined = () => undefined,
  ) {}

  /** Resolves a full id, a unique id prefix, or a name (with or without '/'). */
  find(ref: string): Container {
    const { repo } = this;
    if (!ref) throw noSuchContainer(ref);
    const byId = /^[0-9a-f]{64}$/.test(ref) ? repo.find(ref) : undefined;
    if (byId) return this.view(byId);
    const byName = repo.findByName(ref.replace(/^\//, ''));
    if (byName) return this.view(byName);
    const link = splitLinkName(ref);
    const linked = link && repo.linkByName(link.parent, link.alias);
    const child = linked && repo.find(linked.child_id);
    if (child) return this.view(child);
    if (/^[0-9a-f]+$/.test(ref)) {
      const rows = repo.findByPrefix(ref);
      if (rows.length > 1) throw notFound(`Multiple IDs found with provided prefix: ${ref}`);
      if (rows[0]) return this.view(rows[0]);
    }
    throw noSuchContainer(ref);
  }

  /** The container with this full id, as recorded now; undefined once removed. */
  byId(id: string): Container | undefined {
    const row = this.repo.find(id);
    return row && this.view(row);
  }

  /** The container of this name, if any. */
  byName(name: string): Container | undefined {
    const row = this.repo.findByName(name);
    return row && this.view(row);
  }

  withStatus(statuses: ContainerStatus[]): Container[] {
    return this.repo.withStatus(statuses).map((r) => this.view(r));
  }

  /** `GET /containers/json`: running ones, or all; newest first. */
  list(opts: { all?: boolean; limit?: number; filters?: Filters } = {}): Container[] {
    const f = opts.filters ?? {};
    checkFilters(f, LIST_FILTERS);
    for (const s of f.status ?? []) {
      if (!STATUSES.includes(s)) throw invalidParameter(`invalid filter 'status=${s}'`);
    }
    for (const h of f.health ?? []) {
      if (!HEALTH_FILTER_VALUES.includes(h)) {
        throw invalidParameter(
          `invalid filter 'health=${h}': invalid value for health (${h}): must be one of ${HEALTH_FILTER_VALUES.join(', ')}`,
        );
      }
    }
    const before = f.before?.[0] ? this.find(f.before[0]).seq : undefined;
    const since = f.since?.[0] ? this.find(f.since[0]).seq : undefined;
    const ancestors = (f.ancestor ?? []).map((a) => {
      try {
        return this.images.find(a).id;
      } catch {
        return undefined;
      }
    });
    const all =
      opts.all || (opts.limit ?? 0) > 0 || !!f.status || !!f.exited || before !== undefined || since !== undefined;
    const out: Container[] = [];
    // All links in one query, not one per container.
    const links = new Map<string, LinkRow[]>();
    for (const l of this.repo.allLinks()) {
      for (const id of l.parent_id === l.child_id ? [l.parent_id] : [l.parent_id, l.child_id]) {
        const of = links.get(id);
        if (of) of.push(l);
        else links.set(id, [l]);
      }
    }
    // Without `all`, only the active ones are read: `docker ps` beside many stopped containers.
    for (const row of all ? this.repo.list() : this.repo.withStatusNewestFirst(ACTIVE)) {
      const c = this.view(row, links.get(row.id) ?? []);
      if (f.id?.length && !f.id.some((p) => c.id.startsWith(p))) continue;
      if (f.name?.length && !f.name.some((n) => new RegExp(n.replace(/^\//, '')).test(c.name))) continue;
      if (f.status?.length && !f.status.includes(c.status)) continue;
      if (f.exited?.length && !(c.status === 'exited' && f.exited.map(Number).includes(c.exitCode))) continue;
      if (f.health?.length && !f.health.includes(healthStatusOf(c))) continue;
      if (!matchLabels(f, c.config.Labels)) continue;
      if (before !== undefined && c.seq >= before) continue;
      if (since !== undefined && c.seq <= since) continue;
      if (f.ancestor?.length && !ancestors.includes(c.imageId) && !f.ancestor.some((a) => globMatch(a, c.imageRef)))
        continue;
      out.push(c);
      if (opts.limit && opts.limit > 0 && out.length >= opts.limit) break;
    }
    return out;
  }

  /** `linkRows`: the container's links (linksOf's rows), when the caller has them already. */
  private view(row: ContainerRow, linkRows = this.repo.linksOf(row.id)): Container {
    const config: ContainerConfig = JSON.parse(row.config);
    const hostConfig: HostConfig = JSON.parse(row.host_config);
    const argv = [...(config.Entrypoint ?? []), ...(config.Cmd ?? [])];
    const bundleDir = path.join(this.root, row.id);
    const links = linkViews(row.id, linkRows);
    // Legacy links as dockerd's inspect shows them: "/<child>:/<parent>/<alias>", none once removed.
    if (registersLegacyLinks(hostConfig.NetworkMode) && hostConfig.Links?.length) {
      hostConfig.Links = links.links.length ? links.links : null;
    }
    return {
      id: row.id,
      name: row.name,
      imageId: row.image_id,
      imageRef: row.image_ref,
      created: row.created,
      status: row.status,
      pid: row.pid,
      exitCode: row.exit_code,
      error: row.error,
      startedAt: row.started_at,
      finishedAt: row.finished_at,
      restartCount: row.restart_count,
      oomKilled: row.oom_killed === 1,
      stoppedByUser: row.stopped_by_user === 1,
      manuallyStopped: row.manually_stopped === 1,
      seq: row.seq,
      config,
      hostConfig,
      recursiveReadonlyBinds: row.recursive_ro_binds === 1,
      path: argv[0] ?? '',
      args: argv.slice(1),
      bundleDir,
      etcDir: row.etc_dir || bundleDir,
      rootfs: path.join(bundleDir, 'rootfs'),
      logPath: path.join(bundleDir, 'ctr.log'),
      health: this.liveHealth(row.id) ?? (row.health ? (JSON.parse(row.health) as HealthState) : null),
      legacyLinks: links.children,
      linkNames: links.names,
    };
  }
}
