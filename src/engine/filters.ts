// Docker's list filters (`filters={"key":["value",…]}`), as the engine checks them.
import { invalidParameter } from '../errors.js';

export type Filters = Record<string, string[]>;

/** Refuses filter keys a list does not know, with dockerd's wording. */
export function checkFilters(filters: Filters, allowed: readonly string[]): void {
  for (const k of Object.keys(filters)) {
    if (!allowed.includes(k)) throw invalidParameter(`invalid filter '${k}'`);
  }
}

/** The single boolean a filter like `dangling=true` carries. */
export function boolFilter(filters: Filters, key: string): boolean | undefined {
  const vs = filters[key];
  if (!vs || vs.length === 0) return undefined;
  const v = vs[0]!.toLowerCase();
  if (v === 'true' || v === '1') return true;
  if (v === 'false' || v === '0') return false;
  throw invalidParameter(`invalid filter '${key}=${vs[0]}'`);
}

/** `label=key` or `label=key=value` against a label map; every given label must match. */
export function matchLabels(
  filters: Filters,
  labels: Record<string, string> | null | undefined,
  key = 'label',
): boolean {
  for (const want of filters[key] ?? []) {
    const eq = want.indexOf('=');
    const k = eq === -1 ? want : want.slice(0, eq);
    if (!labels || !(k in labels)) return false;
    if (eq !== -1 && labels[k] !== want.slice(eq + 1)) return false;
  }
  return true;
}

/** Go's path.Match: `*` and `?` do not cross `/`; `[...]` classes. */
export function globMatch(pattern: string, s: string): boolean {
  let re = '^';
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern[i]!;
    if (c === '*') re += '[^/]*';
    else if (c === '?') re += '[^/]';
    else if (c === '[') {
      const end = pattern.indexOf(']', i + 1);
      if (end === -1) return false;
      const body = pattern.slice(i + 1, end).replace(/^\^/, '!');
      re += `[${body.startsWith('!') ? `^${body.slice(1)}` : body}]`;
      i = end;
    } else if (c === '\\' && i + 1 < pattern.length) re += `\\${pattern[++i]}`;
    else re += c.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&');
  }
  return new RegExp(`${re}$`).test(s);
}

/** Seconds in a Go duration (`10m`, `1h30m`, `1.5h`), or undefined when it is not one. */
function goDurationSeconds(v: string): number | undefined {
  if (!/^(\d+(\.\d+)?(ns|us|µs|ms|s|m|h))+$/.test(v)) return undefined;
  const unit: Record<string, number> = { ns: 1e-9, us: 1e-6, µs: 1e-6, ms: 1e-3, s: 1, m: 60, h: 3600 };
  let total = 0;
  for (const m of v.matchAll(/(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)/g)) total += Number(m[1]) * unit[m[2]!]!;
  return total;
}

/** `until`: a unix timestamp, an RFC 3339 time, or a Go duration before now; in seconds. */
export function parseUntil(v: string): number {
  if (/^\d+(\.\d+)?$/.test(v)) return Number(v);
  const d = goDurationSeconds(v);
  if (d !== undefined) return Date.now() / 1000 - d;
  const t = Date.parse(v);
  if (Number.isNaN(t)) throw invalidParameter(`invalid filter 'until=${v}'`);
  return t / 1000;
}
