// Signal names and numbers as dockerd accepts them. A leaf: imports nothing of the engine's folders.
import os from 'node:os';
import { invalidParameter } from '../errors.js';

/** Linux signal numbers by name (`SIGKILL` → 9). */
export const SIGNALS = os.constants.signals as Record<string, number>;

/** `9`, `KILL`, `SIGKILL` → `SIGKILL`; unknown names are refused as dockerd refuses them. */
export function normalizeSignal(sig: string): string {
  const s = sig.trim().toUpperCase();
  if (/^\d+$/.test(s)) {
    const name = Object.entries(SIGNALS).find(([, n]) => n === Number(s))?.[0];
    if (!name) throw invalidParameter(`Invalid signal: ${sig}`);
    return name;
  }
  const name = s.startsWith('SIG') ? s : `SIG${s}`;
  if (!(name in SIGNALS)) throw invalidParameter(`Invalid signal: ${sig}`);
  return name;
}
