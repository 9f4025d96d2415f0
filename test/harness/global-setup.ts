// Once for the whole run (vitest's globalSetup): the parent cgroups the tests'
// daemons leave behind go when the run ends. berthd puts containers under its
// cgroup parent (`/berth` by default) in every v1 hierarchy; runc removes a
// container's own cgroup, and the empty parent stays, as dockerd's `/docker`
// does. The many daemons of a run share it, so none of them can remove it while
// another may be creating a container under it; after the last one, the run can.
import { existsSync, readdirSync, rmdirSync } from 'node:fs';
import path from 'node:path';

const ROOT = '/sys/fs/cgroup';
const PARENT = 'berth';

const parents = (): string[] =>
  existsSync(ROOT)
    ? readdirSync(ROOT)
        .map((h) => path.join(ROOT, h, PARENT))
        .filter((p) => existsSync(p))
    : [];

export default function setup(): () => void {
  const before = new Set(parents());
  return () => {
    for (const p of parents()) {
      if (before.has(p)) continue;
      try {
        rmdirSync(p); // only an empty cgroup can go: one still in use stays
      } catch {
        // a container still runs under it (a test that leaks one fails on its own)
      }
    }
  };
}
