import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { scratchDir } from '../harness/tmp.js';
import { loadMigrations, openDb, schemaVersion } from '../../src/engine/store/db.js';

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
