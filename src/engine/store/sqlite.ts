// The SQLite binding, chosen by Node line. better-sqlite3 12 is built against
// the running Node's own headers; on Node 24 those make its statements remove
// an environment cleanup hook when collected, and a collection at teardown
// aborts the process. 13 is built on Node-API and ships its own binaries, but
// needs Node 22 (on Node 20 it crashes at the first query). So: 13 from Node 22
// on, 12 before. The two have the same API; the types are 12's.
import type BetterSqlite3 from 'better-sqlite3';
import { createRequire } from 'node:module';
import path from 'node:path';
import Sqlite13 from 'better-sqlite3-13';

const require = createRequire(import.meta.url);
const major = Number(process.versions.node.split('.')[0]);

/** The package the running Node loads: `better-sqlite3-13` (an alias of 13.x) from Node 22, else 12.x. */
export const SQLITE_PACKAGE = major >= 22 ? 'better-sqlite3-13' : 'better-sqlite3';

/**
 * 13's JavaScript is in berthd's bundle (it loads with the rest, from the code
 * cache: ~8 ms less to a first answer than compiling it from node_modules),
 * and its addon is the one the package itself would pick, found from its own
 * directory (the bundle's is not the package's).
 */
function database13(): typeof BetterSqlite3 {
  // The package exports no path to its binding finder: reach it from its package.json.
  const dir = path.dirname(require.resolve('better-sqlite3-13/package.json'));
  const addon = require(path.join(dir, 'lib/binding.js')).getBinding();
  const Bundled = Sqlite13 as unknown as new (file: string, options: object) => BetterSqlite3.Database;
  return function open(file: string) {
    return new Bundled(file, { nativeBinding: addon });
  } as unknown as typeof BetterSqlite3;
}

const Database: typeof BetterSqlite3 = major >= 22 ? database13() : require(SQLITE_PACKAGE);
export default Database;
export type { Database as Db } from 'better-sqlite3';
