// The json-file log at dockerd's place, <container dir>/<id>-json.log, for
// containers whose driver is json-file: what inspect's LogPath names, and what
// kubelet (through cri-dockerd's link), crictl and node log shippers read
// directly. conmon's k8s-file ctr.log stays the record (`docker logs`,
// attach and rotation read it; it survives a crash of berthd); this file is
// a copy that berthd keeps (runtime/logmirror.ts): followed while the
// container runs, completed before its exit is reported, its files rotated
// with the record's, resumed where it stopped after a restart of berthd.
// local and none have no such file (dockerd shows no LogPath for them).
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import type { Logger } from '../../../log.js';
import { forgetLog } from '../../runtime/logfiles.js';
import { LogMirror, type MirrorFiles } from '../../runtime/logmirror.js';
import { logDriver, type LogPolicy, logPolicy, rotatedByBerth } from '../create/logconfig.js';
import type { Container } from '../container.js';
import type { ContainerLookup } from '../lookup.js';

/** dockerd's name for a container's json-file log. */
export const jsonLogPath = (c: Pick<Container, 'id' | 'bundleDir'>): string =>
  path.join(c.bundleDir, `${c.id}-json.log`);

/**
 * inspect's LogPath: json-file's file, once the container was first started
 * (dockerd sets it when its logger starts; before, it shows none).
 */
export const visibleLogPath = (c: Container): string =>
  logDriver(c) === 'json-file' && (c.startedAt > 0 || c.finishedAt > 0) ? jsonLogPath(c) : '';

/**
 * The copy's files as the record's policy keeps them: rotated alike when
 * berth rotates; with conmon's cap (one file), dockerd's max-file=1, which
 * keeps the last file as <log>.1; with the daemon's cap (no max-size: dockerd
 * would never rotate), started afresh.
 */
function mirrorFiles(c: Container, p: LogPolicy): MirrorFiles {
  const base = { log: c.logPath, mirror: jsonLogPath(c) };
  if (rotatedByBerth(p)) return { ...base, keep: p.maxFiles, compress: p.compress };
  return { ...base, keep: p.maxSize !== undefined ? 2 : 1, compress: false };
}

export class JsonLogs {
  private readonly mirrors = new Map<string, LogMirror>();

  constructor(
    private readonly lookup: ContainerLookup,
    private readonly log: Logger,
  ) {}

  /** A json-file container's file exists, empty, from its create on. */
  async created(c: Container): Promise<void> {
    if (logDriver(c) === 'json-file') await writeFile(jsonLogPath(c), '', { flag: 'a', mode: 0o640 });
  }

  /** The container runs (started, or found running at berthd's start): its copy catches up and follows. */
  started(id: string): void {
    if (this.mirrors.has(id)) return;
    const m = this.mirrorOf(id);
    if (!m) return;
    this.mirrors.set(id, m);
    m.follow();
  }

  /** The container's process has ended: resolves once its copy holds every record. */
  async stopped(id: string): Promise<void> {
    const m = this.mirrors.get(id) ?? this.mirrorOf(id);
    this.mirrors.delete(id);
    await m?.finish();
  }

  /** The container is removed, its files with it. */
  async removed(c: Container): Promise<void> {
    const m = this.mirrors.get(c.id);
    this.mirrors.delete(c.id);
    await m?.close();
    forgetLog(jsonLogPath(c));
  }

  /** berthd stops: following stops; the next berthd resumes each copy where it stopped. */
  async close(): Promise<void> {
    const all = [...this.mirrors.values()];
    this.mirrors.clear();
    await Promise.all(all.map((m) => m.close()));
  }

  private mirrorOf(id: string): LogMirror | null {
    const c = this.lookup.byId(id);
    if (!c || logDriver(c) !== 'json-file') return null;
    let p: LogPolicy;
    try {
      p = logPolicy(c.hostConfig.LogConfig);
    } catch {
      return null; // a LogConfig an older berth took: its start said why
    }
    return new LogMirror(mirrorFiles(c, p), (err) => this.log.warn({ err, id }, 'json-file log copy failed'));
  }
}
