// Debian's docker-compose (1.29, on docker-py) `build:` against berthd with
// its own default bridge: a service built from a multi-stage Dockerfile with
// `target`, `args` and a .dockerignore, then run by `up`; a rebuild from the
// cache; a changed file invalidating from its COPY on; a service whose build
// fails; and the same build through the docker CLI
// (COMPOSE_DOCKER_CLI_BUILD=1, classic builder).
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildLeftovers, cacheHits, FAILING_RUN_ERROR, UNUSED_WARNING, writeContext } from '../harness/build.js';
import { type ProcResult, runProcess } from '../harness/clients.js';
import { useEnv } from '../harness/env.js';
import { networkSetup, tearDownAfterAll } from '../harness/network.js';

/** Debian's package (scripts/setup.sh installs it), not whatever docker-compose is first on PATH. */
const COMPOSE = '/usr/bin/docker-compose';
const PROJECT = 'berthbuild';

const net = networkSetup();
tearDownAfterAll(net);
const ctx = useEnv({ args: net.args });
let dir: string;

const compose = (args: string[], env: Record<string, string> = {}): Promise<ProcResult> =>
  runProcess(COMPOSE, ['-p', PROJECT, ...args], {
    cwd: dir,
    env: {
      DOCKER_HOST: ctx.daemon.host,
      COMPOSE_INTERACTIVE_NO_CLI: '1',
      COMPOSE_DOCKER_CLI_BUILD: '0',
      ...env,
    },
    timeoutMs: 180_000,
  });

const ok = async (args: string[], env: Record<string, string> = {}): Promise<ProcResult> => {
  const r = await compose(args, env);
  if (r.code !== 0) throw new Error(`docker-compose ${args.join(' ')} exited ${r.code}: ${r.stdout}\n${r.stderr}`);
  return r;
};

beforeAll(() => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'berth-compose-build-'));
  const base = ctx.env.busybox;
  writeContext(dir, {
    'docker-compose.yml': [
      'version: "3.8"',
      'services:',
      '  app:',
      '    build:',
      '      context: ./app',
      '      target: final',
      '      args:',
      `        BASE: ${base}`,
      '        GREETING: hello-compose',
      '        UNUSED: x',
      '      labels:',
      '        org.example.from: compose',
      `    image: ${PROJECT}_app:built`,
      '    command: ["sh", "-c", "cat /greeting.txt /data.txt; ls /ctx"]',
      '  broken:',
      '    build: ./broken',
      '    profiles: [broken]',
      '',
    ].join('\n'),
    'app/Dockerfile': [
      'ARG BASE',
      'FROM ${BASE} AS builder',
      'ARG GREETING=hi',
      'RUN echo "$GREETING" > /greeting.txt',
      '',
      'FROM ${BASE} AS final',
      'COPY --from=builder /greeting.txt /greeting.txt',
      'COPY data.txt /data.txt',
      'COPY . /ctx/',
      '',
      'FROM final AS later',
      'RUN exit 9',
      '',
    ].join('\n'),
    'app/.dockerignore': 'ignored*\n',
    'app/data.txt': 'data-1\n',
    'app/ignored.txt': 'never\n',
    'broken/Dockerfile': `FROM ${base}\nRUN echo before the failure\nRUN exit 3\n`,
  });
});

afterAll(async () => {
  if (dir) await compose(['down', '--timeout', '1', '--rmi', 'all']);
  rmSync(dir, { recursive: true, force: true });
});

describe('docker-compose 1.29 build:', () => {
  it('builds the target with args and labels, warns about the unused arg; up runs it', async () => {
    const r = await ok(['build', 'app']);
    // The ARG before the first FROM is a step of its own, and the labels make one more at the end.
    expect(r.stdout + r.stderr).toContain('Step 1/9 : ARG BASE\n');
    expect(r.stdout + r.stderr).toContain('Step 9/9 : LABEL org.example.from=compose');
    expect(r.stdout + r.stderr).toContain(UNUSED_WARNING);
    expect(r.stdout + r.stderr).toMatch(new RegExp(`Successfully tagged ${PROJECT}_app:built`));
    const image = (await ctx.daemon.request('GET', `/images/${PROJECT}_app:built/json`)).json;
    expect(image.Config.Labels).toEqual({ 'org.example.from': 'compose' });
    await ok(['up', '--no-build', 'app']);
    const logs = await ok(['logs', '--no-color', 'app']);
    expect(logs.stdout).toMatch(/hello-compose\n.*data-1\n.*Dockerfile\n.*data.txt\n/s);
    expect(logs.stdout).not.toContain('ignored');
    await ok(['rm', '-f', '-s', 'app']);
  });

  it('rebuilds from the cache; a changed file invalidates from its COPY on', async () => {
    const again = await ok(['build', 'app']);
    const out = again.stdout + again.stderr;
    // ARG GREETING, RUN, COPY --from, COPY data.txt, COPY . and the labels step (ARG BASE and FROM never say it).
    expect(cacheHits(out)).toBe(6);
    writeFileSync(path.join(dir, 'app/data.txt'), 'data-2\n');
    const changed = await ok(['build', 'app']);
    const text = changed.stdout + changed.stderr;
    // The builder stage and COPY --from stay cached; COPY data.txt and everything after it are made again.
    expect(text).toMatch(/COPY --from=builder \/greeting.txt \/greeting.txt\n ---> Using cache\n/);
    expect(text).toMatch(/COPY data.txt \/data.txt\n ---> [0-9a-f]{12}\n/);
    expect(cacheHits(text)).toBe(3);
    // What the build made, read by compose itself. The command waits a second: compose 1.29's dockerpty
    // attaches only after the start (its sockets() is a lazy map), so the output of a command that ends
    // at once is gone before it attaches, with any engine fast enough (logs=False: no history).
    const r = await ok(['run', '--rm', '-T', '--no-deps', 'app', 'sh', '-c', 'sleep 1; cat /data.txt']);
    expect(r.stdout).toBe('data-2\n');
  });

  it('a failing RUN fails the build with its message', async () => {
    const r = await compose(['--profile', 'broken', 'build', 'broken']);
    expect(r.code).not.toBe(0);
    expect(r.stdout + r.stderr).toContain('before the failure');
    expect(r.stdout + r.stderr).toContain(FAILING_RUN_ERROR);
  });

  it('COMPOSE_DOCKER_CLI_BUILD=1: the same build through the docker CLI', async () => {
    const r = await ok(['build', 'app'], { COMPOSE_DOCKER_CLI_BUILD: '1', DOCKER_BUILDKIT: '0' });
    const out = r.stdout + r.stderr;
    expect(out).toContain('Step 1/9 : ARG BASE\n');
    expect(out).toContain('Successfully tagged');
    // The CLI's context is the same as docker-py's: everything comes from the cache.
    expect(cacheHits(out)).toBe(6);
  });

  it("leaves no build container behind but the failed RUN step's (compose builds without forcerm)", async () => {
    expect(await buildLeftovers(ctx.daemon)).toEqual({ others: [], failedSteps: ["/bin/sh -c 'exit 3'"] });
  });
});
