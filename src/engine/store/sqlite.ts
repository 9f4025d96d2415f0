// The SQLite binding: better-sqlite3 13, built on Node-API (one binary for Node 22
// and 24, shipped in the package: nothing is compiled at install).
import type BetterSqlite3 from 'better-sqlite3';
import Bundled from 'better-sqlite3';
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const require = createRequire(import.meta.url);

/**
 * Where the addon is, relative to berthd's bundle: written in when the bundle
 * is made (scripts/bundle.mjs), from the package's own choice. Undefined where
 * this module runs unbundled.
 */
declare const BERTH_SQLITE_ADDON: string | undefined;

/**
 * The package's JavaScript is in berthd's bundle (it loads with the rest, from
 * the code cache: ~8 ms less to a first answer than compiling it from
 * node_modules), and its addon is the one the package itself would pick, found
 * from its own directory (the bundle's is not the package's) when the first
 * database opens, not as the bundle loads. The bundle knows the addon's file
 * (finding it costs ~5 ms of a start: the package's resolution, its finder's
 * module and checks); a node_modules changed since is searched as before.
 */
function open(): typeof BetterSqlite3 {
  let addon: unknown;
  const load = () => {
    if (typeof BERTH_SQLITE_ADDON === 'string') {
      const file = fileURLToPath(new URL(BERTH_SQLITE_ADDON, import.meta.url));
      if (existsSync(file)) return require(file);
    }
    // The package exports no path to its binding finder: reach it from its package.json.
    const dir = path.dirname(require.resolve('better-sqlite3/package.json'));
    return require(path.join(dir, 'lib/binding.js')).getBinding();
  };
  const Db = Bundled as unknown as new (file: string, options: object) => BetterSqlite3.Database;
  return function openDatabase(file: string) {
    addon ??= load();
    return new Db(file, { nativeBinding: addon });
  } as unknown as typeof BetterSqlite3;
}

const Database: typeof BetterSqlite3 = open();
export default Database;
export type { Database as Db } from 'better-sqlite3';
