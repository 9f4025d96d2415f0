// The SQLite store: the single source of truth. WAL mode, foreign keys, and
// numbered migrations applied at start inside one transaction each.
import Database from 'better-sqlite3';
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { packageRoot } from '../../paths.js';
import { systemError } from '../../errors.js';

export type Db = Database.Database;

const MIGRATIONS_DIR = path.join(packageRoot, 'src/engine/store/migrations');

export interface Migration {
  version: number;
  name: string;
  sql: string;
}

/** The ordered migrations shipped with this code: `NNN-name.sql`. */
export function loadMigrations(dir = MIGRATIONS_DIR): Migration[] {
  return readdirSync(dir)
    .filter((f) => /^\d{3}-.+\.sql$/.test(f))
    .sort()
    .map((f) => ({ version: Number(f.slice(0, 3)), name: f, sql: readFileSync(path.join(dir, f), 'utf8') }));
}

/** Opens (creating if needed) the database and brings its schema up to date. */
export function openDb(file: string, migrations = loadMigrations()): Db {
  const db = new Database(file);
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = NORMAL');
  db.pragma('foreign_keys = ON');
  db.pragma('busy_timeout = 5000');
  migrate(db, migrations);
  return db;
}

export function schemaVersion(db: Db): number {
  return db.pragma('user_version', { simple: true }) as number;
}

export function migrate(db: Db, migrations: Migration[]): void {
  const current = schemaVersion(db);
  const latest = migrations.at(-1)?.version ?? 0;
  if (current > latest) {
    db.close();
    throw systemError(
      `database schema version ${current} is newer than this berthd understands (${latest}); refusing to start — use a newer berthd`,
    );
  }
  for (const m of migrations.filter((x) => x.version > current)) {
    db.transaction(() => {
      db.exec(m.sql);
      db.pragma(`user_version = ${m.version}`);
    })();
  }
}
