// Real Docker clients other than the CLI (see cli.ts), run as child processes
// against a berthd: Debian's python3-docker and a Go program built with the
// official Go SDK (golang-github-docker-docker-dev, in GOPATH mode).
import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Daemon } from './daemon.js';
import { ROOT } from './daemon.js';
import { BUSYBOX_CONFIG, buildImage, buildLayer, busyboxLayer, pushImage } from './images.js';
import type { Registry } from './registry.js';

export interface ProcResult {
  code: number;
  stdout: string;
  stderr: string;
}

/** The environment a client process gets: the caller's, minus any DOCKER_* that could point it elsewhere. */
function cleanEnv(extra: Record<string, string>): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !k.startsWith('DOCKER_')) env[k] = v;
  return { ...env, ...extra };
}

/** Runs a program to its end and resolves with its exit code and output (never rejects on a non-zero exit). */
export function runProcess(
  file: string,
  args: string[],
  opts: { env?: Record<string, string>; cwd?: string; timeoutMs?: number } = {},
): Promise<ProcResult> {
  return new Promise((resolve) => {
    const child = execFile(
      file,
      args,
      {
        env: cleanEnv(opts.env ?? {}),
        cwd: opts.cwd ?? ROOT,
        timeout: opts.timeoutMs ?? 60_000,
        maxBuffer: 64 * 1024 * 1024,
      },
      (err, stdout, stderr) => {
        const code = err
          ? typeof (err as { code?: unknown }).code === 'number'
            ? (err as { code: number }).code
            : -1
          : 0;
        resolve({ code, stdout, stderr: err && code === -1 ? `${stderr}\n${err.message}` : stderr });
      },
    );
    child.stdin?.end();
  });
}

/**
 * Pushes busybox plus a layer of its own (/etc/berth-image holding `repo`), so
 * that pulling it really downloads and extracts something.
 */
export async function pushFreshImage(
  registry: Registry,
  repo: string,
  tag = 'latest',
): Promise<{ ref: string; digest: string }> {
  const own = await buildLayer([{ path: 'etc/berth-image', content: `${repo}\n` }]);
  const image = buildImage({
    layers: [await busyboxLayer(), own],
    config: { ...BUSYBOX_CONFIG, Labels: { 'berth.test': repo } },
  });
  const digest = await pushImage(registry, repo, tag, image);
  return { ref: `${registry.host}/${repo}:${tag}`, digest };
}

// ------------------------------------------------------------------ Python

/** Debian's interpreter, where python3-docker (5.0.3) is installed; not whatever python3 is first on PATH. */
export const PYTHON = '/usr/bin/python3';

/**
 * Runs a python3-docker script against `d`. The script sees `client`
 * (`docker.DockerClient(base_url='unix://…')`), `docker` (DOCKER_HOST is set
 * for docker.from_env()), and `emit(key, value)`,
 * which records a value (bytes as latin-1 text, objects as their repr() when
 * JSON cannot hold them); the result maps each key to its value.
 */
export async function runPython(
  d: Daemon,
  script: string,
): Promise<{ values: Record<string, any>; result: ProcResult }> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'berth-py-'));
  try {
    const file = path.join(dir, 'client.py');
    const prelude = [
      'import json, sys',
      'import docker',
      `client = docker.DockerClient(base_url=${JSON.stringify(d.host)})`,
      'def _plain(v):',
      '    if isinstance(v, bytes): return {"bytes": v.decode("latin-1")}',
      '    if isinstance(v, (list, tuple)): return [_plain(x) for x in v]',
      '    if isinstance(v, dict): return {str(k): _plain(x) for k, x in v.items()}',
      '    if v is None or isinstance(v, (str, int, float, bool)): return v',
      '    return {"repr": repr(v)}',
      'def emit(key, value):',
      '    print(json.dumps({"key": key, "value": _plain(value)}), flush=True)',
      '',
    ].join('\n');
    writeFileSync(file, `${prelude}\n${script}\n`);
    // DOCKER_HOST too, for scripts that use docker.from_env().
    const result = await runProcess(PYTHON, [file], { env: { DOCKER_HOST: d.host } });
    const values: Record<string, any> = {};
    for (const line of result.stdout.split('\n').filter(Boolean)) {
      const { key, value } = JSON.parse(line) as { key: string; value: unknown };
      values[key] = value;
    }
    return { values, result };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

// ------------------------------------------------------------------ Go

/** test/clients/go/main.go: one program with a subcommand per sequence. */
export const GO_CLIENT_SOURCE = path.join(ROOT, 'test/clients/go');
/** Debian's golang-github-docker-docker-dev and its dependencies, as a GOPATH. */
const DEBIAN_GOPATH = '/usr/share/gocode';
/** Kept between test runs: a cold build compiles the SDK and its dependencies. */
const GO_CACHE = path.join(os.tmpdir(), 'berth-go-cache');

export interface GoClient {
  /** Runs the client with DOCKER_HOST set to `d` and parses its one JSON line. */
  run(d: Daemon, args: string[]): Promise<{ out: Record<string, any>; result: ProcResult }>;
  cleanup(): void;
}

/** Builds the Go client once (GOPATH mode, no modules, no network) into a temp dir. */
export async function buildGoClient(): Promise<GoClient> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'berth-go-'));
  mkdirSync(GO_CACHE, { recursive: true });
  const bin = path.join(dir, 'berth-go-client');
  const env = {
    GO111MODULE: 'off',
    GOPATH: `${dir}:${DEBIAN_GOPATH}`,
    GOCACHE: GO_CACHE,
    GOFLAGS: '',
    GOPROXY: 'off',
    CGO_ENABLED: '0',
  };
  const built = await runProcess('go', ['build', '-o', bin, 'main.go'], {
    env,
    cwd: GO_CLIENT_SOURCE,
    timeoutMs: 300_000,
  });
  if (built.code !== 0) {
    rmSync(dir, { recursive: true, force: true });
    throw new Error(`go build failed (${built.code}): ${built.stderr}`);
  }
  return {
    async run(d, args) {
      const result = await runProcess(bin, args, { env: { DOCKER_HOST: d.host } });
      if (result.code !== 0) throw new Error(`go client ${args.join(' ')} exited ${result.code}: ${result.stderr}`);
      return { out: JSON.parse(result.stdout), result };
    },
    cleanup: () => rmSync(dir, { recursive: true, force: true }),
  };
}
