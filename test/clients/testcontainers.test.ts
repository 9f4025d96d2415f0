// testcontainers-node (npm `testcontainers`, 11.x: the last line that runs on
// Node 20 as well as 24; 12.x needs Node 22) against a berthd with its own
// default bridge, as a test suite would use it: a container with an exposed
// port reached through getMappedPort, a Network with two containers, one
// reaching the other by its alias, files, directories and content copied in
// and an archive copied out, and bind mounts. Ryuk (the reaper container) is off, as the
// issue asks; what the tests start they stop.
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GenericContainer, Network, type StartedNetwork, type StartedTestContainer, Wait } from 'testcontainers';
import { useEnv } from '../harness/env.js';
import { httpGetText } from '../harness/http.js';
import { networkSetup, tearDownAfterAll } from '../harness/network.js';
import { tarEntries } from '../harness/tar.js';

const net = networkSetup();
tearDownAfterAll(net);
const ctx = useEnv({ args: net.args });

const WEB = [
  'sh',
  '-c',
  'mkdir -p /www && echo hello from $(hostname) > /www/index.html && exec httpd -f -p 80 -h /www',
];
const started: StartedTestContainer[] = [];
const networks: StartedNetwork[] = [];

beforeAll(() => {
  // testcontainers reads its configuration from the environment the first time it needs the runtime.
  process.env.DOCKER_HOST = ctx.daemon.host;
  process.env.TESTCONTAINERS_RYUK_DISABLED = 'true';
});

afterAll(async () => {
  for (const c of started.splice(0)) await c.stop({ timeout: 1 }).catch(() => undefined);
  for (const n of networks.splice(0)) await n.stop().catch(() => undefined);
});

/** Starts it and remembers it for the clean-up. */
async function start(c: GenericContainer): Promise<StartedTestContainer> {
  const s = await c.start();
  started.push(s);
  return s;
}

