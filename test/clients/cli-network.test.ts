// The docker CLI's network verbs against a berthd with its own default bridge:
// network create/ls/inspect/connect/disconnect/rm/prune, run -p and -P,
// docker port, the PORTS column, and names on a user network.
import http from 'node:http';
import { beforeAll, describe, expect, it } from 'vitest';
import { dockerCli, type Cli } from '../harness/cli.js';
import { waitFor } from '../harness/daemon.js';
import { useEnv } from '../harness/env.js';
import { networkSetup, tearDownAfterAll } from '../harness/network.js';

const net = networkSetup();
tearDownAfterAll(net);
const ctx = useEnv({ args: net.args });
let docker: Cli;
let image: string;

beforeAll(() => {
  docker = dockerCli(ctx.daemon);
  image = ctx.env.busybox;
});

const ok = (args: string[]) => docker.ok(args);

const get = (port: number) =>
  new Promise<string>((resolve, reject) => {
    http
      .get({ host: '127.0.0.1', port, path: '/', timeout: 5000 }, (res) => {
        let body = '';
        res.on('data', (c) => {
          body += c;
        });
        res.on('end', () => resolve(body));
      })
      .on('error', reject);
  });

const WEB = ['sh', '-c', 'mkdir -p /www && echo hi > /www/index.html && exec httpd -f -p 80 -h /www'];

describe('docker network', () => {
  it('create, ls, inspect, rm, prune', async () => {
    const id = (await ok(['network', 'create', '--subnet', '10.98.5.0/24', '--label', 'k=v', 'front'])).trim();
    expect(id).toMatch(/^[0-9a-f]{64}$/);
    expect(await ok(['network', 'ls', '--format', '{{.Name}} {{.Driver}}'])).toMatch(/^front bridge$/m);
    expect((await ok(['network', 'inspect', '-f', '{{range .IPAM.Config}}{{.Subnet}}{{end}}', 'front'])).trim()).toBe(
      '10.98.5.0/24',
    );
    const dup = await docker(['network', 'create', 'front']);
    expect(dup.stderr).toContain('network with name front already exists');
    expect((await ok(['network', 'rm', 'front'])).trim()).toBe('front');
    await ok(['network', 'create', 'unused']);
    expect(await ok(['network', 'prune', '-f'])).toContain('unused');
    expect(await ok(['network', 'ls', '--format', '{{.Name}}'])).not.toContain('unused');
  });

  it('connect and disconnect, names on the network', async () => {
    await ok(['network', 'create', 'back']);
    await ok(['run', '-d', '--name', 'db', '--network', 'back', '--network-alias', 'database', image, ...WEB]);
    await ok(['run', '-d', '--name', 'app', image, 'sleep', '300']);
    await ok(['network', 'connect', 'back', 'app']);
    const body = await waitFor(async () => {
      const r = await docker(['exec', 'app', 'wget', '-q', '-O', '-', 'http://database/']);
      return r.code === 0 ? r.stdout : undefined;
    }, 'app to reach database by its alias');
    expect(body).toBe('hi\n');
    const containers = await ok(['network', 'inspect', '-f', '{{range .Containers}}{{.Name}} {{end}}', 'back']);
    expect(containers.trim().split(' ').sort()).toEqual(['app', 'db']);
    await ok(['network', 'disconnect', 'back', 'app']);
    expect((await docker(['exec', 'app', 'wget', '-q', '-T', '2', '-O', '-', 'http://database/'])).code).not.toBe(0);
    const busy = await docker(['network', 'rm', 'back']);
    expect(busy.stderr).toContain('has active endpoints');
    await ok(['rm', '-f', 'db', 'app']);
    await ok(['network', 'rm', 'back']);
  });
});

describe('published ports', () => {
  it('run -p and -P, docker port, the PORTS column', async () => {
    await ok(['run', '-d', '--name', 'web1', '-p', '127.0.0.1::80', image, ...WEB]);
    const port = await ok(['port', 'web1', '80']);
    const hostPort = Number(/^127\.0\.0\.1:(\d+)$/.exec(port.trim())?.[1]);
    expect(hostPort).toBeGreaterThan(0);
    expect(await waitFor(() => get(hostPort).catch(() => undefined), 'web1')).toBe('hi\n');
    expect(await ok(['ps', '--filter', 'name=web1', '--format', '{{.Ports}}'])).toContain(
      `127.0.0.1:${hostPort}->80/tcp`,
    );
    await ok(['run', '-d', '--name', 'web2', '--expose', '80', '-P', image, ...WEB]);
    const all = Number(/:(\d+)$/m.exec(await ok(['port', 'web2', '80/tcp']))?.[1]);
    expect(await waitFor(() => get(all).catch(() => undefined), 'web2')).toBe('hi\n');
    const taken = await docker(['run', '-d', '--name', 'web3', '-p', `127.0.0.1:${hostPort}:80`, image, ...WEB]);
    expect(taken.code).not.toBe(0);
    expect(taken.stderr).toContain('port is already allocated');
    await ok(['rm', '-f', 'web1', 'web2', 'web3']);
  });
});

describe('docker stats', () => {
  it('shows network I/O once traffic flowed', async () => {
    await ok(['run', '-d', '--name', 'talker', image, 'sleep', '300']);
    await ok(['exec', 'talker', 'ping', '-c', '3', '-W', '2', net.gateway]);
    const io = (await ok(['stats', '--no-stream', '--format', '{{.NetIO}}', 'talker'])).trim();
    expect(io).toMatch(/^\S+B \/ \S+B$/);
    expect(io).not.toBe('0B / 0B');
    await ok(['rm', '-f', 'talker']);
  });
});

describe('docker run --link', () => {
  it('on the default bridge: the alias resolves, the variables are set, ps shows the link name, rm --link removes it', async () => {
    await ok(['run', '-d', '--name', 'linkdb', '-e', 'SECRET=s1', '--expose', '5432', image, 'sleep', '300']);
    const ip = (await ok(['inspect', '-f', '{{.NetworkSettings.IPAddress}}', 'linkdb'])).trim();
    await ok(['run', '-d', '--name', 'linkweb', '--link', 'linkdb:db', image, 'sleep', '300']);
    expect(await ok(['exec', 'linkweb', 'cat', '/etc/hosts'])).toMatch(
      new RegExp(`^${ip.replaceAll('.', '\\.')}\\s+db\\b.*linkdb$`, 'm'),
    );
    expect((await docker(['exec', 'linkweb', 'ping', '-c', '1', '-W', '2', 'db'])).code).toBe(0);
    const env = await ok(['exec', 'linkweb', 'env']);
    expect(env).toContain(`DB_PORT=tcp://${ip}:5432`);
    expect(env).toContain('DB_ENV_SECRET=s1');
    expect(env).toContain('DB_NAME=/linkweb/db');
    expect((await ok(['inspect', '-f', '{{json .HostConfig.Links}}', 'linkweb'])).trim()).toBe(
      '["/linkdb:/linkweb/db"]',
    );
    expect((await ok(['ps', '--no-trunc', '--filter', 'name=linkdb', '--format', '{{.Names}}'])).trim()).toBe(
      'linkdb,linkweb/db',
    );
    await ok(['rm', '--link', 'linkweb/db']);
    expect((await ok(['ps', '--no-trunc', '--filter', 'name=linkdb', '--format', '{{.Names}}'])).trim()).toBe('linkdb');
    const missing = await docker(['run', '--rm', '--link', 'nosuch:x', image, 'true']);
    expect(missing.stderr).toContain('could not get container for nosuch');
    await ok(['rm', '-f', 'linkweb', 'linkdb']);
  });
});
