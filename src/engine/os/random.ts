// Random bytes for the ids a fresh data root makes as berthd starts (its
// engine-id, the predefined networks'), read from the kernel's source as
// node:crypto's are: node:crypto itself is ~8 ms of loading that a start can
// spare (docs/decisions/performance.md, "Start-up, second pass"); everything later uses it.
import { closeSync, openSync, readSync } from 'node:fs';

function randomBytes(bytes: number): Buffer {
  const buf = Buffer.alloc(bytes);
  const fd = openSync('/dev/urandom', 'r');
  try {
    for (let got = 0; got < bytes; ) got += readSync(fd, buf, got, bytes - got, null);
  } finally {
    closeSync(fd);
  }
  return buf;
}

export const randomHex = (bytes: number): string => randomBytes(bytes).toString('hex');

/** A random (version 4) UUID, as crypto.randomUUID makes. */
export function randomUuid(): string {
  const b = randomBytes(16);
  b[6] = (b[6]! & 0x0f) | 0x40;
  b[8] = (b[8]! & 0x3f) | 0x80;
  const h = b.toString('hex');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}
