// runc's record of a container, <root>/<id>/state.json: the few fields berthd
// reads in it (at every start, exit and signal) without parsing the whole of
// it. Most of the file is the container's `config` (its seccomp rules alone
// are over 20 KB), whose parse cost a millisecond each time.
import { readFile } from 'node:fs/promises';
import path from 'node:path';

export interface RuncState {
  init_process_pid?: number;
  /** The init's start time in clock ticks (/proc/<pid>/stat field 22): a reused pid is not it. */
  init_process_start?: number;
  /** The container's cgroup in each hierarchy, by controller. */
  cgroup_paths?: Record<string, string>;
}

/**
 * The state's text without its `config`. libcontainer writes the top-level
 * fields in its State struct's order — id, init_process_pid,
 * init_process_start, created, config, rootless, cgroup_paths… — so `config`
 * is what lies between the first `,"config":` (the id and the times before it
 * cannot hold one) and the last `,"rootless":` (inside `config`, that text
 * could only be a string's, where its quotes are escaped). Whatever else the
 * file holds comes out null, and the caller parses it whole.
 */
function withoutConfig(text: string): string | null {
  const from = text.indexOf(',"config":');
  const to = text.lastIndexOf(',"rootless":');
  return from > 0 && to > from ? text.slice(0, from) + text.slice(to) : null;
}

/** The parsed state text (see withoutConfig), or null when it is not a state. */
export function parseRuncState(text: string): RuncState | null {
  const short = withoutConfig(text);
  for (const t of short === null ? [text] : [short, text]) {
    try {
      const parsed = JSON.parse(t) as unknown;
      if (parsed && typeof parsed === 'object') return parsed as RuncState;
    } catch {
      // the whole text next, if not yet
    }
  }
  return null;
}

/** A container's state under runc's root: null when there is none (or it cannot be read as one). */
export async function readRuncState(runcRoot: string, id: string): Promise<RuncState | null> {
  const text = await readFile(path.join(runcRoot, id, 'state.json'), 'utf8').catch(() => null);
  return text === null ? null : parseRuncState(text);
}