describe('testcontainers-node', () => {
  it('starts a container with an exposed port, reachable from the host on getMappedPort', async () => {
    const web = await start(
      new GenericContainer(ctx.env.busybox)
        .withCommand(WEB)
        .withExposedPorts(80)
        .withWaitStrategy(Wait.forHttp('/', 80)),
    );
    const port = web.getMappedPort(80);
    expect(port).toBeGreaterThan(0);
    expect(await httpGetText(web.getHost(), port)).toBe(`hello from ${web.getHostname()}\n`);
    expect(await httpGetText('127.0.0.1', port)).toMatch(/^hello from /);
    await web.stop({ timeout: 1 });
    started.splice(started.indexOf(web), 1);
    // stop() removes it: no container is left behind.
    expect((await ctx.daemon.request('GET', `/containers/${web.getId()}/json`)).status).toBe(404);
  });

  it('puts two containers on a Network, one reaching the other by its alias', async () => {
    const network = await new Network().start();
    networks.push(network);
    const server = await start(
      new GenericContainer(ctx.env.busybox)
        .withCommand(WEB)
        .withNetwork(network)
        .withNetworkAliases('backend', 'api')
        .withExposedPorts(80),
    );
    const client = await start(
      new GenericContainer(ctx.env.busybox)
        .withCommand(['sleep', '300'])
        .withNetwork(network)
        .withNetworkAliases('frontend'),
    );
    // With aliases, testcontainers creates on the default bridge and then connects to the network (as on dockerd).
    expect(server.getNetworkNames().sort()).toEqual(['bridge', network.getName()].sort());
    for (const alias of ['backend', 'api']) {
      // No `wget -T`: Debian's busybox 1.35 (the test image's) crashes on it.
      const r = await client.exec(['wget', '-q', '-O', '-', `http://${alias}/`]);
      expect(r.exitCode, r.output).toBe(0);
      expect(r.output).toBe(`hello from ${server.getHostname()}\n`);
    }
    // The aliases are the network's own: the server resolves the client's.
    const back = await server.exec(['nslookup', 'frontend']);
    expect(back.output).toContain(client.getIpAddress(network.getName()));
    for (const c of [client, server]) {
      await c.stop({ timeout: 1 });
      started.splice(started.indexOf(c), 1);
    }
    await network.stop();
    networks.splice(networks.indexOf(network), 1);
    expect((await ctx.daemon.request('GET', `/networks/${network.getId()}`)).status).toBe(404);
  });
  it('copies files, directories and content in, before and after start, and an archive back out', async () => {
    const host = mkdtempSync(path.join(os.tmpdir(), 'berth-tc-'));
    writeFileSync(path.join(host, 'script.sh'), '#!/bin/sh\necho from a file\n');
    mkdirSync(path.join(host, 'tree', 'sub'), { recursive: true });
    writeFileSync(path.join(host, 'tree', 'top.txt'), 'top');
    writeFileSync(path.join(host, 'tree', 'sub', 'low.txt'), 'low');
    const c = await start(
      new GenericContainer(ctx.env.busybox)
        .withCommand(['sleep', '300'])
        .withCopyFilesToContainer([{ source: path.join(host, 'script.sh'), target: '/opt/run.sh', mode: 0o755 }])
        .withCopyDirectoriesToContainer([{ source: path.join(host, 'tree'), target: '/srv/tree' }])
        .withCopyContentToContainer([{ content: 'before start', target: '/etc/app/before.conf' }]),
    );
    const run = await c.exec(['/opt/run.sh']);
    expect(run.exitCode, run.output).toBe(0);
    expect(run.output).toBe('from a file\n');
    expect((await c.exec(['cat', '/srv/tree/top.txt', '/srv/tree/sub/low.txt', '/etc/app/before.conf'])).output).toBe(
      'toplowbefore start',
    );
    // The same calls on the running container.
    await c.copyFilesToContainer([{ source: path.join(host, 'script.sh'), target: '/late/copy.sh' }]);
    await c.copyDirectoriesToContainer([{ source: path.join(host, 'tree'), target: '/late/tree' }]);
    await c.copyContentToContainer([
      { content: Buffer.from('bytes'), target: '/late/buffer.bin' },
      { content: Readable.from(['streamed ', 'text']), target: '/late/stream.txt', mode: 0o600 },
    ]);
    const late = await c.exec([
      'sh',
      '-c',
      'cat /late/copy.sh /late/tree/sub/low.txt /late/buffer.bin /late/stream.txt',
    ]);
    expect(late.output).toBe('#!/bin/sh\necho from a file\nlowbytesstreamed text');
    expect((await c.exec(['stat', '-c', '%a', '/opt/run.sh', '/late/stream.txt'])).output).toBe('755\n600\n');

    // Out: a tar of the directory, named by its base name, with what the container wrote into it.
    await c.exec(['sh', '-c', 'echo made inside > /srv/tree/sub/inside.txt']);
    const entries = await tarEntries(await c.copyArchiveFromContainer('/srv/tree'));
    expect(entries.map(([name, body]) => [name, body])).toEqual(
      expect.arrayContaining([
        ['tree/', ''],
        ['tree/top.txt', 'top'],
        ['tree/sub/low.txt', 'low'],
        ['tree/sub/inside.txt', 'made inside\n'],
      ]),
    );
    const [[name, body, mode]] = (await tarEntries(await c.copyArchiveFromContainer('/opt/run.sh'))) as [
      [string, string, number],
    ];
    expect([name, body, mode & 0o777]).toEqual(['run.sh', '#!/bin/sh\necho from a file\n', 0o755]);
    await expect(c.copyArchiveFromContainer('/no/such/path')).rejects.toThrow(/Could not find the file/);
  });

  it('bind-mounts host directories read-write and read-only', async () => {
    const rw = mkdtempSync(path.join(os.tmpdir(), 'berth-tc-rw-'));
    const ro = mkdtempSync(path.join(os.tmpdir(), 'berth-tc-ro-'));
    writeFileSync(path.join(ro, 'config'), 'from the host');
    const c = await start(
      new GenericContainer(ctx.env.busybox).withCommand(['sleep', '300']).withBindMounts([
        { source: rw, target: '/out' },
        { source: ro, target: '/config', mode: 'ro' },
      ]),
    );
    expect((await c.exec(['cat', '/config/config'])).output).toBe('from the host');
    const write = await c.exec(['sh', '-c', 'echo written inside > /out/result']);
    expect(write.exitCode, write.output).toBe(0);
    expect(readFileSync(path.join(rw, 'result'), 'utf8')).toBe('written inside\n');
    const refused = await c.exec(['sh', '-c', 'echo x > /config/new']);
    expect(refused.exitCode).not.toBe(0);
    expect(refused.output).toMatch(/Read-only file system/);
    // A file the host changes meanwhile is seen at once: a bind, not a copy.
    writeFileSync(path.join(ro, 'config'), 'changed on the host');
    expect((await c.exec(['cat', '/config/config'])).output).toBe('changed on the host');
    // `docker cp`'s archive sees the container's view through the bind, too.
    const out = await tarEntries(await c.copyArchiveFromContainer('/out/result'));
    expect(out.map(([n, b]) => [n, b])).toEqual([['result', 'written inside\n']]);
  });
});
