// Docker's health checks, as dockerd runs them (moby daemon/health.go):
//   - the check is Config.Healthcheck (create merged the image's under it):
//     CMD runs its argv, CMD-SHELL its string under the Shell (/bin/sh -c);
//   - it runs as an exec in the container (exec.ts), its output kept (4096
//     bytes) and killed at its timeout, which then counts as a failure;
//   - the first check comes one interval after the start (StartInterval while
//     the start period lasts and the status is "starting"), the next one
//     interval after each check ends;
//   - 0 passes (healthy, streak 0); a failure adds to the streak, except while
//     "starting" inside the start period, and Retries of them make "unhealthy";
//   - a change of status is an event (`health_status: healthy`) and is written
//     to the container's record; the results in between live in memory (the
//     record's copy is only replaced when the checks stop or berthd does), as
//     dockerd checkpoints them;
//   - checks stop at the exit, the pause or the removal, leaving the status
//     "unhealthy" (dockerd's, "for compatibility"); a start, and berthd's own
//     start for a container still running, begin again at "starting" with the
//     log kept.
// One timer per checked container, armed only between checks: a stopped
// container holds none. Checks are started a few at a time (the costly
// conmon and `runc exec`); once running, a check holds no place.
import os from 'node:os';
import { messageOf } from '../../errors.js';
import type { Logger } from '../../log.js';
import type { EventBus } from '../events.js';
import { Limiter } from '../limiter.js';
import { formatTimestamp } from '../runtime/logs.js';
import type { ContainerRepository } from '../store/containers.js';
import type { ContainerConfig, HealthConfig } from './config.js';
import { type Container, type HealthResult, type HealthState, publish } from './container.js';
import type { ContainerLookup } from './lookup.js';

// dockerd's limits and defaults.
const MAX_OUTPUT_BYTES = 4096;
const MAX_LOG_ENTRIES = 5;
const NS_PER_MS = 1_000_000;
const DEFAULT_INTERVAL_NS = 30e9;
const DEFAULT_TIMEOUT_NS = 30e9;
const DEFAULT_START_INTERVAL_NS = 5e9;
const DEFAULT_RETRIES = 3;
const DEFAULT_SHELL = ['/bin/sh', '-c'];

/** A container's health check, its zero fields defaulted. */
export interface HealthCheck {
  /** The process to run; null for a CMD with nothing after it (each check fails, as dockerd's). */
  argv: string[] | null;
  intervalMs: number;
  timeoutMs: number;
  startPeriodMs: number;
  startIntervalMs: number;
  retries: number;
  /** The timeout as Go prints a duration ("30s"), for the timeout's message. */
  timeoutText: string;
}

/** The check a container runs, or null: none configured, NONE, or a type dockerd does not run. */
export function healthCheckOf(config: Pick<ContainerConfig, 'Healthcheck' | 'Shell'>): HealthCheck | null {
  const h: HealthConfig | undefined = config.Healthcheck;
  const [type, ...rest] = h?.Test ?? [];
  if (!h || (type !== 'CMD' && type !== 'CMD-SHELL')) return null;
  const shell = config.Shell?.length ? config.Shell : DEFAULT_SHELL;
  const argv = rest.length === 0 ? null : type === 'CMD-SHELL' ? [...shell, ...rest] : rest;
  const timeoutNs = h.Timeout || DEFAULT_TIMEOUT_NS;
  return {
    argv,
    intervalMs: (h.Interval || DEFAULT_INTERVAL_NS) / NS_PER_MS,
    timeoutMs: timeoutNs / NS_PER_MS,
    startPeriodMs: (h.StartPeriod || 0) / NS_PER_MS,
    startIntervalMs: (h.StartInterval || DEFAULT_START_INTERVAL_NS) / NS_PER_MS,
    retries: h.Retries && h.Retries > 0 ? h.Retries : DEFAULT_RETRIES,
    timeoutText: durationText(timeoutNs),
  };
}

/** Go's time.Duration String(): "1.5s", "1m30s", "2m0s", "500ms", "1h0m0s". */
export function durationText(ns: number): string {
  if (ns === 0) return '0s';
  const sign = ns < 0 ? '-' : '';
  let n = Math.abs(Math.trunc(ns));
  if (n < 1e9) {
    const [div, unit] = n < 1e3 ? [1, 'ns'] : n < 1e6 ? [1e3, 'µs'] : [1e6, 'ms'];
    return `${sign}${decimal(n, div)}${unit}`;
  }
  const h = Math.floor(n / 3600e9);
  n -= h * 3600e9;
  const m = Math.floor(n / 60e9);
  n -= m * 60e9;
  return `${sign}${h ? `${h}h` : ''}${h || m ? `${m}m` : ''}${decimal(n, 1e9)}s`;
}

/** n / div with the fraction's trailing zeros dropped (div a power of ten). */
function decimal(n: number, div: number): string {
  const whole = Math.floor(n / div);
  const frac = String(n % div)
    .padStart(String(div).length - 1, '0')
    .replace(/0+$/, '');
  return frac ? `${whole}.${frac}` : String(whole);
}

