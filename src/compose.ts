// The composition root: the only place that builds the parts and wires them.
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { randomUUID } from 'node:crypto';
import path from 'node:path';
import type { Config } from './config.js';
import type { Engine } from './engine/index.js';
import { openDb, type Db } from './engine/store/db.js';
import { SystemService } from './engine/system.js';
import type { Logger } from './log.js';

export interface Built {
  engine: Engine;
  db: Db;
  close(): Promise<void>;
}

/** A stable id for this daemon's data root, as dockerd's engine-id. */
function daemonId(dataRoot: string): string {
  const file = path.join(dataRoot, 'engine-id');
  try {
    return readFileSync(file, 'utf8').trim();
  } catch {
    const id = randomUUID();
    writeFileSync(file, `${id}\n`, { mode: 0o600 });
    return id;
  }
}

export async function buildEngine(config: Config, _logger: Logger): Promise<Built> {
  mkdirSync(config.dataRoot, { recursive: true, mode: 0o710 });
  const db = openDb(path.join(config.dataRoot, 'berth.db'));
  const system = new SystemService(config, db, daemonId(config.dataRoot));
  const engine: Engine = { system };
  return {
    engine,
    db,
    async close() {
      db.close();
    },
  };
}
