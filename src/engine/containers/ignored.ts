// HostConfig fields dockerd on Linux takes and does nothing with: berth takes
// them too, since clients send them. Cgroup is read by no dockerd code at all;
// CpuCount serves Windows and is ignored on Linux; CpuPercent too, discarded
// with a warning (daemon_unix.go verifyPlatformContainerSettings). The IO
// maxima, also Windows', are refused on Linux (runconfig/hostconfig_unix.go
// validateQoS), as Isolation other than the default is (namespaces.ts).
import { invalidParameter } from '../../errors.js';
import { anyCase } from './fields.js';

/** Fields unsupported.ts lets pass: checkIgnored takes, discards or refuses them as dockerd on Linux does. */
export const IGNORED_ON_LINUX: readonly string[] = [
  'Cgroup',
  'CpuCount',
  'CpuPercent',
  'IOMaximumBandwidth',
  'IOMaximumIOps',
];

/** dockerd's refusals and warning for them (CpuPercent is then stored as 0, as dockerd stores it). */
export function checkIgnored(h: Record<string, unknown>, warnings: string[]): void {
  if (Number(anyCase(h, 'IOMaximumBandwidth') ?? 0) !== 0) {
    throw invalidParameter('Invalid QoS settings: linux does not support configuration of maximum bandwidth');
  }
  if (Number(anyCase(h, 'IOMaximumIOps') ?? 0) !== 0) {
    throw invalidParameter('Invalid QoS settings: linux does not support configuration of maximum IOPs');
  }
  if (Number(anyCase(h, 'CpuPercent') ?? 0) > 0)
    warnings.push('linux does not support CPU percent. Percent discarded.');
}
