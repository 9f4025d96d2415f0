// Names found in layer tars, cleaned before they come near the filesystem.
//
// A tar entry's name is attacker-controlled text. We treat it the way a
// process chrooted into the layer would: a leading `/` means the layer root,
// `..` can never climb above the root (it is clamped there, as containerd
// does), and `.`/empty components vanish. What comes out is a list of plain
// components, each safe to join to a directory we have verified ourselves.
import { invalidParameter } from '../../errors.js';

/** Linux PATH_MAX: longer names cannot be created anyway, and refusing them early bounds our work. */
const MAX_PATH_BYTES = 4096;
/** Linux NAME_MAX for ext4/xfs/overlayfs. */
export const MAX_NAME_BYTES = 255;

/** overlayfs / OCI whiteout markers as they appear in layer tars. */
export const WHITEOUT_PREFIX = '.wh.';
export const WHITEOUT_META_PREFIX = '.wh..wh.';
export const WHITEOUT_OPAQUE = '.wh..wh..opq';

const byteLength = (s: string) => Buffer.byteLength(s, 'utf8');

/** Throws unless `raw` is a name we are willing to resolve at all (length bounds, no NUL). */
export function checkRawName(raw: string, what: string): void {
  if (raw.includes('\0')) throw invalidParameter(`${what} ${JSON.stringify(raw)} contains a NUL byte`);
  if (byteLength(raw) > MAX_PATH_BYTES) {
    throw invalidParameter(`${what} is longer than ${MAX_PATH_BYTES} bytes: ${JSON.stringify(raw.slice(0, 64))}...`);
  }
}

/**
 * Lexically cleans a tar name into components below the layer root.
 * `/a/./b/../c` → [a, c]; `../../x` → [x]; `/` or `.` → [] (the root itself).
 */
export function cleanComponents(raw: string, what = 'tar entry name'): string[] {
  checkRawName(raw, what);
  const out: string[] = [];
  for (const c of raw.split('/')) {
    if (c === '' || c === '.') continue;
    if (c === '..') {
      out.pop(); // clamped: popping the empty root is a no-op
      continue;
    }
    if (byteLength(c) > MAX_NAME_BYTES) {
      throw invalidParameter(
        `${what} has a component longer than ${MAX_NAME_BYTES} bytes: ${JSON.stringify(raw.slice(0, 64))}`,
      );
    }
    out.push(c);
  }
  return out;
}

/** Splits a symlink's target text into components to be walked from some directory; `..` is kept for the walker. */
export function linkComponents(target: string): string[] {
  return target.split('/').filter((c) => c !== '' && c !== '.');
}

export type WhiteoutKind =
  | { kind: 'none' }
  | { kind: 'opaque' }
  | { kind: 'meta' } // other `.wh..wh.*` names: aufs bookkeeping, meaningless on overlayfs
  | { kind: 'whiteout'; target: string };

/** Classifies a cleaned base name; throws for whiteouts that could only be an attack. */
export function classifyWhiteout(base: string, raw: string): WhiteoutKind {
  if (!base.startsWith(WHITEOUT_PREFIX)) return { kind: 'none' };
  if (base === WHITEOUT_OPAQUE) return { kind: 'opaque' };
  if (base.startsWith(WHITEOUT_META_PREFIX)) return { kind: 'meta' };
  const target = base.slice(WHITEOUT_PREFIX.length);
  // `.wh.` `.wh..` `.wh...` would delete the directory itself or its parent (containerd's errInvalidArchive).
  if (target === '' || target === '.' || target === '..' || target.includes('/')) {
    throw invalidParameter(`invalid whiteout name in layer archive: ${JSON.stringify(raw)}`);
  }
  return { kind: 'whiteout', target };
}

/** Joins cleaned components back into a relative path ('' for the root). */
export const joinRel = (parts: readonly string[]): string => parts.join('/');
