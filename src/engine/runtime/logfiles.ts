// A container's log files on disk: the live <log> conmon writes, and the
// rotated <log>.1 (newest) … <log>.N (oldest), each gzipped as <log>.N.gz
// when compressed, as dockerd's json-file keeps them (loggerutils/logfile.go).
//
// Rotation renames, it never copies or truncates: <log> becomes <log>.1 while
// conmon still writes into it, and conmon is then asked to reopen (conmon.ts
// CTL_REOPEN_LOG), which starts a new <log>. So a rotated file is complete
// once <log> exists again, and nothing is lost or reordered. A rotated file is
// compressed only then: written to <name>.gz, the plain one removed after.
// Readers prefer a plain file to its .gz (which may still be being written).
//
// Renames and removals here, and a reader's opening of the set of files, take
// turns (lockLog): a reader never sees the names shift between opening two
// files. Once open, a file reads on whatever it is renamed to. A reader that
// follows the log, and was slower than a few rotations, finds the files newer
// than its own by the rotations this process made since (rotatedAfter).
import { createWriteStream } from 'node:fs';
import { open, readdir, rename, rm, stat } from 'node:fs/promises';
import path from 'node:path';
import { pipeline } from 'node:stream/promises';
import { zlib } from '../os/zlib.js';

export interface RotatedFile {
  /** 1 is the newest. */
  index: number;
  path: string;
  compressed: boolean;
  /** A plain file's inode (a reader following the log finds where its file went). */
  ino?: number;
}

const locks = new Map<string, Promise<unknown>>();

/** The rotations of each log made by this process: how many, and the number of each live file's (by inode). */
const rotations = new Map<string, { count: number; seqOf: Map<number, number> }>();

/** Whether something (a rotation, a reader opening the files) holds the log now. */
export function logLocked(log: string): boolean {
  return locks.has(log);
}

/** Runs fn once the log's previous holder is done; renames and opens of one log's files never interleave. */
export function lockLog<T>(log: string, fn: () => Promise<T>): Promise<T> {
  const run = (locks.get(log) ?? Promise.resolve()).then(fn);
  const held = run.catch(() => undefined);
  locks.set(log, held);
  void held.then(() => {
    if (locks.get(log) === held) locks.delete(log);
  });
  return run;
}

/** The log's rotated files, oldest first; for an index with a plain file and a .gz, the plain one. */
export async function rotatedFiles(log: string): Promise<RotatedFile[]> {
  const dir = path.dirname(log);
  const prefix = `${path.basename(log)}.`;
  const byIndex = new Map<number, RotatedFile>();
  for (const name of await readdir(dir).catch(() => [] as string[])) {
    if (!name.startsWith(prefix)) continue;
    const m = /^(\d+)(\.gz)?$/.exec(name.slice(prefix.length));
    if (!m) continue;
    const index = Number(m[1]);
    const compressed = m[2] !== undefined;
    if (index < 1 || (compressed && byIndex.has(index))) continue;
    byIndex.set(index, { index, path: path.join(dir, name), compressed });
  }
  const files = [...byIndex.values()].sort((a, b) => b.index - a.index);
  await Promise.all(
    files
      .filter((f) => !f.compressed)
      .map(async (f) => {
        const st = await stat(f.path).catch(() => null);
        if (st) f.ino = st.ino;
      }),
  );
  return files;
}

const suffixes = (index: number) => [`.${index}`, `.${index}.gz`];

/**
 * Renames the live log to <log>.1, the rotated files one index up, and drops
 * those past maxFiles - 1 (dockerd's max-file counts the live file). The
 * caller asks conmon to reopen next. Call under lockLog.
 */
export async function shiftLogs(log: string, maxFiles: number): Promise<void> {
  const keep = Math.max(maxFiles - 1, 0);
  const files = await rotatedFiles(log);
  const top = Math.max(keep, ...files.map((f) => f.index));
  // Whatever would land past the last kept index goes, .gz and plain alike.
  for (let i = top; i >= keep; i--) await removeIndex(log, i);
  for (let i = keep - 1; i >= 1; i--) {
    for (const sfx of suffixes(i)) await renameIfThere(`${log}${sfx}`, `${log}${sfx.replace(`.${i}`, `.${i + 1}`)}`);
  }
  const live = await stat(log).catch(() => null);
  if (keep >= 1) await renameIfThere(log, `${log}.1`);
  else await rm(log, { force: true });
  if (live) noteRotation(log, live.ino, keep);
}

function noteRotation(log: string, ino: number, keep: number): void {
  const r = rotations.get(log) ?? { count: 0, seqOf: new Map<number, number>() };
  rotations.set(log, r);
  r.count++;
  r.seqOf.set(ino, r.count);
  for (const [i, seq] of r.seqOf) if (seq <= r.count - keep) r.seqOf.delete(i);
}

/** The log is gone (its container removed): its rotations need no remembering. */
export function forgetLog(log: string): void {
  rotations.delete(log);
}

/**
 * Of the rotated files (oldest first), those newer than the file of inode
 * `ino`: by the rotations since that file's, when this process rotated it
 * (compressed, it has another inode); else by finding it among the plain
 * files. None when it cannot be found.
 */
export function rotatedAfter(log: string, ino: number, files: RotatedFile[]): RotatedFile[] {
  const r = rotations.get(log);
  const seq = r?.seqOf.get(ino);
  if (r && seq !== undefined) return files.filter((f) => f.index <= r.count - seq);
  const at = files.findIndex((f) => f.ino === ino);
  return at >= 0 ? files.slice(at + 1) : [];
}

async function removeIndex(log: string, index: number): Promise<void> {
  if (index < 1) return;
  await Promise.all(suffixes(index).map((sfx) => rm(`${log}${sfx}`, { force: true })));
}

async function renameIfThere(from: string, to: string): Promise<void> {
  await rename(from, to).catch((e: NodeJS.ErrnoException) => {
    if (e.code !== 'ENOENT') throw e;
  });
}

/**
 * Gzips the rotated files that are still plain. Only once conmon writes into
 * none of them: the live log exists again, or conmon has exited. A file that
 * a rotation renames meanwhile keeps its plain copy (readers take it), and is
 * compressed at its new index next time.
 */
export async function compressRotated(log: string): Promise<void> {
  for (const f of await rotatedFiles(log)) {
    if (!f.compressed) await compressFile(log, f.path);
  }
}

async function compressFile(log: string, file: string): Promise<void> {
  const gz = `${file}.gz`;
  const src = await open(file, 'r').catch(() => null);
  if (!src) return; // rotated away meanwhile
  try {
    const ino = (await src.stat()).ino;
    try {
      await pipeline(
        src.createReadStream({ autoClose: false }),
        zlib().createGzip(),
        createWriteStream(gz, { mode: 0o600 }),
      );
    } catch (e) {
      await rm(gz, { force: true });
      throw e;
    }
    // Under the lock: a reader that listed the plain file opens it, or finds the .gz whole.
    await lockLog(log, async () => {
      const now = await stat(file).catch(() => null);
      if (now?.ino === ino) await rm(file, { force: true });
      else await rm(gz, { force: true }); // renamed by a rotation: this .gz names another index now
    });
  } finally {
    await src.close();
  }
}
