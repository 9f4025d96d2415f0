// HostConfig fields that serve Windows containers only, as dockerd on Linux
// treats them: CpuCount is taken and ignored (nothing reads it on Linux),
// CpuPercent is taken and discarded with a warning
// (daemon_unix.go verifyPlatformContainerSettings), and the IO maxima are
// refused (runconfig/hostconfig_unix.go validateQoS). Isolation is
// namespaces.ts's: dockerd on Linux refuses any but the default.
import { invalidParameter } from '../../errors.js';
import { anyCase } from './fields.js';

/** Fields unsupported.ts lets pass: checkWindowsOnly takes, discards or refuses them as dockerd on Linux does. */
export const IGNORED_ON_LINUX: readonly string[] = ['CpuCount', 'CpuPercent', 'IOMaximumBandwidth', 'IOMaximumIOps'];

/** dockerd's refusals and warning for them (CpuPercent is then stored as 0, as dockerd stores it). */
export function checkWindowsOnly(h: Record<string, unknown>, warnings: string[]): void {
  if (Number(anyCase(h, 'IOMaximumBandwidth') ?? 0) !== 0) {
    throw invalidParameter('Invalid QoS settings: linux does not support configuration of maximum bandwidth');
  }
  if (Number(anyCase(h, 'IOMaximumIOps') ?? 0) !== 0) {
    throw invalidParameter('Invalid QoS settings: linux does not support configuration of maximum IOPs');
  }
  if (Number(anyCase(h, 'CpuPercent') ?? 0) > 0)
    warnings.push('linux does not support CPU percent. Percent discarded.');
}
