// Debian's docker-compose (1.29, Python, on docker-py) against a berthd with
// its own default bridge: a two-service project where `web` publishes a port
// and `client` reaches `web` by its service name on the project's network;
// `down` removes the containers, the network and its bridge.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ProcResult, runProcess } from '../harness/clients.js';
import { waitFor } from '../harness/daemon.js';
import { useEnv } from '../harness/env.js';
import { httpGetWhenUp } from '../harness/http.js';
import { networkSetup, tearDownAfterAll } from '../harness/network.js';

/** Debian's package (scripts/setup.sh installs it), not whatever docker-compose is first on PATH. */
const COMPOSE = '/usr/bin/docker-compose';
const PROJECT = 'berthpair';

const net = networkSetup();
tearDownAfterAll(net);
const ctx = useEnv({ args: net.args });
let dir: string;

/** docker-compose in the project's directory, bound to the test daemon; its result whatever the exit code. */
const compose = (args: string[]): Promise<ProcResult> =>
  runProcess(COMPOSE, ['-p', PROJECT, ...args], {
    cwd: dir,
    env: { DOCKER_HOST: ctx.daemon.host, COMPOSE_INTERACTIVE_NO_CLI: '1' },
    timeoutMs: 120_000,
  });

const ok = async (args: string[]): Promise<string> => {
  const r = await compose(args);
  if (r.code !== 0) throw new Error(`docker-compose ${args.join(' ')} exited ${r.code}: ${r.stderr}`);
  return r.stdout;
};

beforeAll(() => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'berth-compose-'));
  const image = ctx.env.busybox;
  const web = 'mkdir -p /www && echo hello from web > /www/index.html && exec httpd -f -p 80 -h /www';
  writeFileSync(
    path.join(dir, 'docker-compose.yml'),
    [
      'version: "3.8"',
      'services:',
      '  web:',
      `    image: ${image}`,
      `    command: ["sh", "-c", ${JSON.stringify(web)}]`,
      '    ports:',
      '      - "80"',
      '  client:',
      `    image: ${image}`,
      '    command: ["sleep", "300"]',
      '    depends_on: [web]',
      '',
    ].join('\n'),
  );
});

afterAll(async () => {
  // A failed test must not leave the project running for the daemon's clean-up to trip on.
  if (dir) await compose(['down', '--timeout', '1']);
  rmSync(dir, { recursive: true, force: true });
});

describe('docker-compose 1.29: two services on the project network', () => {
  let networkId: string;

  it('up -d creates the network and both services, running', async () => {
    await ok(['up', '-d']);
    const nets = (await ctx.daemon.request('GET', `/networks/${PROJECT}_default`)).json;
    expect(nets.Driver).toBe('bridge');
    networkId = nets.Id;
    const running = await ok(['ps', '--services', '--filter', 'status=running']);
    expect(running.trim().split('\n').sort()).toEqual(['client', 'web']);
  });

  it("publishes web's port: `port` names it and curl from the host gets the page", async () => {
    const port = Number(/:(\d+)\s*$/.exec(await ok(['port', 'web', '80']))?.[1]);
    expect(port).toBeGreaterThan(0);
    expect(await httpGetWhenUp('127.0.0.1', port, 'web on its published port')).toBe('hello from web\n');
    const curl = execFileSync('curl', ['-sS', '--max-time', '5', `http://127.0.0.1:${port}/`], { encoding: 'utf8' });
    expect(curl).toBe('hello from web\n');
  });

  it('client reaches web by its service name (and by its container name)', async () => {
    for (const host of ['web', `${PROJECT}_web_1`]) {
      // No `wget -T`: Debian's busybox 1.35 (the test image's) crashes on it.
      const body = await waitFor(async () => {
        const r = await compose(['exec', '-T', 'client', 'wget', '-q', '-O', '-', `http://${host}/`]);
        return r.code === 0 ? r.stdout : undefined;
      }, `client to reach ${host}`);
      expect(body).toBe('hello from web\n');
    }
  });

  it('down leaves no container, no network and no bridge', async () => {
    await ok(['down', '--timeout', '1']);
    const left = (await ctx.daemon.request('GET', '/containers/json?all=1')).json as { Names: string[] }[];
    expect(left.flatMap((c) => c.Names)).toEqual([]);
    const nets = (await ctx.daemon.request('GET', '/networks')).json as { Name: string }[];
    expect(nets.map((n) => n.Name).sort()).toEqual(['bridge', 'host', 'none']);
    const links = JSON.parse(execFileSync('ip', ['-j', 'link', 'show'], { encoding: 'utf8' })) as { ifname: string }[];
    expect(links.map((l) => l.ifname)).not.toContain(`br-${networkId.slice(0, 12)}`);
  });
});

describe('docker-compose 1.29: a project with two networks and a service on both', () => {
  const project = 'berthtwo';
  let twoDir: string;
  const two = (args: string[]) =>
    runProcess(COMPOSE, ['-p', project, ...args], {
      cwd: twoDir,
      env: { DOCKER_HOST: ctx.daemon.host, COMPOSE_INTERACTIVE_NO_CLI: '1' },
      timeoutMs: 120_000,
    });

  beforeAll(() => {
    twoDir = mkdtempSync(path.join(os.tmpdir(), 'berth-compose-'));
    const service = (nets: string[]) => [
      `    image: ${ctx.env.busybox}`,
      '    command: ["sleep", "300"]',
      `    networks: [${nets.join(', ')}]`,
    ];
    writeFileSync(
      path.join(twoDir, 'docker-compose.yml'),
      [
        'version: "3.8"',
        'services:',
        '  a:',
        ...service(['front']),
        '  b:',
        ...service(['back']),
        '  both:',
        ...service(['front', 'back']),
        'networks:',
        '  front: {}',
        '  back: {}',
        '',
      ].join('\n'),
    );
  });

  afterAll(async () => {
    if (twoDir) await two(['down', '--timeout', '1']);
    rmSync(twoDir, { recursive: true, force: true });
  });

  it('up -d starts its three services at once, every time (3 rounds of up and down)', async () => {
    for (let round = 0; round < 3; round++) {
      const up = await two(['up', '-d']);
      expect({ round, code: up.code, stderr: up.code ? up.stderr : '' }).toEqual({ round, code: 0, stderr: '' });
      const running = await two(['ps', '--services', '--filter', 'status=running']);
      expect(running.stdout.trim().split('\n').sort()).toEqual(['a', 'b', 'both']);
      // `both` resolves a service of each network by name.
      for (const peer of ['a', 'b']) {
        const r = await two(['exec', '-T', 'both', 'nslookup', peer]);
        expect({ round, peer, code: r.code }).toEqual({ round, peer, code: 0 });
      }
      expect((await two(['down', '--timeout', '1'])).code).toBe(0);
    }
  }, 600_000);
});
