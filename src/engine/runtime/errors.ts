// How an OCI runtime failure becomes an engine error, with dockerd's wording
// and its classification (daemon/start.go): a command that cannot be found is
// the user's mistake (400, exit code 127), one that cannot be executed too
// (126); anything else is the engine's fault (500, exit code 128).
import { EngineError, type Kind } from '../../errors.js';

export class RuntimeCreateError extends EngineError {
  constructor(
    kind: Kind,
    message: string,
    /** The exit code dockerd records for a container that failed to start: 126, 127 or 128. */
    readonly code: number,
    /** runc's own message, unprefixed. */
    readonly runtimeMessage: string,
  ) {
    super(kind, message);
    this.name = 'RuntimeCreateError';
  }
}

const MOUNT_TYPE_HINT =
  ': Are you trying to mount a directory onto a file (or vice-versa)? Check if the specified host path exists and is the expected type';

/** runc's message cleaned of a logrus prefix, quoting and trailing newlines. */
export function cleanRuntimeMessage(raw: string): string {
  const lines = raw
    .split('\n')
    .map((l) => l.trim())
    .filter(Boolean);
  const last = lines.at(-1) ?? '';
  // runc logging as text to stderr: time="..." level=error msg="..."
  const logrus = /\blevel=\w+ msg="((?:[^"\\]|\\.)*)"/.exec(last);
  if (logrus?.[1] !== undefined) return logrus[1].replace(/\\(.)/g, '$1');
  return last;
}

/** A failed `runc create` (or `runc exec`, with verb 'exec') in dockerd's words, with its exit code. */
export function runtimeCreateError(raw: string, verb: 'create' | 'exec' = 'create'): RuntimeCreateError {
  const runtimeMessage = cleanRuntimeMessage(raw) || `container ${verb} failed`;
  const lower = runtimeMessage.toLowerCase();
  let detail = runtimeMessage;
  let kind: Kind = 'invalid';
  let code: number;
  if (lower.includes('executable file not found') || lower.includes('no such file or directory')) code = 127;
  else if (lower.includes('permission denied')) code = 126;
  else if (lower.includes('not a directory')) {
    code = 127;
    detail += MOUNT_TYPE_HINT;
  } else {
    code = 128;
    kind = 'system';
  }
  return new RuntimeCreateError(kind, `OCI runtime ${verb} failed: ${detail}: unknown`, code, runtimeMessage);
}
