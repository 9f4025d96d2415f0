// `--security-opt apparmor=…` and `label=…` as dockerd takes them: applied
// only where the host has the security module (oci_linux.go WithApparmor:
// apparmor.IsEnabled(); go-selinux's InitLabels does nothing when SELinux is
// off), taken and ignored elsewhere. berth loads no AppArmor profile and sets
// no SELinux label: on a host with the module it refuses what dockerd would
// apply, and takes, as dockerd does, what asks for no confinement.
import { existsSync, readFileSync } from 'node:fs';
import { invalidParameter } from '../../../errors.js';

/** Which of the two modules the host runs, as runc's and go-selinux's checks read them. */
export interface HostModules {
  apparmor: boolean;
  selinux: boolean;
}

let cached: HostModules | undefined;

function readModules(): HostModules {
  const apparmor =
    existsSync('/sys/kernel/security/apparmor') &&
    (() => {
      try {
        return readFileSync('/sys/module/apparmor/parameters/enabled', 'utf8').startsWith('Y');
      } catch {
        return false;
      }
    })();
  return { apparmor, selinux: existsSync('/sys/fs/selinux/enforce') };
}

/** The host's modules, read once. */
export const hostModules = (): HostModules => (cached ??= readModules());

/** Refuses an apparmor= or label= option the host would apply under dockerd and berth cannot. */
export function refuseUnappliedSecurityOptions(opts: readonly string[], host: HostModules = hostModules()): void {
  for (const o of opts) {
    const m = /^(apparmor|label)[:=](.*)$/.exec(o);
    if (!m) continue;
    const apparmor = m[1] === 'apparmor';
    const none = apparmor ? m[2] === 'unconfined' : m[2] === 'disable';
    if (!none && (apparmor ? host.apparmor : host.selinux)) {
      throw invalidParameter(
        `--security-opt ${o} is not supported by berth yet: it applies no ${apparmor ? 'AppArmor profile' : 'SELinux label'}`,
      );
    }
  }
}
