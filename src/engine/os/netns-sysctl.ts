// A network namespace's sysctls (/proc/sys/net/...), written from berthd's
// own thread: the file is opened by a short-lived thread that has joined the
// namespace (native netnsOpenWrite), and the descriptor keeps naming that
// namespace's setting. The kernel has no rtnetlink message for IPv6's
// per-interface settings, so this is the one way in without a process.
import { closeSync, writeSync } from 'node:fs';
import { native } from './native.js';

/** Writes `value` to /proc/sys/net/<parts joined by '/'> inside the namespace at nsPath (an interface name may hold dots). */
export function writeNetnsSysctl(nsPath: string, parts: string[], value: string): void {
  if (parts.some((p) => !/^[A-Za-z0-9_.-]+$/.test(p) || p === '.' || p === '..')) {
    throw new Error(`not a net sysctl: ${parts.join('/')}`);
  }
  const fd = native.netnsOpenWrite(nsPath, `/proc/sys/net/${parts.join('/')}`);
  try {
    writeSync(fd, `${value}\n`);
  } finally {
    closeSync(fd);
  }
}