/** Now, in nanoseconds since the epoch (the sub-millisecond part from the monotonic clock, as events have it). */
const nowNs = () => BigInt(Date.now()) * 1_000_000n + (process.hrtime.bigint() % 1_000_000n);
/** Go's RFC3339Nano: up to nine fraction digits, trailing zeros dropped. */
const rfc3339Nano = (ns: bigint) => formatTimestamp(ns).replace(/\.?0+Z$/, 'Z');

/** Up to MAX_OUTPUT_BYTES of a check's output; "..." marks what was dropped. */
class OutputBuffer {
  private readonly chunks: Buffer[] = [];
  private size = 0;
  private truncated = false;

  write(data: Buffer): void {
    const keep = Math.min(MAX_OUTPUT_BYTES - this.size, data.length);
    if (keep > 0) {
      this.chunks.push(data.subarray(0, keep));
      this.size += keep;
    }
    if (keep < data.length) this.truncated = true;
  }

  text(): string {
    const out = Buffer.concat(this.chunks).toString('utf8');
    return this.truncated ? `${out}...` : out;
  }
}

/** setTimeout's longest delay; longer ones are waited for in steps. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * Calls `fn` after `ms` (however long); cancel() stops it. Not unref'd: a
 * container's checks count among what berthd waits on (/info's NGoroutines,
 * as dockerd's monitor goroutines do), and close() cancels them all.
 */
function later(ms: number, fn: () => void): { cancel(): void } {
  let timer: NodeJS.Timeout;
  const arm = (left: number) => {
    timer = setTimeout(() => (left > MAX_TIMER_MS ? arm(left - MAX_TIMER_MS) : fn()), Math.min(left, MAX_TIMER_MS));
  };
  arm(Math.max(0, ms));
  return { cancel: () => clearTimeout(timer) };
}

// ----------------------------------------------------------------- probes

/** A check's process, running. */
export interface ProbeRun {
  /** Its exit code, once it has exited and its output has all been read. */
  exit: Promise<number>;
  /** Kills it (a check past its timeout, or checks that stop). */
  kill(): void;
}

/** The checks of one run of a container, one at a time. */
export interface Probes {
  /**
   * Runs the check, its output (stdout and stderr) to `output`; resolves once
   * the process runs, rejects when it cannot start.
   */
  run(output: (data: Buffer) => void): Promise<ProbeRun>;
  /** No more checks (the one under way, if any, was killed or has ended). */
  close(): void;
}

/** How `argv` is run as the checks of one run of the container. */
export type Prober = (containerId: string, argv: string[]) => Probes;

// ---------------------------------------------------------------- monitor

/** The checks of one running container. */
interface Monitor {
  id: string;
  check: HealthCheck;
  /** The container's start (ms), for the start period. */
  startedAt: number;
  state: HealthState;
  /** Armed between checks. */
  next: { cancel(): void } | undefined;
  /** The check under way. */
  probe: ProbeRun | undefined;
  /** How checks run, from the first one on. */
  probes: Probes | undefined;
  stopped: boolean;
}

export interface HealthDeps {
  repo: ContainerRepository;
  events: EventBus;
  lookup: ContainerLookup;
  log: Logger;
}

export class HealthMonitor {
  private readonly monitors = new Map<string, Monitor>();
  private prober: Prober | undefined;
  /**
   * Checks being started at once (conmon and `runc exec`, the costly part),
   * the others waiting their turn: a hundred containers checked every second
   * would otherwise start a hundred runc at once, and thrash. A check that
   * runs long (its timeout counts from its start) holds no place.
   */
  private readonly starts = new Limiter(os.availableParallelism());

  constructor(private readonly deps: HealthDeps) {}

  /** The health of a container whose checks run (newer than its record's); undefined otherwise. */
  current(id: string): HealthState | undefined {
    return this.monitors.get(id)?.state;
  }

  /** How checks run (the exec service, built after the containers'); starts those of the running containers. */
  useProber(prober: Prober): void {
    this.prober = prober;
    // As dockerd's restore: a container still running starts over at "starting", its log kept.
    for (const c of this.deps.lookup.withStatus(['running'])) this.started(c.id);
  }

  /** The container started (or runs on after berthd's start): checks begin at "starting". */
  started(id: string): void {
    const c = this.deps.lookup.byId(id);
    const check = c && this.checkOf(c);
    if (!c || !check) return;
    this.halt(id);
    const state: HealthState = { Status: 'starting', FailingStreak: 0, Log: c.health?.Log ?? [] };
    this.save(id, state);
    if (c.status === 'running') this.open(c, check, state);
  }

  /** The container was unpaused: checks go on from the status the pause left. */
  resumed(id: string): void {
    const c = this.deps.lookup.byId(id);
    const check = c && this.checkOf(c);
    if (!c?.health || !check || this.monitors.has(id)) return;
    this.open(c, check, c.health);
  }

  /** The container exited or was paused: checks stop, and the status is "unhealthy" until they run again. */
  stopped(id: string): void {
    const m = this.halt(id);
    if (!m) return;
    m.state.Status = 'unhealthy';
    this.save(id, m.state);
  }

