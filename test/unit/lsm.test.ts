import { describe, expect, it } from 'vitest';
import { refuseUnappliedSecurityOptions } from '../../src/engine/containers/create/lsm.js';

const refusal = (opts: string[], host: { apparmor: boolean; selinux: boolean }) => {
  try {
    refuseUnappliedSecurityOptions(opts, host);
    return undefined;
  } catch (e) {
    return (e as Error).message;
  }
};

describe('--security-opt apparmor= and label=', () => {
  it('are refused where the host has the module (dockerd would apply them), taken where it has none (dockerd ignores them)', () => {
    expect(refusal(['apparmor=docker-default'], { apparmor: true, selinux: false })).toBe(
      '--security-opt apparmor=docker-default is not supported by berth yet: it applies no AppArmor profile',
    );
    expect(refusal(['label=type:svirt_lxc_net_t'], { apparmor: false, selinux: true })).toMatch(/no SELinux label$/);
    const none = { apparmor: false, selinux: false };
    expect(refusal(['apparmor=docker-default', 'label=type:svirt_lxc_net_t'], none)).toBeUndefined();
    // No confinement is what berth gives: taken everywhere.
    expect(refusal(['apparmor=unconfined', 'label=disable'], { apparmor: true, selinux: true })).toBeUndefined();
  });
});
