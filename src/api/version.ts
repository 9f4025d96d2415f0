// API versions: the supported range and dockerd's wording when a request is outside it.
import { invalidParameter } from '../errors.js';

export const MIN_API_VERSION = '1.24';
export const MAX_API_VERSION = '1.47';

/** Compares dotted versions numerically: -1, 0 or 1. */
export function compareVersions(a: string, b: string): number {
  const pa = a.split('.').map(Number);
  const pb = b.split('.').map(Number);
  for (let i = 0; i < Math.max(pa.length, pb.length); i++) {
    const d = (pa[i] ?? 0) - (pb[i] ?? 0);
    if (d !== 0) return d < 0 ? -1 : 1;
  }
  return 0;
}

export const versionBelow = (v: string, max: string) => compareVersions(v, max) < 0;

/** The versions found in range so far: each request's check is then one lookup. */
const inRange = new Set<string>();

/** Throws dockerd's 400 for a version outside the supported range. */
export function checkVersion(v: string): void {
  if (inRange.has(v)) return;
  if (compareVersions(v, MAX_API_VERSION) > 0) {
    throw invalidParameter(`client version ${v} is too new. Maximum supported API version is ${MAX_API_VERSION}`);
  }
  if (compareVersions(v, MIN_API_VERSION) < 0) {
    throw invalidParameter(
      `client version ${v} is too old. Minimum supported API version is ${MIN_API_VERSION}, please upgrade your client to a newer version`,
    );
  }
  // Bounded by what clients send: the range holds a few dozen versions, written a few ways each.
  if (inRange.size < 256) inRange.add(v);
}

const PREFIX = /^\/v([0-9][0-9.]*)(\/.*)$/;

/** Splits `/v1.41/containers/json` into the version and the unversioned path. */
export function splitVersion(url: string): { version: string | null; path: string } {
  const m = PREFIX.exec(url);
  return m ? { version: m[1]!, path: m[2]! } : { version: null, path: url };
}
