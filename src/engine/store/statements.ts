// A repository's statements, prepared at their first use rather than when the
// repository is made: a start makes all four repositories and runs few of
// their ~85 statements before it answers, and preparing one costs SQLite's
// parse and plan and better-sqlite3's wrapper (~6 ms of every start for all).
import type { Statement as SqliteStatement } from 'better-sqlite3';
import type { Db } from './db.js';

/** As `db.prepare(sql)` gives one, its parameters and rows untyped. */
type Statement = SqliteStatement<unknown[], unknown>;

/** An object whose property `k` is `sql[k]` prepared on `db`, the first time it is read. */
export function preparedOnUse<K extends string>(db: Db, sql: Record<K, string>): Record<K, Statement> {
  const q = {} as Record<K, Statement>;
  for (const key of Object.keys(sql) as K[]) {
    let stmt: Statement | undefined;
    Object.defineProperty(q, key, { enumerable: true, get: () => (stmt ??= db.prepare(sql[key])) });
  }
  return q;
}
