// What berth does not honour yet is refused at create, never stored and
// dropped. A HostConfig field outside the schema (config.ts, where every field
// berth applies is named) passes only when it asks nothing: absent, null,
// zero, false, empty, or Docker's own default for it. Clients send whole
// HostConfigs full of such values (the docker CLI sends ~50 fields), so only
// a value that would change something is refused.
import { invalidParameter } from '../../errors.js';
import { HostConfigSchema } from './config.js';

/** Fields berth reads that are not in the stored schema (they live elsewhere, or are read as given). */
const READ_ELSEWHERE = new Set(['ConsoleSize']);

/** Docker's defaults that are not "empty": a client may send them, and they ask nothing. */
const DOCKER_DEFAULTS: Record<string, readonly unknown[]> = {
  MemorySwappiness: [-1],
  // berth's containers have no cgroup namespace of their own: the host's, dockerd's default on cgroup v1.
  CgroupnsMode: ['host'],
  VolumeDriver: ['local'],
  Runtime: ['runc'],
};

/** Whether a value asks for nothing: nothing in it but nulls, zeros, falses and empty strings. */
export function asksNothing(v: unknown): boolean {
  if (v === null || v === undefined || v === false || v === 0 || v === '') return true;
  if (Array.isArray(v)) return v.every(asksNothing);
  if (typeof v === 'object') return Object.values(v).every(asksNothing);
  return false;
}

/** Refuses the first HostConfig field berth would otherwise accept and not apply. */
export function refuseUnhonoured(h: Record<string, unknown>): void {
  const known = HostConfigSchema.shape;
  for (const [field, value] of Object.entries(h)) {
    if (field in known || READ_ELSEWHERE.has(field) || asksNothing(value)) continue;
    if (DOCKER_DEFAULTS[field]?.includes(value)) continue;
    throw invalidParameter(`HostConfig.${field} is not supported by berth yet (asked: ${JSON.stringify(value)})`);
  }
}

/** The log drivers dockerd ships; berth has json-file only. */
const DOCKER_LOG_DRIVERS = [
  'none',
  'local',
  'syslog',
  'journald',
  'gelf',
  'fluentd',
  'awslogs',
  'splunk',
  'etwlogs',
  'gcplogs',
  'logentries',
];

/**
 * LogConfig: json-file (berth's logs are that driver's: readable through the
 * API, rotated by max-size). Another driver is refused as dockerd refuses an
 * unknown one, or as not here yet for those dockerd has; an option json-file
 * has that berth does not apply is refused too.
 */
export function checkLogConfig(
  lc: { Type?: string | null; Config?: Record<string, string> | null } | null | undefined,
): void {
  const type = lc?.Type || 'json-file';
  if (type !== 'json-file') {
    if (DOCKER_LOG_DRIVERS.includes(type)) {
      throw invalidParameter(`the ${type} log driver is not supported by berth yet (it has json-file)`);
    }
    throw invalidParameter(`logger: no log driver named '${type}' is registered`);
  }
  for (const [opt, value] of Object.entries(lc?.Config ?? {})) {
    if (opt === 'max-size') continue;
    if (opt === 'max-file' && value === '1') continue;
    if (['max-file', 'compress', 'labels', 'labels-regex', 'env', 'env-regex', 'tag'].includes(opt)) {
      throw invalidParameter(
        `log opt '${opt}' is not supported by berth yet (its json-file log is one file, rotated by max-size)`,
      );
    }
    throw invalidParameter(`unknown log opt '${opt}' for json-file log driver`);
  }
}
