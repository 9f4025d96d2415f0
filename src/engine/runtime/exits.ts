// Container exits, as conmon reports them: when the container's init exits,
// conmon writes its status as decimal text to <exit-dir>/<id> (a temp file
// renamed into place, so a visible file is always complete). The status is
// already shell-style, 128+n for a death by signal n (137 for SIGKILL), which
// is what dockerd reports. One inotify watch (fs.watch) on the directory
// covers every container; readExit() finds exits that happened while berthd
// was not running.
import { EventEmitter } from 'node:events';
import { watch, type FSWatcher } from 'node:fs';
import { mkdir, readFile, readdir, stat } from 'node:fs/promises';
import path from 'node:path';
import { removeFile } from '../os/files.js';

export interface ContainerExit {
  id: string;
  exitCode: number;
}

/** conmon writes -1 when it could not learn the status; dockerd has no such code, so it reads as 255. */
const UNKNOWN_EXIT = 255;

/** Exit file text → dockerd-style exit code. */
function parseExitStatus(text: string): number | null {
  const trimmed = text.trim();
  if (!/^-?\d+$/.test(trimmed)) return null;
  const n = Number(trimmed);
  return n < 0 || n > 255 ? UNKNOWN_EXIT : n;
}

/** GLib's temp files are "<id>.XXXXXX"; container ids never hold a dot-suffix like that. */
const isTempName = (name: string) => /\.[A-Za-z0-9]{6}$/.test(name);

export interface ExitWatcherEvents {
  exit: [ContainerExit];
  error: [Error];
}

export class ExitWatcher extends EventEmitter<ExitWatcherEvents> {
  private watcher: FSWatcher | undefined;
  /** The exit file last reported per id (inode and mtime: inodes are reused), so one file is reported once. */
  private readonly reported = new Map<string, string>();

  constructor(readonly exitDir: string) {
    super();
  }

  /** Starts watching (until close()); exits already on disk are not emitted (use pending() for those). */
  async start(): Promise<void> {
    if (this.watcher) return;
    await mkdir(this.exitDir, { recursive: true, mode: 0o700 });
    this.watcher = watch(this.exitDir, (_event, name) => {
      if (name && !isTempName(name)) void this.check(name);
    });
    // An 'error' nobody listens to would throw; the daemon subscribes and logs.
    this.watcher.on('error', (e) => this.listenerCount('error') > 0 && this.emit('error', e));
  }

  close(): void {
    this.watcher?.close();
    this.watcher = undefined;
  }

  /** The recorded exit of a container, or null when conmon has written none (it still runs, or never ran). */
  async readExit(id: string): Promise<number | null> {
    const text = await readFile(path.join(this.exitDir, id), 'utf8').catch(() => null);
    return text === null ? null : parseExitStatus(text);
  }

  /** When conmon recorded the container's exit (ms since the epoch), or null when it has recorded none. */
  async exitedAt(id: string): Promise<number | null> {
    return stat(path.join(this.exitDir, id)).then(
      (st) => Math.floor(st.mtimeMs),
      () => null,
    );
  }

  /** Every exit on disk, e.g. containers that stopped while berthd was down. */
  async pending(): Promise<ContainerExit[]> {
    const names = (await readdir(this.exitDir).catch(() => [] as string[])).filter((n) => !isTempName(n));
    const exits = await Promise.all(names.map(async (id) => ({ id, exitCode: await this.readExit(id) })));
    return exits.filter((e): e is ContainerExit => e.exitCode !== null);
  }

  /**
   * Resolves with the container's exit code once conmon has written it,
   * whether that already happened or happens later.
   */
  waitExit(id: string, signal?: AbortSignal): Promise<number> {
    return new Promise((resolve, reject) => {
      const onExit = (e: ContainerExit) => {
        if (e.id === id) done(() => resolve(e.exitCode));
      };
      const onAbort = () => done(() => reject(signal?.reason ?? new Error('aborted')));
      const done = (settle: () => void) => {
        this.off('exit', onExit);
        signal?.removeEventListener('abort', onAbort);
        settle();
      };
      if (signal?.aborted) return onAbort();
      this.on('exit', onExit);
      signal?.addEventListener('abort', onAbort, { once: true });
      // After subscribing, so an exit landing in between is not lost.
      void this.readExit(id).then((code) => {
        if (code !== null) done(() => resolve(code));
      });
    });
  }

  /** Forgets a container's exit (before it is started again, or when it is removed). */
  async clear(id: string): Promise<void> {
    this.reported.delete(id);
    await removeFile(path.join(this.exitDir, id));
  }

  private async check(id: string): Promise<void> {
    // Both at once: the file is renamed into place whole, so what is read is its text (a
    // replaced one shows by its inode: checked again when its own event comes).
    const [st, exitCode] = await Promise.all([
      stat(path.join(this.exitDir, id), { bigint: true }).catch(() => null),
      this.readExit(id),
    ]);
    if (!st?.isFile()) {
      this.reported.delete(id); // removed: the next file for this id is news
      return;
    }
    const key = `${st.ino}:${st.mtimeNs}`;
    if (exitCode === null || this.reported.get(id) === key) return;
    this.reported.set(id, key);
    this.emit('exit', { id, exitCode });
  }
}
