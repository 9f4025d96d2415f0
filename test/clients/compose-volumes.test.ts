// Debian's docker-compose (1.29, on docker-py) with a named volume two services
// share: what one writes the other reads, the volume survives `down`, and
// `down -v` removes it. Services run without networking (network_mode: none),
// so compose makes no network on this daemon without a bridge.
import { execFile } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { dockerCli, type Cli } from '../harness/cli.js';
import { waitFor } from '../harness/daemon.js';
import { useEnv } from '../harness/env.js';

const ctx = useEnv();
/** Waits, ending at once on compose's SIGTERM (sh as PID 1 ignores it untrapped: each down would take 10 s). */
const IDLE = 'trap "exit 0" TERM; while :; do sleep 1; done';
let docker: Cli;
let dir: string;

beforeAll(() => {
  docker = dockerCli(ctx.daemon);
  dir = mkdtempSync(path.join(os.tmpdir(), 'berth-compose-'));
  const service = (command: string) => ({
    image: ctx.env.busybox,
    network_mode: 'none',
    command: ['sh', '-c', command],
    volumes: ['data:/data'],
  });
  // JSON is YAML: the file needs no YAML writer.
  const file = {
    version: '3.7',
    services: {
      writer: service(`echo written >> /data/f; ${IDLE}`),
      reader: service(IDLE),
    },
    volumes: { data: {} },
  };
  writeFileSync(path.join(dir, 'docker-compose.yml'), JSON.stringify(file));
});

function compose(args: string[]): Promise<string> {
  return new Promise((resolve, reject) =>
    execFile(
      'docker-compose',
      ['-p', 'vt', ...args],
      { cwd: dir, env: { ...process.env, DOCKER_HOST: ctx.daemon.host }, timeout: 120_000 },
      (err, stdout, stderr) =>
        err ? reject(new Error(`docker-compose ${args.join(' ')}: ${stderr}`)) : resolve(stdout),
    ),
  );
}

const readerSees = (lines: number) =>
  waitFor(async () => {
    const r = await docker(['exec', 'vt_reader_1', 'cat', '/data/f']);
    return r.code === 0 && r.stdout.split('\n').filter(Boolean).length === lines ? r.stdout : undefined;
  }, `the reader to see ${lines} line(s)`);

describe('docker-compose with a named volume', () => {
  it('shares it between services, keeps it across down, removes it with down -v', async () => {
    await compose(['up', '-d']);
    expect(await readerSees(1)).toBe('written\n');
    const labels = JSON.parse(await docker.ok(['volume', 'inspect', '-f', '{{json .Labels}}', 'vt_data']));
    expect(labels).toMatchObject({ 'com.docker.compose.project': 'vt', 'com.docker.compose.volume': 'data' });
    await compose(['down']);
    expect((await docker.ok(['ps', '-a', '-q'])).trim()).toBe('');
    expect(await docker.ok(['volume', 'ls', '-q'])).toContain('vt_data');
    // Up again: the writer appends to what the volume kept.
    await compose(['up', '-d']);
    expect(await readerSees(2)).toBe('written\nwritten\n');
    await compose(['down', '-v']);
    expect(await docker.ok(['volume', 'ls', '-q'])).not.toContain('vt_data');
  }, 180_000);
});