  /** The container is gone. */
  removed(id: string): void {
    this.halt(id);
  }

  /** berthd stops: checks stop, each container's results kept in its record. */
  close(): void {
    for (const id of [...this.monitors.keys()]) {
      const m = this.halt(id);
      if (m) this.save(id, m.state);
    }
  }

  // ------------------------------------------------------------ internals

  private checkOf(c: Container): HealthCheck | null {
    const check = healthCheckOf(c.config);
    const type = c.config.Healthcheck?.Test?.[0];
    if (!check && type && type !== 'NONE') {
      // An image's, as create refuses a request's: dockerd's warning, and no checks.
      this.deps.log.warn({ id: c.id, type }, "unknown healthcheck type (expected 'CMD')");
    }
    return check;
  }

  private open(c: Container, check: HealthCheck, state: HealthState): void {
    const m: Monitor = {
      id: c.id,
      check,
      startedAt: c.startedAt,
      state,
      next: undefined,
      probe: undefined,
      probes: undefined,
      stopped: false,
    };
    this.monitors.set(c.id, m);
    this.schedule(m);
  }

  /** Stops a container's checks (a check under way is killed); returns what they were. */
  private halt(id: string): Monitor | undefined {
    const m = this.monitors.get(id);
    if (!m) return undefined;
    this.monitors.delete(id);
    m.stopped = true;
    m.next?.cancel();
    m.next = undefined;
    m.probe?.kill();
    m.probes?.close();
    return m;
  }

  private schedule(m: Monitor): void {
    m.next = later(this.intervalOf(m), () => {
      m.next = undefined;
      void this.probe(m);
    });
  }

  /** StartInterval while the start period lasts and nothing has passed yet; Interval otherwise. */
  private intervalOf(m: Monitor): number {
    const { check } = m;
    if (Date.now() - m.startedAt >= check.startPeriodMs) return check.intervalMs;
    return m.state.Status === 'starting' ? check.startIntervalMs : check.intervalMs;
  }

  private async probe(m: Monitor): Promise<void> {
    const startMs = Date.now();
    const start = nowNs();
    let outcome: { ExitCode: number; Output: string };
    try {
      outcome = await this.run(m);
    } catch (e) {
      outcome = { ExitCode: -1, Output: messageOf(e) };
    }
    m.probe = undefined;
    if (m.stopped) return;
    try {
      this.record(m, { Start: rfc3339Nano(start), End: rfc3339Nano(nowNs()), ...outcome }, startMs);
    } catch (err) {
      this.deps.log.warn({ err, id: m.id }, 'recording a health check failed');
    }
    this.schedule(m);
  }

  /** One check: its exit code and output, or dockerd's failure for one past its timeout. */
  private async run(m: Monitor): Promise<{ ExitCode: number; Output: string }> {
    const { argv, timeoutMs, timeoutText } = m.check;
    if (!argv) throw new Error(`healthcheck for container ${m.id} has no command`);
    if (!this.prober) throw new Error(`health checks are not running yet for container ${m.id}`);
    const output = new OutputBuffer();
    m.probes ??= this.prober(m.id, argv);
    const probes = m.probes;
    const p = await this.starts.run(async () => {
      if (m.stopped) throw new Error('health checks stopped');
      return probes.run((data) => output.write(data));
    });
    m.probe = p;
    if (m.stopped) p.kill();
    // The timeout counts from when the process runs, as dockerd's (not while the exec starts).
    let timer: { cancel(): void } | undefined;
    const timedOut = new Promise<null>((resolve) => (timer = later(timeoutMs, () => resolve(null))));
    const code = await Promise.race([p.exit, timedOut]);
    timer?.cancel();
    if (code !== null) return { ExitCode: code, Output: output.text() };
    p.kill();
    await p.exit.catch(() => undefined); // dying checks must not pile up
    const out = output.text();
    const msg = `Health check exceeded timeout (${timeoutText})`;
    return { ExitCode: -1, Output: out ? `${msg}: ${out}` : msg };
  }

  /** handleProbeResult: the log, the streak, the status; an event and a record when the status changes. */
  private record(m: Monitor, result: HealthResult, startMs: number): void {
    const { state, check } = m;
    const before = state.Status;
    state.Log = [...state.Log, result].slice(-MAX_LOG_ENTRIES);
    if (result.ExitCode === 0) {
      state.FailingStreak = 0;
      state.Status = 'healthy';
    } else if (state.Status !== 'starting' || startMs - m.startedAt >= check.startPeriodMs) {
      state.FailingStreak++;
      if (state.FailingStreak >= check.retries) state.Status = 'unhealthy';
    }
    if (state.Status === before) return;
    this.save(m.id, state);
    const c = this.deps.lookup.byId(m.id);
    if (c) publish(this.deps.events, c, `health_status: ${state.Status}`);
  }

  /** Writes the health to the container's record: best effort (a full disk costs the record, not the start). */
  private save(id: string, state: HealthState): void {
    try {
      this.deps.repo.update(id, { health: JSON.stringify(state) });
    } catch (err) {
      this.deps.log.warn({ err, id }, "writing a container's health failed");
    }
  }
}
