// The exec start body and the exec inspect shape, as dockerd has them (the create body is the engine's).
import { z } from 'zod';
import { lazySchema } from '../../lazy-schema.js';
import type { ExecInstance } from '../../engine/index.js';

const size = lazySchema(() => z.tuple([z.number().int(), z.number().int()]).nullish());

export const ExecStartSchema = lazySchema(() =>
  z.looseObject({
    Detach: z.boolean().nullish(),
    Tty: z.boolean().nullish(),
    ConsoleSize: size,
  }),
);

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
      user: e.config.User || undefined, // omitempty in dockerd's
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
