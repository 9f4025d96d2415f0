// The SQLite store: the single source of truth. WAL mode, foreign keys, and
// numbered migrations applied at start, those pending in one transaction.
import {
  constants,
  copyFileSync,
  existsSync,
  readdirSync,
  readFileSync,
  rmSync,
  statfsSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import type { Logger } from '../../log.js';
import { packageRoot } from '../../paths.js';
import { systemError } from '../../errors.js';
import Database, { type Db } from './sqlite.js';

export type { Db };

const MIGRATIONS_DIR = path.join(packageRoot, 'src/engine/store/migrations');
/**
 * A database with this build's migrations applied and nothing in it, made by
 * the build (scripts/bundle.mjs): a new data root's database starts as a copy
 * (a fraction of a millisecond, where applying the migrations took 13-20 ms of
 * the first start), then is migrated as any other.
 */
export const EMPTY_DB_TEMPLATE = path.join(packageRoot, 'dist/berth-empty.db');

/*
 * A value bound for a column. The SQLite in better-sqlite3 13 is built with STAT4: for
 * `column = ?` on a column whose index is not unique, its planner takes the bound value
 * into account, so a new binding (every call binds again) expires the statement and the
 * next step prepares it afresh, and better-sqlite3 builds its row maker again: 50-180 µs
 * instead of 5-15 for a container's endpoints or mounts or an image's layers, on every
 * inspect. `column = +?` compares the same value with the same affinity and the same
 * index (the plan does not change), but the planner no longer looks at the value. So the
 * store's reads by such a column bind through `+?`.
 */

export interface Migration {
  version: number;
  name: string;
  sql: string;
}

/** The ordered migrations shipped with this code: `NNN-name.sql`, each read only if it is applied. */
export function loadMigrations(dir = MIGRATIONS_DIR): Migration[] {
  return readdirSync(dir)
    .filter((f) => /^\d{3}-.+\.sql$/.test(f))
    .sort()
    .map((f) => ({
      version: Number(f.slice(0, 3)),
      name: f,
      get sql() {
        return readFileSync(path.join(dir, f), 'utf8');
      },
    }));
}

/**
 * Opens (creating if needed) the database and brings its schema up to date. A
 * database that does not exist yet starts as a copy of `template` when given
 * and present; the migrations it lacks, if any, are applied as to any other.
 */
export function openDb(file: string, migrations = loadMigrations(), template?: string): Db {
  if (template) startFromTemplate(file, template);
  const db = new Database(file);
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = NORMAL');
  db.pragma('foreign_keys = ON');
  db.pragma('busy_timeout = 5000');
  migrate(db, migrations);
  return db;
}

function startFromTemplate(file: string, template: string): void {
  // A write-ahead log without its database is another database's: SQLite would replay it on the copy.
  if (existsSync(`${file}-wal`)) return;
  try {
    copyFileSync(template, file, constants.COPYFILE_EXCL);
  } catch (e) {
    // There already (EEXIST), or no template (a build without one): opened and migrated as it is.
    if (!['EEXIST', 'ENOENT'].includes((e as NodeJS.ErrnoException).code ?? '')) throw e;
  }
}

/** Frees what SQLite can of the connection's page cache and its other memory (the database is untouched). */
export function shrinkMemory(db: Db): void {
  db.pragma('shrink_memory');
}

export function schemaVersion(db: Db): number {
  return db.pragma('user_version', { simple: true }) as number;
}

function migrate(db: Db, migrations: Migration[]): void {
  const current = schemaVersion(db);
  const latest = migrations.at(-1)?.version ?? 0;
  if (current > latest) {
    db.close();
    throw systemError(
      `database schema version ${current} is newer than this berthd understands (${latest}); refusing to start — use a newer berthd`,
    );
  }
  const pending = migrations.filter((x) => x.version > current);
  if (!pending.length) return;
  // All or none: a fresh data root takes one commit rather than one per migration.
  db.transaction(() => {
    for (const m of pending) {
      db.exec(m.sql);
      db.pragma(`user_version = ${m.version}`);
    }
  })();
}

/** The space kept in reserve for the database (see guardFullDisk). */
const RESERVE_BYTES = 4 << 20;
/** How often a given-up reserve is made again, once the disk has room for it many times over. */
const RESERVE_RETRY_MS = 10_000;

/**
 * On a full disk, SQLite answers every write "database or disk is full":
 * berthd could then neither record what happens (a container's exit) nor
 * free space for the user (rm, rmi, prune). So a reserve file of
 * RESERVE_BYTES sits beside the database; at the first write that finds the
 * disk full it is given up and the write done once more, and it is made
 * again once the disk has room. A write that fails even so is refused in
 * dockerd's words for a full disk. Guards every statement run outside a
 * transaction, and every transaction as a whole (SQLite may have rolled a
 * transaction back when the disk filled, so only the whole is done again).
 */
export function guardFullDisk(
  db: Db,
  reserveFile: string,
  logger: Logger,
): { makeReserve(): Promise<void>; close(): void } {
  let retry: NodeJS.Timeout | undefined;
  const free = () => {
    const s = statfsSync(path.dirname(reserveFile));
    return s.bavail * s.bsize;
  };
  const cannot = (e: unknown): false => {
    rmSync(reserveFile, { force: true });
    logger.debug({ err: e }, 'cannot make the database reserve yet');
    return false;
  };
  /** 'write' when the reserve is to be written, else whether it is there. */
  const check = (): boolean | 'write' => {
    if (statSync(reserveFile, { throwIfNoEntry: false })?.size === RESERVE_BYTES) return true;
    return free() < 16 * RESERVE_BYTES ? false : 'write';
  };
  const make = (): boolean => {
    try {
      const now = check();
      if (now !== 'write') return now;
      writeFileSync(reserveFile, Buffer.alloc(RESERVE_BYTES), { mode: 0o600 });
      return true;
    } catch (e) {
      return cannot(e);
    }
  };
  const remakeLater = () => {
    retry ??= setInterval(() => {
      if (!make()) return;
      clearInterval(retry);
      retry = undefined;
    }, RESERVE_RETRY_MS).unref();
  };
  const release = (): boolean => {
    if (statSync(reserveFile, { throwIfNoEntry: false }) === undefined) return false;
    rmSync(reserveFile, { force: true });
    logger.warn({ file: reserveFile }, 'the disk is full: gave up the database reserve');
    remakeLater();
    return true;
  };
  const isFull = (e: unknown) => (e as { code?: string }).code === 'SQLITE_FULL';
  const full = (e: unknown) => systemError(`write ${db.name}: no space left on device`, e);
  function guarded<T>(fn: () => T): T {
    try {
      return fn();
    } catch (e) {
      if (!isFull(e)) throw e;
      if (!release()) throw full(e);
    }
    try {
      return fn();
    } catch (e) {
      throw isFull(e) ? full(e) : e;
    }
  }

  const prepare = db.prepare.bind(db);
  db.prepare = ((sql: string) => {
    const stmt = prepare(sql);
    for (const m of ['run', 'get', 'all'] as const) {
      const call = stmt[m].bind(stmt) as (...a: unknown[]) => unknown;
      (stmt as unknown as Record<string, unknown>)[m] = (...a: unknown[]) =>
        db.inTransaction ? call(...a) : guarded(() => call(...a));
    }
    return stmt;
  }) as Db['prepare'];
  const transaction = db.transaction.bind(db);
  db.transaction = ((fn: (...a: unknown[]) => unknown) => {
    const t = transaction(fn);
    return (...a: unknown[]) => guarded(() => t(...a));
  }) as Db['transaction'];
  return {
    // Made once the daemon is serving, written on the thread pool: writing 4 MiB is on the
    // path to no answer.
    async makeReserve() {
      let made: boolean;
      try {
        const now = check();
        made =
          now === 'write'
            ? await writeFile(reserveFile, Buffer.alloc(RESERVE_BYTES), { mode: 0o600 }).then(() => true)
            : now;
      } catch (e) {
        made = cannot(e);
      }
      if (!made) remakeLater();
    },
    close() {
      clearInterval(retry);
    },
  };
}
