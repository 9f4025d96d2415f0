// SQL for containers, for the containers service (and /info's counts).
import type { Db } from './db.js';
import { preparedOnUse } from './statements.js';
import { Presence } from './presence.js';

export type ContainerStatus = 'created' | 'running' | 'paused' | 'restarting' | 'removing' | 'exited' | 'dead';

export interface ContainerRow {
  id: string;
  name: string;
  image_id: string;
  image_ref: string;
  config: string;
  host_config: string;
  created: number;
  status: ContainerStatus;
  pid: number;
  conmon_pid: number;
  exit_code: number;
  error: string;
  started_at: number;
  finished_at: number;
  restart_count: number;
  oom_killed: number;
  /** 1: the restart policy does not apply at the next exit (dockerd's "exit on next"). */
  stopped_by_user: number;
  /** 1: killed or stopped since the user last started it (dockerd's HasBeenManuallyStopped). */
  manually_stopped: number;
  seq: number;
  /** 1: read-only binds are recursively read-only where the kernel can (API 1.44 on). */
  recursive_ro_binds: number;
  /** Docker's State.Health as JSON; null until it first ran with a health check. */
  health: string | null;
  /** Where its hostname, hosts and resolv.conf are when not in its own bundle: a network donor's bundle. */
  etc_dir: string;
}

export type StatePatch = Partial<
  Pick<
    ContainerRow,
    | 'status'
    | 'pid'
    | 'conmon_pid'
    | 'exit_code'
    | 'error'
    | 'started_at'
    | 'finished_at'
    | 'restart_count'
    | 'oom_killed'
    | 'stopped_by_user'
    | 'manually_stopped'
    | 'health'
    | 'host_config'
    | 'config'
    | 'etc_dir'
  >
>;

/**
 * A container whose process runs from now on (a start's, or one a crash cut
 * short after it had let the process go): its last exit forgotten, its start now.
 */
export function runningState(status: 'running' | 'paused', pid: number, conmonPid: number): StatePatch {
  return {
    status,
    pid,
    conmon_pid: conmonPid,
    exit_code: 0,
    error: '',
    started_at: Date.now(),
    finished_at: 0,
    oom_killed: 0,
    stopped_by_user: 0,
  };
}

/** A link row with its two containers' names (the child's null once it is gone). */
const LINKS = `SELECT l.parent_id, p.name AS parent_name, l.child_id, c.name AS child_name, l.alias
  FROM container_links l JOIN containers p ON p.id = l.parent_id LEFT JOIN containers c ON c.id = l.child_id`;

const statements = (db: Db) =>
  preparedOnUse(db, {
    byId: 'SELECT * FROM containers WHERE id = ?',
    byName: 'SELECT * FROM containers WHERE name = ?',
    byPrefix: "SELECT * FROM containers WHERE id >= ? AND id < ? || 'g' LIMIT 2",
    all: 'SELECT * FROM containers ORDER BY seq DESC',
    withStatus: 'SELECT * FROM containers WHERE status IN (SELECT value FROM json_each(?)) ORDER BY seq',
    withStatusNewest: 'SELECT * FROM containers WHERE status IN (SELECT value FROM json_each(?)) ORDER BY seq DESC',
    ids: 'SELECT id FROM containers',
    restartable: `SELECT id FROM containers WHERE status IN (SELECT value FROM json_each(?)) AND stopped_by_user = 0
     AND json_extract(host_config, '$.RestartPolicy.Name') IN (SELECT value FROM json_each(?)) ORDER BY seq`,
    countByStatus: 'SELECT status, count(*) AS n FROM containers GROUP BY status',
    nextSeq: 'SELECT coalesce(max(seq), 0) + 1 AS n FROM containers',
    insert: `INSERT INTO containers (id, name, image_id, image_ref, config, host_config, created, status, seq, recursive_ro_binds)
     VALUES (@id, @name, @image_id, @image_ref, @config, @host_config, @created, 'created', @seq, @recursive_ro_binds)`,
    rename: 'UPDATE containers SET name = ? WHERE id = ?',
    remove: 'DELETE FROM containers WHERE id = ?',
    insertLink: 'INSERT INTO container_links (parent_id, child_id, alias, seq) VALUES (?, ?, ?, ?)',
    linksOf: `${LINKS} WHERE l.parent_id = @id OR l.child_id = @id ORDER BY l.seq`,
    allLinks: `${LINKS} ORDER BY l.seq`,
    linkByName: `${LINKS} WHERE p.name = ? AND l.alias = ?`,
    removeLink: 'DELETE FROM container_links WHERE parent_id = ? AND alias = ?',
    anyLink: 'SELECT EXISTS (SELECT 1 FROM container_links) AS n',
    anyRow: 'SELECT EXISTS (SELECT 1 FROM containers) AS n',
  });

/** A legacy link: the parent knows the child as alias (and the child is named /<parent>/<alias>). */
export interface LinkRow {
  parent_id: string;
  parent_name: string;
  child_id: string;
  /** null: the child was removed since. */
  child_name: string | null;
  alias: string;
}

