// Exec bodies and the exec inspect shape, as dockerd has them.
import { z } from 'zod';
import type { ExecInstance } from '../../engine/index.js';

const size = z.tuple([z.number().int(), z.number().int()]).nullish();

export const ExecCreateSchema = z.looseObject({
  Cmd: z.union([z.array(z.string()), z.string().transform((s) => [s])]).nullish(),
  AttachStdin: z.boolean().nullish(),
  AttachStdout: z.boolean().nullish(),
  AttachStderr: z.boolean().nullish(),
  Tty: z.boolean().nullish(),
  Env: z.array(z.string()).nullish(),
  User: z.string().nullish(),
  WorkingDir: z.string().nullish(),
  Privileged: z.boolean().nullish(),
  DetachKeys: z.string().nullish(),
  ConsoleSize: size,
});

export const ExecStartSchema = z.looseObject({
  Detach: z.boolean().nullish(),
  Tty: z.boolean().nullish(),
  ConsoleSize: size,
});

/** `GET /exec/{id}/json`. */
export function execInspect(e: ExecInstance) {
  const [entrypoint = '', ...args] = e.config.Cmd;
  return {
    ID: e.id,
    Running: e.running,
    ExitCode: e.exitCode,
    ProcessConfig: {
      tty: e.config.Tty,
      entrypoint,
      arguments: args,
      privileged: e.config.Privileged,
      user: e.config.User,
    },
    OpenStdin: e.config.AttachStdin,
    OpenStderr: e.config.AttachStderr,
    OpenStdout: e.config.AttachStdout,
    CanRemove: false,
    ContainerID: e.containerId,
    DetachKeys: e.config.DetachKeys,
    Pid: e.pid,
  };
}
