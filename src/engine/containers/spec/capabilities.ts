// Linux capabilities as Docker names them: the kernel's list, dockerd's default
// set, what berthd itself may grant, and CapAdd/CapDrop resolved against them.
import { readFileSync } from 'node:fs';
import { invalidParameter } from '../../../errors.js';

/** Every capability the kernel defines, in number order (0 … 40). */
export const ALL_CAPABILITIES: readonly string[] = [
  'CHOWN',
  'DAC_OVERRIDE',
  'DAC_READ_SEARCH',
  'FOWNER',
  'FSETID',
  'KILL',
  'SETGID',
  'SETUID',
  'SETPCAP',
  'LINUX_IMMUTABLE',
  'NET_BIND_SERVICE',
  'NET_BROADCAST',
  'NET_ADMIN',
  'NET_RAW',
  'IPC_LOCK',
  'IPC_OWNER',
  'SYS_MODULE',
  'SYS_RAWIO',
  'SYS_CHROOT',
  'SYS_PTRACE',
  'SYS_PACCT',
  'SYS_ADMIN',
  'SYS_BOOT',
  'SYS_NICE',
  'SYS_RESOURCE',
  'SYS_TIME',
  'SYS_TTY_CONFIG',
  'MKNOD',
  'LEASE',
  'AUDIT_WRITE',
  'AUDIT_CONTROL',
  'SETFCAP',
  'MAC_OVERRIDE',
  'MAC_ADMIN',
  'SYSLOG',
  'WAKE_ALARM',
  'BLOCK_SUSPEND',
  'AUDIT_READ',
  'PERFMON',
  'BPF',
  'CHECKPOINT_RESTORE',
].map((c) => `CAP_${c}`);

/** dockerd's default set (CapEff a80425fb). */
export const DEFAULT_CAPABILITIES: readonly string[] = [
  'CHOWN',
  'DAC_OVERRIDE',
  'FSETID',
  'FOWNER',
  'MKNOD',
  'NET_RAW',
  'SETGID',
  'SETUID',
  'SETFCAP',
  'SETPCAP',
  'NET_BIND_SERVICE',
  'SYS_CHROOT',
  'KILL',
  'AUDIT_WRITE',
].map((c) => `CAP_${c}`);

/** CAP_X, cap_x, x and X all name CAP_X; ALL stays ALL. Unknown names are refused in dockerd's words. */
function normalizeCapability(name: string): string {
  const upper = name.trim().toUpperCase();
  if (upper === 'ALL') return 'ALL';
  const full = upper.startsWith('CAP_') ? upper : `CAP_${upper}`;
  if (!ALL_CAPABILITIES.includes(full)) throw invalidParameter(`unknown capability: "${full}"`);
  return full;
}

/**
 * The capabilities berthd itself may grant: its bounding set, read once (a
 * host without CAP_SYS_RESOURCE cannot hand it to a container; runc would fail
 * to apply it).
 */
let bounding: string[] | undefined;
export function grantableCapabilities(): string[] {
  if (!bounding) {
    const hex = /^CapBnd:\s*([0-9a-f]+)$/m.exec(readFileSync('/proc/self/status', 'utf8'))?.[1];
    const mask = hex ? BigInt(`0x${hex}`) : (1n << BigInt(ALL_CAPABILITIES.length)) - 1n;
    bounding = ALL_CAPABILITIES.filter((_, bit) => (mask >> BigInt(bit)) & 1n);
  }
  return bounding;
}

/**
 * Whether runc, as berthd, may raise a hard rlimit or lower oom_score_adj
 * below berthd's own: both need CAP_SYS_RESOURCE, which not every host hands berthd.
 */
export const canRaiseLimits = () => grantableCapabilities().includes('CAP_SYS_RESOURCE');

/**
 * A CapAdd or CapDrop entry as dockerd checks it at create (oci/caps
 * NormalizeLegacyCapabilities): a name the kernel defines, and one berthd holds.
 */
export function checkCapability(name: string): void {
  const full = normalizeCapability(name);
  if (full !== 'ALL' && !grantableCapabilities().includes(full)) {
    throw invalidParameter(
      `capability not supported by your kernel or not available in the current environment: "${full}"`,
    );
  }
}

/** The effective capability set: privileged gets all; ALL in add or drop works as in dockerd; an add beats a drop. */
export function resolveCapabilities(capAdd: string[], capDrop: string[], privileged: boolean): string[] {
  const all = grantableCapabilities();
  if (privileged) return [...all];
  const adds = capAdd.map(normalizeCapability);
  const drops = capDrop.map(normalizeCapability);
  let caps: string[];
  if (adds.includes('ALL')) caps = all.filter((c) => !drops.includes(c));
  else if (drops.includes('ALL')) caps = adds;
  else caps = [...DEFAULT_CAPABILITIES.filter((c) => !drops.includes(c)), ...adds];
  return [...new Set(caps)];
}
