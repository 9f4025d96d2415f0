// A pseudo-terminal for the docker CLI's -it cases: a detached tmux session on
// a private tmux server, driven by send-keys and read by capture-pane.
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { waitFor } from './daemon.js';

const run = promisify(execFile);
let counter = 0;

export interface Terminal {
  /** Types text (tmux key names allowed: Enter, C-p …), each argument as one key or literal string. */
  keys(...keys: string[]): Promise<void>;
  /** The visible screen, trailing blank lines dropped. */
  screen(): Promise<string>;
  /** Waits until the screen matches. */
  waitFor(pattern: RegExp, what?: string, timeoutMs?: number): Promise<string>;
  resize(width: number, height: number): Promise<void>;
  close(): Promise<void>;
}

/**
 * Runs `command` (a shell line) in a width×height terminal. When it ends, the
 * pane prints `[exit N]` and stays, so the exit status can be read.
 */
export async function openTerminal(
  command: string,
  env: Record<string, string>,
  width = 100,
  height = 30,
): Promise<Terminal> {
  const server = `berth-test-${process.pid}-${++counter}`;
  const tmux = (...args: string[]) =>
    run('tmux', ['-L', server, '-f', '/dev/null', ...args], { env: { ...process.env, ...env } });
  const envArgs = Object.entries(env)
    .map(([k, v]) => `${k}=${shellQuote(v)}`)
    .join(' ');
  const line = `env ${envArgs} ${command}; echo "[exit $?]"; sleep 600`;
  await tmux('new-session', '-d', '-s', 'main', '-x', String(width), '-y', String(height), line);
  const term: Terminal = {
    async keys(...keys) {
      for (const k of keys) {
        if (/^(Enter|C-[a-z]|Escape|Tab)$/.test(k)) await tmux('send-keys', '-t', 'main', k);
        else await tmux('send-keys', '-t', 'main', '-l', k);
      }
    },
    async screen() {
      const { stdout } = await tmux('capture-pane', '-p', '-t', 'main');
      return stdout.replace(/\n+$/, '\n');
    },
    async waitFor(pattern, what = String(pattern), timeoutMs = 15_000) {
      let last = '';
      try {
        return await waitFor(
          async () => {
            last = await term.screen();
            return pattern.test(last) ? last : undefined;
          },
          what,
          timeoutMs,
          50,
        );
      } catch (e) {
        throw new Error(`${(e as Error).message}\n--- screen ---\n${last}`);
      }
    },
    async resize(w, h) {
      await tmux('resize-window', '-t', 'main', '-x', String(w), '-y', String(h));
    },
    async close() {
      await tmux('kill-server').catch(() => undefined);
    },
  };
  return term;
}

const shellQuote = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;