export class ContainerRepository {
  private readonly q: ReturnType<typeof statements>;
  private readonly patchers = new Map<string, ReturnType<Db['prepare']>>();
  /** With no link recorded, a view of a container (each request that names one) skips its links' query. */
  private readonly links: Presence;
  private readonly rows: Presence;

  constructor(private readonly db: Db) {
    const q = statements(db);
    this.q = q;
    this.links = new Presence(() => (q.anyLink.get() as { n: number }).n === 1);
    this.rows = new Presence(() => (q.anyRow.get() as { n: number }).n === 1);
  }

  find(id: string): ContainerRow | undefined {
    return this.q.byId.get(id) as ContainerRow | undefined;
  }

  findByName(name: string): ContainerRow | undefined {
    return this.q.byName.get(name) as ContainerRow | undefined;
  }

  findByPrefix(prefix: string): ContainerRow[] {
    return this.q.byPrefix.all(prefix, prefix) as ContainerRow[];
  }

  list(): ContainerRow[] {
    return this.rows.any ? (this.q.all.all() as ContainerRow[]) : [];
  }

  withStatus(statuses: ContainerStatus[]): ContainerRow[] {
    return this.rows.any ? (this.q.withStatus.all(JSON.stringify(statuses)) as ContainerRow[]) : [];
  }

  /** withStatus, newest first (as list). */
  withStatusNewestFirst(statuses: readonly ContainerStatus[]): ContainerRow[] {
    return this.rows.any ? (this.q.withStatusNewest.all(JSON.stringify(statuses)) as ContainerRow[]) : [];
  }

  /** How many containers are in each status (statuses with none are left out). */
  countByStatus(): Map<ContainerStatus, number> {
    const rows = this.q.countByStatus.all() as { status: ContainerStatus; n: number }[];
    return new Map(rows.map((r) => [r.status, r.n]));
  }

  /** Every container's id. */
  ids(): Set<string> {
    return new Set((this.q.ids.all() as { id: string }[]).map((r) => r.id));
  }

  /** Ids of the containers in one of `statuses`, not stopped by a user, whose restart policy is one of `policies`. */
  restartable(statuses: ContainerStatus[], policies: string[]): string[] {
    return (this.q.restartable.all(JSON.stringify(statuses), JSON.stringify(policies)) as { id: string }[]).map(
      (r) => r.id,
    );
  }

  /** Inserts a new container; a taken name surfaces as SQLite's UNIQUE error. */
  insert(
    row: Pick<
      ContainerRow,
      'id' | 'name' | 'image_id' | 'image_ref' | 'config' | 'host_config' | 'created' | 'recursive_ro_binds'
    >,
  ): void {
    this.rows.added();
    this.db.transaction(() => {
      const seq = (this.q.nextSeq.get() as { n: number }).n;
      this.q.insert.run({ ...row, seq });
    })();
  }

  update(id: string, patch: StatePatch): void {
    this.patch(id, patch, null);
  }

  /** Applies the patch only while the container is in `status`; false when it was not. */
  updateIf(id: string, status: ContainerStatus, patch: StatePatch): boolean {
    return this.patch(id, patch, status);
  }

  private patch(id: string, patch: StatePatch, expected: ContainerStatus | null): boolean {
    const keys = Object.keys(patch).sort();
    if (keys.length === 0) return true;
    const sig = `${keys.join(',')}${expected === null ? '' : '?'}`;
    let stmt = this.patchers.get(sig);
    if (!stmt) {
      const where = expected === null ? 'id = @id' : 'id = @id AND status = @expected';
      stmt = this.db.prepare(`UPDATE containers SET ${keys.map((k) => `${k} = @${k}`).join(', ')} WHERE ${where}`);
      this.patchers.set(sig, stmt);
    }
    return stmt.run(expected === null ? { ...patch, id } : { ...patch, id, expected }).changes > 0;
  }

  rename(id: string, name: string): void {
    this.q.rename.run(name, id);
  }

  remove(id: string): void {
    this.q.remove.run(id);
    this.rows.removed();
  }

  /** Records a container's legacy links, in the order given. */
  insertLinks(parentId: string, links: { childId: string; alias: string }[]): void {
    this.links.added();
    this.db.transaction(() => {
      for (const [i, l] of links.entries()) this.q.insertLink.run(parentId, l.childId, l.alias, i);
    })();
  }

  /** The links a container makes (as parent) or is the target of (as child). */
  linksOf(id: string): LinkRow[] {
    return this.links.any ? (this.q.linksOf.all({ id }) as LinkRow[]) : [];
  }

  /** Every link, in the order linksOf gives each container's (a list's one query instead of one per container). */
  allLinks(): LinkRow[] {
    return this.links.any ? (this.q.allLinks.all() as LinkRow[]) : [];
  }

  /** The link named /<parent name>/<alias>. */
  linkByName(parentName: string, alias: string): LinkRow | undefined {
    return this.q.linkByName.get(parentName, alias) as LinkRow | undefined;
  }

  removeLink(parentId: string, alias: string): void {
    this.q.removeLink.run(parentId, alias);
    this.links.removed();
  }
}

/** True for SQLite's unique-constraint failure (a taken name). */
export const isUniqueViolation = (e: unknown) => (e as { code?: string }).code === 'SQLITE_CONSTRAINT_UNIQUE';
