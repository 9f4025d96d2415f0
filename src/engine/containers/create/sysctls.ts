// HostConfig.Sysctls: only the namespaced ones, and only where the container
// has the namespace of its own (dockerd's opts.ValidateSysctl and its
// host-namespace checks): a sysctl of the host's network or IPC namespace
// would change the host.
import { invalidParameter } from '../../../errors.js';

const IPC_SYSCTLS = new Set([
  'kernel.msgmax',
  'kernel.msgmnb',
  'kernel.msgmni',
  'kernel.sem',
  'kernel.shmall',
  'kernel.shmmax',
  'kernel.shmmni',
  'kernel.shm_rmid_forced',
]);

const isIpc = (name: string) => IPC_SYSCTLS.has(name) || name.startsWith('fs.mqueue.');

export function checkSysctls(sysctls: Record<string, string>, modes: { network: string; ipc: string }): void {
  for (const name of Object.keys(sysctls)) {
    if (name.startsWith('net.')) {
      if (modes.network === 'host') throw invalidParameter(`sysctl "${name}" not allowed in host network namespace`);
    } else if (isIpc(name)) {
      if (modes.ipc === 'host' || modes.ipc.startsWith('container:')) {
        throw invalidParameter(
          `sysctl "${name}" is not allowed with IpcMode ${modes.ipc}: it is not the container's own namespace`,
        );
      }
    } else {
      throw invalidParameter(`sysctl '${name}' is not allowed`);
    }
  }
}
