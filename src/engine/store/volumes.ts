// SQL for volumes and the mount points containers hold on them, for the volume service.
import type { Db } from './db.js';
import { preparedOnUse } from './statements.js';

export interface VolumeRow {
  name: string;
  driver: string;
  labels: string;
  options: string;
  created: number;
}

export interface MountRow {
  container_id: string;
  destination: string;
  volume: string | null;
  source: string;
  rw: number;
  mode: string;
  copy: number;
  propagation: string;
  /** VolumeOptions.Subpath ('' for the whole volume). */
  subpath: string;
}

// `column = +?`: see db.ts ("A value bound for a column").
const statements = (db: Db) =>
  preparedOnUse(db, {
    all: 'SELECT * FROM volumes ORDER BY created, name',
    byName: 'SELECT * FROM volumes WHERE name = ?',
    insert:
      'INSERT INTO volumes (name, driver, labels, options, created) VALUES (@name, @driver, @labels, @options, @created)',
    insertIfMissing: `INSERT OR IGNORE INTO volumes (name, driver, labels, options, created)
     VALUES (@name, @driver, @labels, @options, @created)`,
    remove: 'DELETE FROM volumes WHERE name = ?',
    users: 'SELECT DISTINCT container_id FROM container_mounts WHERE volume = +? ORDER BY container_id',
    used: 'SELECT DISTINCT volume FROM container_mounts WHERE volume IS NOT NULL',
    mountsOf: 'SELECT * FROM container_mounts WHERE container_id = +? ORDER BY seq',
    mountsOfContainers:
      'SELECT * FROM container_mounts WHERE container_id IN (SELECT value FROM json_each(?)) ORDER BY seq',
    insertMount: `INSERT INTO container_mounts (container_id, destination, volume, source, rw, mode, copy, propagation, subpath, seq)
     VALUES (@container_id, @destination, @volume, @source, @rw, @mode, @copy, @propagation, @subpath, @seq)`,
    dropMounts: 'DELETE FROM container_mounts WHERE container_id = ?',
  });

export class VolumeRepository {
  private readonly q: ReturnType<typeof statements>;

  constructor(private readonly db: Db) {
    this.q = statements(db);
  }

  list(): VolumeRow[] {
    return this.q.all.all() as VolumeRow[];
  }

  find(name: string): VolumeRow | undefined {
    return this.q.byName.get(name) as VolumeRow | undefined;
  }

  /** Inserts a volume; a taken name surfaces as SQLite's PRIMARY KEY error. */
  insert(row: VolumeRow): void {
    this.q.insert.run(row);
  }

  /** Removes a volume's record; one a container still names is refused by the foreign key. */
  remove(name: string): void {
    this.q.remove.run(name);
  }

  /** The containers whose mount points name the volume. */
  users(name: string): string[] {
    return (this.q.users.all(name) as { container_id: string }[]).map((r) => r.container_id);
  }

  /** The names of every volume some container names. */
  used(): Set<string> {
    return new Set((this.q.used.all() as { volume: string }[]).map((r) => r.volume));
  }

  mountsOf(containerId: string): MountRow[] {
    return this.q.mountsOf.all(containerId) as MountRow[];
  }

  /** The mounts of these containers, each one's in its order (a list's one query for all). */
  mountsOfContainers(containerIds: string[]): MountRow[] {
    return this.q.mountsOfContainers.all(JSON.stringify(containerIds)) as MountRow[];
  }

  /**
   * Records a new container's mount points, and the volumes it creates with
   * them (unless another create made one of them meanwhile), in one
   * transaction. Returns the names of the volumes it created.
   */
  recordMounts(created: VolumeRow[], mounts: MountRow[]): string[] {
    return this.db.transaction(() => {
      const inserted = created.filter((v) => this.q.insertIfMissing.run(v).changes === 1).map((v) => v.name);
      for (const [seq, m] of mounts.entries()) this.q.insertMount.run({ ...m, seq });
      return inserted;
    })();
  }

  /** Forgets a container's mount points (its removal; the rows would go with it anyway). */
  dropMounts(containerId: string): void {
    this.q.dropMounts.run(containerId);
  }
}
