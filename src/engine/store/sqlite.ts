// The SQLite binding, chosen by Node line. better-sqlite3 12 is built against
// the running Node's own headers; on Node 24 those make its statements remove
// an environment cleanup hook when collected, and a collection at teardown
// aborts the process. 13 is built on Node-API and ships its own binaries, but
// needs Node 22 (on Node 20 it crashes at the first query). So: 13 from Node 22
// on, 12 before. The two have the same API; the types are 12's.
import type BetterSqlite3 from 'better-sqlite3';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const major = Number(process.versions.node.split('.')[0]);

/** The package the running Node loads: `better-sqlite3-13` (an alias of 13.x) from Node 22, else 12.x. */
export const SQLITE_PACKAGE = major >= 22 ? 'better-sqlite3-13' : 'better-sqlite3';

const Database: typeof BetterSqlite3 = require(SQLITE_PACKAGE);
export default Database;
export type { Database as Db } from 'better-sqlite3';
