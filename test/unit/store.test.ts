import { existsSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { scratchDir } from '../harness/tmp.js';
import { EMPTY_DB_TEMPLATE, loadMigrations, openDb, schemaVersion } from '../../src/engine/store/db.js';
import Database from '../../src/engine/store/sqlite.js';

const tmp = () => path.join(scratchDir('berth-db-'), 'berth.db');

describe('store', () => {
  it('applies every migration in order, with WAL and foreign keys on', () => {
    const migrations = loadMigrations();
    expect(migrations.map((m) => m.version)).toEqual(migrations.map((_, i) => i + 1));
    const db = openDb(tmp());
    expect(schemaVersion(db)).toBe(migrations.at(-1)!.version);
    expect(db.pragma('journal_mode', { simple: true })).toBe('wal');
    expect(db.pragma('foreign_keys', { simple: true })).toBe(1);
    const tables = (db.prepare("SELECT name FROM sqlite_master WHERE type='table'").all() as { name: string }[]).map(
      (r) => r.name,
    );
    expect(tables).toEqual(expect.arrayContaining(['images', 'tags', 'layers', 'containers', 'image_layers']));
    db.close();
  });

  it('is idempotent across restarts', () => {
    const f = tmp();
    openDb(f).close();
    const db = openDb(f);
    expect(schemaVersion(db)).toBe(loadMigrations().at(-1)!.version);
    db.close();
  });

  it('refuses a database newer than the code', () => {
    const f = tmp();
    const db = openDb(f);
    db.pragma('user_version = 999');
    db.close();
    expect(() => openDb(f)).toThrow(/schema version 999 is newer than this berthd understands/);
  });

  it('rolls back a failing migration whole', () => {
    const f = tmp();
    const good = loadMigrations();
    const bad = [
      ...good,
      { version: good.length + 1, name: 'bad', sql: 'CREATE TABLE t1(x); INSERT INTO nope VALUES (1);' },
    ];
    expect(() => openDb(f, bad)).toThrow();
    const db = openDb(f, good);
    expect(schemaVersion(db)).toBe(good.length);
    expect(db.prepare("SELECT count(*) AS n FROM sqlite_master WHERE name='t1'").get()).toEqual({ n: 0 });
    db.close();
  });
});

/** The schema as SQLite keeps it in the file (every table, index and trigger, as created), its version and row counts. */
function schemaOf(file: string) {
  const db = new Database(file);
  const out = {
    version: schemaVersion(db),
    objects: db.prepare('SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name').all(),
    rows: (db.prepare("SELECT name FROM sqlite_master WHERE type = 'table'").all() as { name: string }[]).map(
      ({ name }) => ({
        name,
        count: db.prepare(`SELECT count(*) AS n FROM "${name}"`).get(),
      }),
    ),
  };
  db.close();
  return out;
}

describe('a new data root starts from the build’s empty database', () => {
  const migrated = () => {
    const f = tmp();
    openDb(f).close();
    return f;
  };

  it('the build’s template holds exactly what the migrations make', () => {
    // A template left from before a migration was added or changed would start new data roots wrong.
    expect(existsSync(EMPTY_DB_TEMPLATE), 'npm run build makes dist/berth-empty.db').toBe(true);
    const f = tmp();
    openDb(f, loadMigrations(), EMPTY_DB_TEMPLATE).close();
    expect(schemaOf(f)).toEqual(schemaOf(migrated()));
    expect(schemaOf(EMPTY_DB_TEMPLATE).version).toBe(loadMigrations().at(-1)!.version);
  });

  it('gets the migrations an older template lacks', () => {
    const all = loadMigrations();
    const template = tmp();
    openDb(template, all.slice(0, 5)).close();
    const f = tmp();
    const db = openDb(f, all, template);
    expect(schemaVersion(db)).toBe(all.at(-1)!.version);
    db.close();
    expect(schemaOf(f)).toEqual(schemaOf(migrated()));
  });

  it('leaves an existing database to its migrations, the template unused', () => {
    const all = loadMigrations();
    const f = tmp();
    const old = openDb(f, all.slice(0, 3));
    old
      .prepare(
        "INSERT INTO images (id, config, created, added_at) VALUES ('sha256:old', '{}', '2020-01-01T00:00:00Z', 1)",
      )
      .run();
    old.close();
    const template = tmp();
    const t = openDb(template);
    t.pragma('user_version = 999'); // would be refused, were it copied
    t.close();
    const db = openDb(f, all, template);
    expect(schemaVersion(db)).toBe(all.at(-1)!.version);
    expect(db.prepare('SELECT id FROM images').all()).toEqual([{ id: 'sha256:old' }]);
    db.close();
    expect(schemaOf(f).objects).toEqual(schemaOf(migrated()).objects);
  });
});
