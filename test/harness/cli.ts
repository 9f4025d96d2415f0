// Runs the real docker CLI against a berthd, with its own client config dir.
import { execFile } from 'node:child_process';
import { scratchDir } from './tmp.js';
import type { Daemon } from './daemon.js';

export interface CliResult {
  code: number;
  stdout: string;
  stderr: string;
}

export interface Cli {
  (args: string[], opts?: { input?: string; timeoutMs?: number; env?: Record<string, string> }): Promise<CliResult>;
  /** Runs docker; rejects with its stderr unless it exits 0; resolves with stdout. */
  ok(args: string[]): Promise<string>;
  configDir: string;
}

/** A `docker` bound to `d` (DOCKER_HOST) with a private DOCKER_CONFIG. */
export function dockerCli(d: Daemon): Cli {
  const configDir = scratchDir('berth-cli-');
  const cli = (args: string[], opts: { input?: string; timeoutMs?: number; env?: Record<string, string> } = {}) =>
    new Promise<CliResult>((resolve) => {
      const child = execFile(
        'docker',
        args,
        {
          env: { ...process.env, ...opts.env, DOCKER_HOST: d.host, DOCKER_CONFIG: configDir },
          timeout: opts.timeoutMs ?? 60_000,
          maxBuffer: 16 * 1024 * 1024,
        },
        (err, stdout, stderr) => resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
      );
      child.stdin?.end(opts.input ?? '');
    });
  const ok = async (args: string[]) => {
    const r = await cli(args);
    if (r.code !== 0) throw new Error(`docker ${args.join(' ')} exited ${r.code}: ${r.stderr}`);
    return r.stdout;
  };
  return Object.assign(cli, { ok, configDir });
}
