// Small helpers for the conmon processes berthd spawns (containers and execs).
import { readFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import type { Readable } from 'node:stream';

/** conmon's PATH: it finds nothing by name, but runc's hooks might. */
export const CONMON_ENV_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

export async function readPidFile(file: string): Promise<number | null> {
  const text = await readFile(file, 'utf8').catch(() => '');
  const pid = Number.parseInt(text.trim(), 10);
  return Number.isInteger(pid) && pid > 0 ? pid : null;
}

/** Accumulates a stream's text (bounded) for error messages. */
export function collectText(stream: Readable | null): () => string {
  let text = '';
  stream?.setEncoding('utf8');
  stream?.on('data', (c: string) => {
    if (text.length < 8192) text += c;
  });
  stream?.on('error', () => {});
  return () => text.trim();
}

/** The last error runc logged (JSON lines, --log-format json) in `file`, if any. */
export async function runcLogError(file: string): Promise<string | null> {
  const text = await readFile(file, 'utf8').catch(() => '');
  const errors = text
    .split('\n')
    .filter(Boolean)
    .map((l) => {
      try {
        return JSON.parse(l) as { level?: string; msg?: string };
      } catch {
        return {};
      }
    })
    .filter((r) => r.level === 'error' && r.msg);
  return errors.at(-1)?.msg ?? null;
}

/**
 * Whether process `pid` has ended: gone, or a zombie its parent (conmon) has
 * not reaped yet. No pid (never started) counts as ended.
 */
export function processEnded(pid: number | undefined): boolean {
  if (!pid || pid <= 0) return true;
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'latin1');
    const state = stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
    return state === 'Z' || state === 'X';
  } catch {
    return true;
  }
}
