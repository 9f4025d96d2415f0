// Container config fields as real clients send them (issue 27): the docker
// CLI's --domainname, --security-opt systempaths=unconfined (empty
// MaskedPaths and ReadonlyPaths), --runtime and --platform; docker-compose
// 1.29's `run --rm` of a service on network_mode none that has links; the
// Python SDK's domainname and network_disabled.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dockerCli, type Cli } from '../harness/cli.js';
import { type ProcResult, runProcess, runPython } from '../harness/clients.js';
import { useEnv } from '../harness/env.js';

const ctx = useEnv();
let docker: Cli;
let image: string;

beforeAll(() => {
  docker = dockerCli(ctx.daemon);
  image = ctx.env.busybox;
});

describe('the docker CLI', () => {
  // hostname -d reads the domain from /etc/hosts' line of the container's own, which a container
  // with no address has none of (as on dockerd): networks.test.ts holds it on a bridge.
  it('run --hostname --domainname: the host and NIS domain names', async () => {
    const out = await docker.ok([
      'run',
      '--rm',
      '--hostname',
      'web',
      '--domainname',
      'example.org',
      image,
      'sh',
      '-c',
      'cat /proc/sys/kernel/domainname; hostname',
    ]);
    expect(out.split('\n')).toEqual(['example.org', 'web', '']);
  });

  it('inspect lists the masked and read-only paths; systempaths=unconfined empties both', async () => {
    const id = (await docker.ok(['create', image, 'true'])).trim();
    const paths = JSON.parse(await docker.ok(['inspect', '--format', '{{json .HostConfig.MaskedPaths}}', id]));
    expect(paths).toContain('/proc/keys');
    const open = (
      await docker.ok([
        'run',
        '--rm',
        '--security-opt',
        'systempaths=unconfined',
        image,
        'sh',
        '-c',
        '[ -c /proc/keys ] && echo masked || echo plain',
      ])
    ).trim();
    expect(open).toBe('plain');
    const id2 = (await docker.ok(['create', '--security-opt', 'systempaths=unconfined', image, 'true'])).trim();
    expect(
      (
        await docker.ok([
          'inspect',
          '--format',
          '{{json .HostConfig.MaskedPaths}} {{json .HostConfig.ReadonlyPaths}}',
          id2,
        ])
      ).trim(),
    ).toBe('[] []');
  });

  it("--runtime: the default's name is taken and shown; an unknown one is refused in dockerd's words", async () => {
    const id = (await docker.ok(['create', '--runtime', 'runc', image, 'true'])).trim();
    expect((await docker.ok(['inspect', '--format', '{{.HostConfig.Runtime}}', id])).trim()).toBe('runc');
    const r = await docker(['create', '--runtime', 'nope', image, 'true']);
    expect([r.code, r.stderr.trim()]).toEqual([1, 'Error response from daemon: Unknown runtime specified nope']);
  });

  it('--platform of the image runs; another is not found', async () => {
    const arch = os.arch() === 'x64' ? 'amd64' : os.arch();
    const out = await docker.ok(['run', '--rm', '--platform', `linux/${arch}`, image, 'echo', 'ran']);
    expect(out).toBe('ran\n');
    // --pull never: the CLI would otherwise try the registry for the other platform first.
    const r = await docker(['create', '--pull', 'never', '--platform', 'linux/s390x', image, 'true']);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('does not match the specified platform: wanted linux/s390x');
  });
});

describe('docker-compose 1.29', () => {
  const COMPOSE = '/usr/bin/docker-compose';
  const PROJECT = 'berthlinksnone';
  let dir: string;
  const compose = (args: string[]): Promise<ProcResult> =>
    runProcess(COMPOSE, ['-p', PROJECT, ...args], {
      cwd: dir,
      env: { DOCKER_HOST: ctx.daemon.host, COMPOSE_INTERACTIVE_NO_CLI: '1' },
      timeoutMs: 120_000,
    });

  beforeAll(() => {
    dir = mkdtempSync(path.join(os.tmpdir(), 'berth-compose-'));
    writeFileSync(
      path.join(dir, 'docker-compose.yml'),
      [
        'version: "2.4"',
        'services:',
        '  db:',
        `    image: ${image}`,
        '    command: ["sleep", "300"]',
        '    network_mode: none',
        '  job:',
        `    image: ${image}`,
        '    command: ["sh", "-c", "exit 7"]',
        '    network_mode: none',
        '    links: [db]',
        '',
      ].join('\n'),
    );
  });

  afterAll(async () => {
    if (dir) await compose(['down', '--timeout', '1']);
    rmSync(dir, { recursive: true, force: true });
  });

  it('run --rm of a service on network_mode none with links: links do nothing there, it runs', async () => {
    // Its exit status is the container's: it ran (the output of so short a run is not what is tested here).
    const r = await compose(['run', '--rm', 'job']);
    expect(r.code, r.stderr).toBe(7);
    expect(r.stderr).not.toMatch(/do nothing/);
  });
});

describe('the Python SDK', () => {
  it('domainname and network_disabled are applied', async () => {
    const { values, result } = await runPython(
      ctx.daemon,
      `
out = client.containers.run(${JSON.stringify(image)}, ["sh", "-c", "cat /proc/sys/kernel/domainname; cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '"],
    hostname="py", domainname="example.net", network_disabled=True, network_mode="host", remove=True)
emit('out', out.decode())
`,
    );
    expect(result.code, result.stderr).toBe(0);
    expect(values.out).toBe('example.net\nlo\n');
  });
});
