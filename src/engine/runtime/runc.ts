// runc's command line: one command run and its failure read (runc's JSON log
// on stderr), the engine error each failure means, runc's rule for ids, and
// its state as `runc state` and `runc list` print it.
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { conflict, EngineError, invalidParameter, noSuchContainer, systemError } from '../../errors.js';
import { cleanRuntimeMessage } from './errors.js';

const execFileAsync = promisify(execFile);

/** An OCI runtime as daemon.json names it: a runc-compatible binary and its global flags. */
export interface RuntimeBinary {
  path: string;
  runtimeArgs: readonly string[];
}

export type RuntimeStatus = 'creating' | 'created' | 'running' | 'paused' | 'stopped';

export interface RuntimeState {
  id: string;
  status: RuntimeStatus;
  /** 0 once the container has stopped. */
  pid: number;
  bundle: string;
}

/** runc's rule for ids, and what keeps them safe as file names under exit-dir and socket-dir. */
export const VALID_ID = /^[A-Za-z0-9][A-Za-z0-9_.+-]{0,127}$/;

/** runc found the container's process gone. */
export class NotRunning extends EngineError {
  constructor(id: string) {
    super('conflict', `Container ${id} is not running`);
  }
}

/** A failed `runc <command>`, with runc's own message. */
export class RuncError extends Error {
  constructor(
    readonly command: string,
    readonly runcMessage: string,
  ) {
    super(`runc ${command} failed: ${runcMessage}`);
  }
}

/** `<runtime> --root <runcRoot> <args>`: its stdout, or a RuncError with runc's own message. */
export async function runRunc(
  runtime: RuntimeBinary,
  runcRoot: string,
  args: string[],
  input?: string,
): Promise<string> {
  try {
    const running = execFileAsync(
      runtime.path,
      [...runtime.runtimeArgs, '--root', runcRoot, '--log-format', 'json', ...args],
      { maxBuffer: 16 * 1024 * 1024 },
    );
    if (input !== undefined) running.child.stdin?.end(input);
    const { stdout } = await running;
    return stdout;
  } catch (e) {
    const err = e as { stderr?: string; message: string };
    throw new RuncError(args[0] ?? '', runcErrorMessage(err.stderr ?? '') || err.message);
  }
}

/** A failed runc command on the container `id` as the engine error it means. */
export function translate(id: string, e: unknown): EngineError {
  if (e instanceof EngineError) return e;
  if (!(e instanceof RuncError)) return systemError(`runtime: ${(e as Error).message}`, e);
  if (isMissing(e)) return noSuchContainer(id);
  const msg = e.runcMessage.toLowerCase();
  if (msg.includes('not running') || msg.includes('process already finished')) return new NotRunning(id);
  if (msg.includes('unknown signal') || msg.includes('invalid signal')) return invalidParameter(e.runcMessage);
  if (msg.includes('cannot start') || msg.includes('not paused') || msg.includes('already paused')) {
    return conflict(e.runcMessage);
  }
  return systemError(e.message, e);
}

export function checkId(id: string): void {
  if (!VALID_ID.test(id)) throw invalidParameter(`invalid container id: ${JSON.stringify(id)}`);
}

export const isMissing = (e: RuncError) => e.runcMessage.includes('does not exist');

/** runc --log-format json writes {"level":"error","msg":…} lines to stderr. */
function runcErrorMessage(stderr: string): string {
  for (const line of stderr.split('\n').reverse()) {
    try {
      const rec = JSON.parse(line) as { level?: string; msg?: string };
      if (rec.msg) return rec.msg;
    } catch {
      // not JSON: fall through to the plain text
    }
  }
  return cleanRuntimeMessage(stderr);
}

export function toState(raw: unknown): RuntimeState {
  const r = raw as { id: string; status: RuntimeStatus; pid?: number; bundle?: string };
  return { id: r.id, status: r.status, pid: r.status === 'stopped' ? 0 : (r.pid ?? 0), bundle: r.bundle ?? '' };
}
