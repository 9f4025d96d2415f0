// HostConfig.LogConfig: the log drivers berth has (json-file, local, none),
// their options checked as dockerd checks them (its ValidateLogOpts, then the
// driver's ValidateLogOpt and New, with their words), and what a run needs of
// them. dockerd finds a bad value only at start; berth refuses it at create,
// so no container is made that cannot start. On disk, json-file and local are
// the same here: conmon's k8s-file log, <bundle>/ctr.log, and the rotated
// ctr.log.1, .2 … (gzipped with compress) that logrotation.ts keeps; json-file
// has dockerd's file beside it too (jsonlog.ts).
import { invalidParameter } from '../../../errors.js';
import type { Container } from '../container.js';

export type LogDriver = 'json-file' | 'local' | 'none';

/** What a container's log is kept as. */
export interface LogPolicy {
  driver: LogDriver;
  /** Bytes the live file may reach before it is rotated; undefined = never rotated. */
  maxSize?: number;
  /** Files kept, the live one included (dockerd's max-file). */
  maxFiles: number;
  /** Rotated files are gzipped. */
  compress: boolean;
}

interface LogConfigBody {
  Type?: string | null;
  Config?: Record<string, string> | null;
}

/** The log drivers dockerd ships that berth has not. */
const OTHER_DOCKER_DRIVERS = [
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

/** Options dockerd's json-file and local take that berth does not apply (extra attributes of each entry). */
const UNAPPLIED_OPTS = ['labels', 'labels-regex', 'env', 'env-regex', 'tag'];
/**
 * dockerd's log cache options, which every driver takes: the cache serves
 * drivers that cannot be read back, so json-file and local take them and
 * ignore them (loggerutils/cache), as berth does.
 */
const CACHE_OPTS = ['cache-disabled', 'cache-max-size', 'cache-max-file', 'cache-compress'];
const ROTATION_OPTS = ['max-size', 'max-file', 'compress'];

/** dockerd's local driver's defaults (daemon/logger/local). */
const LOCAL_DEFAULTS = { maxSize: 20 * 1024 * 1024, maxFiles: 5, compress: true };

/** The container's log policy; throws dockerd's error for what dockerd refuses, and refuses what berth does not apply. */
export function logPolicy(lc: LogConfigBody | null | undefined): LogPolicy {
  const type = lc?.Type || 'json-file';
  const opts = lc?.Config ?? {};
  // dockerd validates no option of the none driver: all are taken, and none does anything.
  if (type === 'none') return { driver: 'none', maxFiles: 1, compress: false };
  if (type !== 'json-file' && type !== 'local') {
    if (OTHER_DOCKER_DRIVERS.includes(type)) {
      throw invalidParameter(`the ${type} log driver is not supported by berth yet (it has json-file, local and none)`);
    }
    throw invalidParameter(`logger: no log driver named '${type}' is registered`);
  }
  checkCommonOpts(opts);
  for (const opt of Object.keys(opts)) {
    // mode is checked above: blocking, which is what conmon does.
    if (ROTATION_OPTS.includes(opt) || opt === 'mode' || CACHE_OPTS.includes(opt)) continue;
    if (UNAPPLIED_OPTS.includes(opt)) {
      throw invalidParameter(`log opt '${opt}' is not supported by berth yet`);
    }
    throw invalidParameter(
      type === 'local'
        ? `unknown log opt '${opt}' for log driver local`
        : `unknown log opt '${opt}' for json-file log driver`,
    );
  }
  return type === 'local' ? localPolicy(opts) : jsonFilePolicy(opts);
}

/** dockerd's checks of the options every driver has (logger.ValidateLogOpts). */
function checkCommonOpts(opts: Record<string, string>): void {
  const mode = opts.mode ?? '';
  if (!['', 'blocking', 'non-blocking'].includes(mode)) {
    throw invalidParameter(`logger: logging mode not supported: ${mode}`);
  }
  if (opts['max-buffer-size'] !== undefined && mode !== 'non-blocking') {
    throw invalidParameter("logger: max-buffer-size option is only supported with 'mode=non-blocking'");
  }
  const cacheDisabled = opts['cache-disabled'];
  if (cacheDisabled) {
    try {
      parseBool(cacheDisabled);
    } catch {
      throw invalidParameter(`invalid value for option cache-disabled: ${cacheDisabled}`);
    }
  }
  if (mode === 'non-blocking') {
    throw invalidParameter(
      "log opt 'mode=non-blocking' is not supported by berth yet (its logging is blocking: conmon writes every line)",
    );
  }
}

/** json-file's New (daemon/logger/jsonfilelog). */
function jsonFilePolicy(opts: Record<string, string>): LogPolicy {
  let maxSize: number | undefined;
  if (opts['max-size'] !== undefined) {
    maxSize = fromHumanSize(opts['max-size']);
    if (maxSize <= 0) throw invalidParameter('max-size must be a positive number');
  }
  let maxFiles = 1;
  if (opts['max-file'] !== undefined) {
    maxFiles = atoi(opts['max-file']);
    if (maxFiles < 1) throw invalidParameter('max-file cannot be less than 1');
  }
  let compress = false;
  if (opts.compress !== undefined) {
    compress = parseBool(opts.compress);
    if (compress && (maxFiles === 1 || maxSize === undefined)) {
      throw invalidParameter('compress cannot be true when max-file is less than 2 or max-size is not set');
    }
  }
  return { driver: 'json-file', ...(maxSize !== undefined ? { maxSize } : {}), maxFiles, compress };
}

/** local's newConfig (daemon/logger/local/config.go). */
function localPolicy(opts: Record<string, string>): LogPolicy {
  const wrap = <T>(what: string, value: string, parse: (s: string) => T): T => {
    try {
      return parse(value);
    } catch (e) {
      throw invalidParameter(`${what}${(e as Error).message}`);
    }
  };
  const v = (k: string) => opts[k];
  const maxSize =
    v('max-size') === undefined
      ? LOCAL_DEFAULTS.maxSize
      : wrap(`invalid value for max-size: ${v('max-size')}: `, v('max-size')!, fromHumanSize);
  const maxFiles =
    v('max-file') === undefined
      ? LOCAL_DEFAULTS.maxFiles
      : wrap(`invalid value for max-file: ${v('max-file')}: `, v('max-file')!, atoi);
  const compress =
    v('compress') === undefined
      ? LOCAL_DEFAULTS.compress
      : wrap('invalid boolean value for compress: ', v('compress')!, parseBool);
  if (maxFiles < 0) throw invalidParameter('max-file must not be negative');
  if (compress && maxFiles <= 1) throw invalidParameter('compression cannot be enabled when max file count is 1');
  return { driver: 'local', maxSize, maxFiles: Math.max(maxFiles, 1), compress };
}

/** Checks a create's LogConfig (logPolicy's errors). */
export function checkLogConfig(lc: LogConfigBody | null | undefined): void {
  logPolicy(lc);
}

/** Whether berth rotates the log into numbered files (else conmon caps it alone, or it grows). */
export const rotatedByBerth = (p: LogPolicy): p is LogPolicy & { maxSize: number } =>
  p.driver !== 'none' && p.maxSize !== undefined && p.maxFiles >= 2;

/**
 * conmon's --log-size-max for the policy: with one file, conmon's own cap (it
 * starts the file anew, as dockerd's max-file=1 does); with more, none (berth
 * rotates, and conmon's cap would throw away the live file). `fallback` is
 * the daemon's cap for a log with no max-size.
 */
export function conmonLogSizeMax(p: LogPolicy, fallback: number): number {
  if (p.driver === 'none' || rotatedByBerth(p)) return 0;
  if (p.maxSize === undefined) return fallback;
  // dockerd rotates before each write once the file holds max-size (0: every
  // write); conmon before the record that would pass its cap (1: every record).
  return Math.max(p.maxSize, 1);
}

/** The container's log driver (as stored: checked at create). */
export const logDriver = (c: Container): string => c.hostConfig.LogConfig?.Type || 'json-file';

// ------------------------------------------------------- Go's parsers, as dockerd uses them

const FLOAT = /^[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?$/;
const DECIMAL: Record<string, number> = { k: 1e3, m: 1e6, g: 1e9, t: 1e12, p: 1e15 };

/** go-units FromHumanSize: decimal units (1k = 1000), as dockerd reads max-size. */
export function fromHumanSize(s: string): number {
  let sep = -1;
  for (let i = s.length - 1; i >= 0; i--) {
    if ('0123456789. '.includes(s[i]!)) {
      sep = i;
      break;
    }
  }
  if (sep < 0) throw invalidParameter(`invalid size: '${s}'`);
  const num = s[sep] === ' ' ? s.slice(0, sep) : s.slice(0, sep + 1);
  const sfx = s.slice(sep + 1);
  if (!FLOAT.test(num)) throw invalidParameter(`strconv.ParseFloat: parsing ${JSON.stringify(num)}: invalid syntax`);
  const size = Number(num);
  if (size < 0) throw invalidParameter(`invalid size: '${s}'`);
  if (!sfx) return Math.trunc(size);
  if (sfx.length > 3) throw invalidParameter(`invalid suffix: '${sfx}'`);
  const lower = sfx.toLowerCase();
  if (lower[0] === 'b') {
    if (lower.length > 1) throw invalidParameter(`invalid suffix: '${lower}'`);
    return Math.trunc(size);
  }
  const mul = DECIMAL[lower[0]!];
  if (
    mul === undefined ||
    (lower.length === 2 && lower[1] !== 'b') ||
    (lower.length === 3 && lower.slice(1) !== 'ib')
  ) {
    throw invalidParameter(`invalid suffix: '${lower}'`);
  }
  return Math.trunc(size * mul);
}

/** Go's strconv.Atoi. */
function atoi(s: string): number {
  if (!/^[+-]?\d+$/.test(s)) throw invalidParameter(`strconv.Atoi: parsing ${JSON.stringify(s)}: invalid syntax`);
  const n = Number(s);
  if (!Number.isSafeInteger(n))
    throw invalidParameter(`strconv.Atoi: parsing ${JSON.stringify(s)}: value out of range`);
  return n;
}

/** Go's strconv.ParseBool. */
function parseBool(s: string): boolean {
  if (['1', 't', 'T', 'TRUE', 'true', 'True'].includes(s)) return true;
  if (['0', 'f', 'F', 'FALSE', 'false', 'False'].includes(s)) return false;
  throw invalidParameter(`strconv.ParseBool: parsing ${JSON.stringify(s)}: invalid syntax`);
}
