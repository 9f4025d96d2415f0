// HostConfig.MaskedPaths and ReadonlyPaths: the /proc and /sys entries runc
// hides (bind-mounts /dev/null or an empty tmpfs over) and remounts read-only.
// As dockerd (daemon/create_unix.go): a create that names none gets the
// defaults stored in its HostConfig, so inspect lists them, unless privileged
// (then none); a list given, empty included, is used as given, privileged or
// not. kubelet sends both for every unprivileged container.
import type { HostConfig } from '../config.js';

/**
 * Docker 25-27's defaults (moby oci/defaults.go). powercap came after 20.10
 * (GHSA-jq35-85cj-fj4p: the RAPL energy counters leak what other processes compute).
 */
export const MASKED_PATHS: readonly string[] = [
  '/proc/asound',
  '/proc/acpi',
  '/proc/kcore',
  '/proc/keys',
  '/proc/latency_stats',
  '/proc/timer_list',
  '/proc/timer_stats',
  '/proc/sched_debug',
  '/proc/scsi',
  '/sys/firmware',
  '/sys/devices/virtual/powercap',
];

export const READONLY_PATHS: readonly string[] = [
  '/proc/bus',
  '/proc/fs',
  '/proc/irq',
  '/proc/sys',
  '/proc/sysrq-trigger',
];

type PathFields = Pick<HostConfig, 'Privileged' | 'MaskedPaths' | 'ReadonlyPaths'>;

/**
 * The lists a container has: as given, else the defaults (none when
 * privileged). null stands for none, as dockerd's nil (inspect shows null).
 * Also what a container stored before berth kept them gets.
 */
export function protectedPaths(h: Partial<PathFields>): {
  MaskedPaths: string[] | null;
  ReadonlyPaths: string[] | null;
} {
  const defaults = (list: readonly string[]) => (h.Privileged ? null : [...list]);
  return {
    MaskedPaths: h.MaskedPaths ?? defaults(MASKED_PATHS),
    ReadonlyPaths: h.ReadonlyPaths ?? defaults(READONLY_PATHS),
  };
}
