// Extended attributes of a path itself (a final symlink is not followed), which
// Node cannot read or write: layers carry them between tar headers and files,
// and overlayfs marks opaque directories with one.
import { native } from './native.js';

export function lsetxattr(path: string, name: string, value: Buffer): void {
  native.lsetxattr(path, name, value);
}

/** The attribute's value, or null when the file has no such attribute. */
export function lgetxattr(path: string, name: string): Buffer | null {
  return native.lgetxattr(path, name);
}

export function llistxattr(path: string): string[] {
  return native.llistxattr(path);
}
