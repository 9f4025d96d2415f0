// Signal names and numbers as dockerd accepts them. A leaf: imports nothing of the engine's folders.
import os from 'node:os';
import { invalidParameter } from '../errors.js';

/**
 * Linux signal numbers by name (`SIGKILL` → 9), with the real-time names
 * dockerd's signal map has beside Node's: SIGRTMIN, SIGRTMIN+1 … +15,
 * SIGRTMAX-14 … -1, SIGRTMAX (systemd images stop with SIGRTMIN+3). Numbered
 * as glibc's, whose SIGRTMIN is 34 (the kernel's 32 and 33 are its own).
 */
export const SIGNALS: Readonly<Record<string, number>> = (() => {
  const map: Record<string, number> = { ...(os.constants.signals as Record<string, number>) };
  map.SIGRTMIN = 34;
  for (let i = 1; i <= 15; i++) map[`SIGRTMIN+${i}`] = 34 + i;
  for (let i = 14; i >= 1; i--) map[`SIGRTMAX-${i}`] = 64 - i;
  map.SIGRTMAX = 64;
  return map;
})();

const NAMES = new Map<number, string>();
for (const [name, n] of Object.entries(SIGNALS)) if (!NAMES.has(n)) NAMES.set(n, name);

/** `9`, `KILL`, `SIGKILL`, `rtmin+3` → the canonical name; anything else is refused as dockerd refuses it. */
export function normalizeSignal(sig: string): string {
  const s = sig.trim().toUpperCase();
  if (/^\d+$/.test(s)) {
    const name = NAMES.get(Number(s));
    if (!name) throw invalidParameter(`Invalid signal: ${sig}`);
    return name;
  }
  const name = s.startsWith('SIG') ? s : `SIG${s}`;
  if (!(name in SIGNALS)) throw invalidParameter(`Invalid signal: ${sig}`);
  return name;
}

/** The number of a signal given as `normalizeSignal` takes it. */
export const signalNumber = (sig: string): number => SIGNALS[normalizeSignal(sig)]!;
