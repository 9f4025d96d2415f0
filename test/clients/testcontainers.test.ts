// testcontainers-node (npm `testcontainers`, 11.x: the last line that runs on
// Node 20 as well as 24; 12.x needs Node 22) against a berthd with its own
// default bridge, as a test suite would use it: a container with an exposed
// port reached through getMappedPort, and a Network with two containers, one
// reaching the other by its alias. Ryuk (the reaper container) is off, as the
// issue asks; what the tests start they stop.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GenericContainer, Network, type StartedNetwork, type StartedTestContainer, Wait } from 'testcontainers';
import { useEnv } from '../harness/env.js';
import { httpGetText } from '../harness/http.js';
import { networkSetup, tearDownAfterAll } from '../harness/network.js';

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
});
