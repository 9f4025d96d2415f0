// HostConfig.Runtime: which of the daemon's OCI runtimes (daemon.json
// `runtimes`, `default-runtime`) runs the container. As dockerd: none named is
// the default's name, stored so inspect shows it and every later runtime
// command on the container uses it (runtime/runtime.ts useRuntimeNames); a
// name the daemon does not have is refused in dockerd's words
// (daemon_unix.go verifyPlatformContainerSettings).
import { invalidParameter } from '../../../errors.js';

/** The daemon's runtimes, by name, and the default's name. */
export interface RuntimeNames {
  default: string;
  names: readonly string[];
}

/** A daemon of runc alone, the default's default. */
export const RUNC_ONLY: RuntimeNames = { default: 'runc', names: ['runc'] };

/** dockerd knows runc even when daemon.json names other runtimes. */
const BUILT_IN = 'runc';

/** The runtime a new container is stored with. */
export function containerRuntime(asked: string | undefined, runtimes: RuntimeNames): string {
  const name = asked || runtimes.default;
  if (name !== BUILT_IN && !runtimes.names.includes(name)) {
    throw invalidParameter(`Unknown runtime specified ${name}`);
  }
  return name;
}
