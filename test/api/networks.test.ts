// Networks through the API, on a berthd with its own default bridge: the
// predefined networks, user networks (create, inspect, remove, prune), a
// container's interface and address, published ports reached from the host,
// names on a user network, connect and disconnect, and what a restart keeps.
import { execFileSync } from 'node:child_process';
import { randomBytes, randomInt } from 'node:crypto';
import os from 'node:os';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { waitFor, type Daemon } from '../harness/daemon.js';
import { execOnTty, runDetached, useEnv, type Env } from '../harness/env.js';
import { httpGetText as fetchText } from '../harness/http.js';
import { networkSetup, tearDownAfterAll } from '../harness/network.js';
import { HostUplink, whoAnswer } from '../harness/netns.js';
import { runPython } from '../harness/clients.js';

const net = networkSetup();
tearDownAfterAll(net);
const ctx = useEnv({ args: net.args });
let env: Env;
let d: Daemon;
beforeAll(() => {
  ({ env, daemon: d } = ctx);
});

const run = (body: Record<string, unknown>, cmd?: string[]) => runDetached(d, { Image: env.busybox, ...body }, cmd);

const exec = (id: string, cmd: string[]) => execOnTty(d, id, cmd);

const inspect = async (id: string) => (await d.request('GET', `/containers/${id}/json`)).json;

const WEB = [
  'sh',
  '-c',
  'mkdir -p /www && echo hello from $(hostname) > /www/index.html && exec httpd -f -p 80 -h /www',
];

/** The host's first non-loopback IPv4 address. */
const hostAddress = () =>
  Object.values(os.networkInterfaces())
    .flat()
    .find((a) => a && a.family === 'IPv4' && !a.internal && a.address.startsWith('192.'))?.address ??
  Object.values(os.networkInterfaces())
    .flat()
    .find((a) => a && a.family === 'IPv4' && !a.internal)!.address;

describe('the predefined networks', () => {
  it('lists bridge, host and none; the bridge with its subnet and gateway', async () => {
    const r = await d.request('GET', '/networks');
    expect(r.status).toBe(200);
    const byName = Object.fromEntries((r.json as any[]).map((n) => [n.Name, n]));
    expect(byName.bridge.Driver).toBe('bridge');
    expect(byName.host.Driver).toBe('host');
    expect(byName.none.Driver).toBe('null');
    expect(byName.bridge.IPAM.Config).toEqual([
      { Subnet: `${net.gateway.replace(/\.1$/, '.0')}/24`, Gateway: net.gateway },
    ]);
    expect(byName.bridge.Options['com.docker.network.bridge.name']).toBe(net.bridge);
  });

  it('answers GET /networks/bridge with the gateway (testcontainers asks it for the host)', async () => {
    const r = await d.request('GET', '/networks/bridge');
    expect(r.status).toBe(200);
    expect(r.json.IPAM.Config[0].Gateway).toBe(net.gateway);
  });

  it('refuses to remove or re-create a predefined network', async () => {
    const rm = await d.request('DELETE', '/networks/bridge');
    expect(rm.status).toBe(403);
    expect(rm.json.message).toBe('bridge is a pre-defined network and cannot be removed');
    const mk = await d.request('POST', '/networks/create', { body: { Name: 'host' } });
    expect(mk.status).toBe(403);
  });
});

describe('user networks', () => {
  it('are created, inspected, listed by filter, refused twice and removed', async () => {
    const c = await d.request('POST', '/networks/create', { body: { Name: 'n1', Labels: { team: 'a' } } });
    expect(c.status, c.text).toBe(201);
    const id = c.json.Id as string;
    const i = await d.request('GET', `/networks/${id.slice(0, 10)}`);
    expect(i.json).toMatchObject({
      Name: 'n1',
      Id: id,
      Driver: 'bridge',
      Scope: 'local',
      Containers: {},
      Labels: { team: 'a' },
    });
    expect(i.json.IPAM.Config[0].Subnet).toMatch(/^10\.\d+\.\d+\.0\/24$/);
    const f = await d.request('GET', `/networks?filters=${encodeURIComponent(JSON.stringify({ label: ['team=a'] }))}`);
    expect((f.json as any[]).map((n) => n.Name)).toEqual(['n1']);
    const again = await d.request('POST', '/networks/create', { body: { Name: 'n1' } });
    expect(again.status).toBe(409);
    expect(again.json.message).toBe('network with name n1 already exists');
    expect((await d.request('DELETE', '/networks/n1')).status).toBe(204);
    expect((await d.request('GET', `/networks/${id}`)).status).toBe(404);
  });

  it('takes a subnet, gateway and range as given, and refuses what it cannot apply', async () => {
    const c = await d.request('POST', '/networks/create', {
      body: {
        Name: 'n2',
        IPAM: { Config: [{ Subnet: '10.99.7.0/24', Gateway: '10.99.7.254', IPRange: '10.99.7.128/25' }] },
      },
    });
    expect(c.status, c.text).toBe(201);
    const id = await run({ HostConfig: { NetworkMode: 'n2' } });
    const ip = (await inspect(id)).NetworkSettings.Networks.n2.IPAddress;
    expect(ip).toMatch(/^10\.99\.7\.(12[89]|1[3-9]\d|2\d\d)$/);
    await d.request('DELETE', `/containers/${id}?force=1`);
    expect((await d.request('DELETE', '/networks/n2')).status).toBe(204);
    for (const body of [
      { Name: 'x1', Driver: 'macvlan' },
      { Name: 'x2', EnableIPv6: true },
      { Name: 'x3', IPAM: { Config: [{ Subnet: '10.99.8.1/24' }] } },
      { Name: 'x4', Options: { 'com.docker.network.bridge.enable_icc': 'false' } },
      // An option dockerd's bridge driver applies and berth does not.
      { Name: 'x5', Options: { 'com.docker.network.bridge.inhibit_ipv4': 'true' } },
    ]) {
      const r = await d.request('POST', '/networks/create', { body });
      expect(r.status, JSON.stringify(body)).toBe(400);
    }
    // A name the bridge driver does not read is taken and ignored, as dockerd's driver ignores it, and shown.
    const other = { 'com.example.owner': 'team-a' };
    const taken = await d.request('POST', '/networks/create', { body: { Name: 'x6', Options: other } });
    expect(taken.status, taken.text).toBe(201);
    expect((await d.request('GET', '/networks/x6')).json.Options).toEqual(other);
    expect((await d.request('DELETE', '/networks/x6')).status).toBe(204);
  });

  it('keeps AuxiliaryAddresses out of the addresses it gives, shows them, and refuses one outside the subnet', async () => {
    // The first two addresses after the gateway are reserved: the first container gets the third.
    const aux = { router: '10.99.9.2', printer: '10.99.9.3' };
    const c = await d.request('POST', '/networks/create', {
      body: { Name: 'n3', IPAM: { Config: [{ Subnet: '10.99.9.0/24', AuxiliaryAddresses: aux }] } },
    });
    expect(c.status, c.text).toBe(201);
    const ipam = (await d.request('GET', '/networks/n3')).json.IPAM;
    // No Options given: null, as dockerd shows it (the docker CLI sends {} and gets {}).
    expect(ipam).toEqual({
      Driver: 'default',
      Options: null,
      Config: [{ Subnet: '10.99.9.0/24', Gateway: '10.99.9.1', AuxiliaryAddresses: aux }],
    });
    const id = await run({ HostConfig: { NetworkMode: 'n3' } });
    expect((await inspect(id)).NetworkSettings.Networks.n3.IPAddress).toBe('10.99.9.4');
    const taken = await d.request('POST', '/containers/create', {
      body: {
        Image: env.busybox,
        HostConfig: { NetworkMode: 'n3' },
        NetworkingConfig: { EndpointsConfig: { n3: { IPAMConfig: { IPv4Address: '10.99.9.3' } } } },
      },
    });
    expect(taken.status).toBe(409);
    expect(taken.json.message).toBe('Address already in use');
    await d.request('DELETE', `/containers/${id}?force=1`);
    await d.request('DELETE', '/networks/n3');
    const outside = await d.request('POST', '/networks/create', {
      body: { Name: 'n4', IPAM: { Config: [{ Subnet: '10.99.10.0/24', AuxiliaryAddresses: { a: '10.99.11.1' } }] } },
    });
    expect(outside.status).toBe(400);
    expect(outside.json.message).toContain(
      "invalid auxiliary address a: parent subnet 10.99.10.0/24 doesn't contain this address",
    );
  });

  it('refuses removal while a container is on it; prune removes only unused ones', async () => {
    await d.request('POST', '/networks/create', { body: { Name: 'busy' } });
    await d.request('POST', '/networks/create', { body: { Name: 'idle' } });
    const id = await run({ HostConfig: { NetworkMode: 'busy' } });
    const rm = await d.request('DELETE', '/networks/busy');
    expect(rm.status).toBe(403);
    expect(rm.json.message).toContain('has active endpoints');
    const p = await d.request('POST', '/networks/prune');
    expect(p.json.NetworksDeleted).toEqual(['idle']);
    await d.request('DELETE', `/containers/${id}?force=1`);
    expect((await d.request('DELETE', '/networks/busy')).status).toBe(204);
  });
});

describe('a container on the default bridge', () => {
  it('has eth0 with its address, reaches the gateway, and leaves nothing behind when removed', async () => {
    const id = await run({ Hostname: 'foobar', Domainname: 'baz.example.com' });
    const s = (await inspect(id)).NetworkSettings;
    // Its own line in /etc/hosts: the FQDN then the bare name, on its address (libnetwork's).
    expect((await exec(id, ['cat', '/etc/hosts'])).out).toContain(`${s.IPAddress}\tfoobar.baz.example.com foobar\r\n`);
    expect(s.IPAddress).toMatch(/^10\./);
    expect(s.Gateway).toBe(net.gateway);
    expect(s.Networks.bridge.IPAddress).toBe(s.IPAddress);
    expect(s.Networks.bridge.MacAddress).toBe(s.MacAddress);
    const addr = await exec(id, ['ip', '-4', 'addr', 'show', 'eth0']);
    expect(addr.out).toContain(`${s.IPAddress}/24`);
    const ping = await exec(id, ['ping', '-c', '1', '-W', '2', net.gateway]);
    expect(ping.code, ping.out).toBe(0);
    const veth = `vb${s.EndpointID.slice(0, 12)}`;
    expect(execFileSync('ip', ['-o', 'link', 'show', 'master', net.bridge], { encoding: 'utf8' })).toContain(veth);
    expect((await d.request('DELETE', `/containers/${id}?force=1`)).status).toBe(204);
    await waitFor(
      () => !execFileSync('ip', ['-o', 'link', 'show'], { encoding: 'utf8' }).includes(veth),
      'the veth to go',
    );
  });

  it('publishes a port, reachable on 127.0.0.1 and on the host address; shown in inspect and the list', async () => {
    const id = await run(
      { ExposedPorts: { '80/tcp': {} }, HostConfig: { PortBindings: { '80/tcp': [{ HostPort: '' }] } } },
      WEB,
    );
    const ports = (await inspect(id)).NetworkSettings.Ports;
    const hostPort = Number(ports['80/tcp'][0].HostPort);
    expect(hostPort).toBeGreaterThan(1024);
    expect(ports['80/tcp'][0].HostIp).toBe('0.0.0.0');
    const body = await waitFor(() => fetchText('127.0.0.1', hostPort).catch(() => undefined), 'the web server');
    expect(body).toMatch(/^hello from /);
    expect(await fetchText(hostAddress(), hostPort)).toMatch(/^hello from /);
    const list = await d.request('GET', `/containers/json?filters=${encodeURIComponent(JSON.stringify({ id: [id] }))}`);
    expect(list.json[0].Ports).toEqual([{ IP: '0.0.0.0', PrivatePort: 80, PublicPort: hostPort, Type: 'tcp' }]);
    await d.request('DELETE', `/containers/${id}?force=1`);
  });

  it('refuses a host port already published, and the second container does not run', async () => {
    const first = await run({ HostConfig: { PortBindings: { '80/tcp': [{ HostPort: '' }] } } }, WEB);
    const port = (await inspect(first)).NetworkSettings.Ports['80/tcp'][0].HostPort;
    const c = await d.request('POST', '/containers/create', {
      body: { Image: env.busybox, Cmd: WEB, HostConfig: { PortBindings: { '80/tcp': [{ HostPort: port }] } } },
    });
    const s = await d.request('POST', `/containers/${c.json.Id}/start`);
    expect(s.status).toBe(500);
    expect(s.json.message).toContain(`Bind for 0.0.0.0:${port} failed: port is already allocated`);
    expect((await inspect(c.json.Id)).State.Running).toBe(false);
    for (const id of [first, c.json.Id]) await d.request('DELETE', `/containers/${id}?force=1`);
  });
});

describe('stats', () => {
  it("carries each interface's counters under networks, moving with traffic; none without a network", async () => {
    const id = await run({});
    const ping = await exec(id, ['ping', '-c', '3', '-W', '2', net.gateway]);
    expect(ping.code, ping.out).toBe(0);
    for (const q of ['stream=0', 'stream=0&one-shot=1']) {
      const stats = (await d.request('GET', `/containers/${id}/stats?${q}`)).json;
      expect(Object.keys(stats.networks)).toEqual(['eth0']);
      const eth0 = stats.networks.eth0;
      expect(Object.keys(eth0).sort()).toEqual(
        [
          'rx_bytes',
          'rx_dropped',
          'rx_errors',
          'rx_packets',
          'tx_bytes',
          'tx_dropped',
          'tx_errors',
          'tx_packets',
        ].sort(),
      );
      expect(eth0.rx_packets).toBeGreaterThanOrEqual(3);
      expect(eth0.tx_packets).toBeGreaterThanOrEqual(3);
      expect(eth0.rx_bytes).toBeGreaterThan(0);
      expect(eth0.tx_bytes).toBeGreaterThan(0);
    }
    const joiner = await run({ HostConfig: { NetworkMode: `container:${id}` } });
    expect(
      Object.keys((await d.request('GET', `/containers/${joiner}/stats?one-shot=1&stream=0`)).json.networks),
    ).toEqual(['eth0']);
    const none = await run({ HostConfig: { NetworkMode: 'none' } });
    const host = await run({ HostConfig: { NetworkMode: 'host' } });
    for (const other of [none, host]) {
      const stats = (await d.request('GET', `/containers/${other}/stats?one-shot=1&stream=0`)).json;
      expect(stats.networks).toBeUndefined();
    }
    for (const c of [joiner, id, none, host]) await d.request('DELETE', `/containers/${c}?force=1`);
  });
});

describe('legacy links (HostConfig.Links)', () => {
  const named = async (name: string, body: Record<string, unknown>, cmd = ['sleep', '300']) => {
    const c = await d.request('POST', `/containers/create?name=${name}`, {
      body: { Image: env.busybox, Cmd: cmd, ...body },
    });
    expect(c.status, c.text).toBe(201);
    return c.json.Id as string;
  };
  const start = (id: string) => d.request('POST', `/containers/${id}/start`);

  it("give the linking container the linked one's address by alias, name and hostname, and its variables", async () => {
    const db = await named('ldb', { Env: ['FOO=bar', 'PATH=/bin'], ExposedPorts: { '5432/tcp': {}, '53/udp': {} } });
    expect((await start(db)).status).toBe(204);
    const dbIp = (await inspect(db)).NetworkSettings.IPAddress;
    const web = await named('lweb', { HostConfig: { Links: ['ldb:data'] } });
    expect((await start(web)).status).toBe(204);
    const hosts = (await exec(web, ['cat', '/etc/hosts'])).out;
    expect(hosts).toContain(`${dbIp}\tdata ${db.slice(0, 12)} ldb`);
    const ping = await exec(web, ['ping', '-c', '1', '-W', '2', 'data']);
    expect(ping.code, ping.out).toBe(0);
    const vars = (await exec(web, ['env'])).out.split(/\r?\n/);
    expect(vars).toEqual(
      expect.arrayContaining([
        'DATA_NAME=/lweb/data',
        `DATA_PORT=tcp://${dbIp}:5432`,
        `DATA_PORT_5432_TCP=tcp://${dbIp}:5432`,
        `DATA_PORT_5432_TCP_ADDR=${dbIp}`,
        'DATA_PORT_5432_TCP_PORT=5432',
        'DATA_PORT_5432_TCP_PROTO=tcp',
        `DATA_PORT_53_UDP=udp://${dbIp}:53`,
        'DATA_ENV_FOO=bar',
      ]),
    );
    expect(vars.some((v) => v.startsWith('DATA_ENV_PATH='))).toBe(false);
    // Not in the linking container's Config.Env: they are made at each start.
    expect((await inspect(web)).Config.Env.some((v: string) => v.startsWith('DATA_'))).toBe(false);
    expect((await inspect(web)).HostConfig.Links).toEqual(['/ldb:/lweb/data']);
    const listed = await d.request(
      'GET',
      `/containers/json?filters=${encodeURIComponent(JSON.stringify({ id: [db] }))}`,
    );
    expect(listed.json[0].Names).toEqual(['/ldb', '/lweb/data']);
    // The link goes, and neither container with it.
    expect((await d.request('DELETE', '/containers/lweb/data?link=1')).status).toBe(204);
    const after = await d.request(
      'GET',
      `/containers/json?filters=${encodeURIComponent(JSON.stringify({ id: [db] }))}`,
    );
    expect(after.json[0].Names).toEqual(['/ldb']);
    expect((await inspect(web)).HostConfig.Links).toBeNull();
    const rmSelf = await d.request('DELETE', '/containers/ldb?link=1');
    expect(rmSelf.status).toBe(500);
    expect(rmSelf.json.message).toBe('Conflict, cannot remove the default link name of the container');
    for (const id of [web, db]) await d.request('DELETE', `/containers/${id}?force=1`);
  });

  it('need the linked container to exist at create and to run at start', async () => {
    const missing = await d.request('POST', '/containers/create', {
      body: { Image: env.busybox, HostConfig: { Links: ['nosuch:x'] } },
    });
    expect(missing.status).toBe(400);
    expect(missing.json.message).toBe('could not get container for nosuch: No such container: nosuch');
    const stopped = await named('lstopped', {});
    const linker = await named('llinker', { HostConfig: { Links: ['lstopped'] } });
    const s = await start(linker);
    expect(s.status).toBe(500);
    expect(s.json.message).toBe('Cannot link to a non running container: /lstopped AS /llinker/lstopped');
    expect((await start(stopped)).status).toBe(204);
    expect((await start(linker)).status).toBe(204);
    const hostNet = await d.request('POST', '/containers/create', {
      body: { Image: env.busybox, HostConfig: { NetworkMode: 'host', Links: ['lstopped:x'] } },
    });
    expect(hostNet.status).toBe(400);
    expect(hostNet.json.message).toBe(
      "conflicting options: host type networking can't be used with links. This would result in undefined behavior",
    );
    for (const id of [linker, stopped]) await d.request('DELETE', `/containers/${id}?force=1`);
  });

  it('on a user network are names only the linking container resolves', async () => {
    await d.request('POST', '/networks/create', { body: { Name: 'linked' } });
    const target = await run({ HostConfig: { NetworkMode: 'linked' } });
    const targetName = (await inspect(target)).Name.slice(1);
    const ip = (await inspect(target)).NetworkSettings.Networks.linked.IPAddress;
    const linker = await run({ HostConfig: { NetworkMode: 'linked', Links: [`${targetName}:backend`, 'later:next'] } });
    expect((await exec(linker, ['cat', '/etc/hosts'])).out).toContain(`${ip}\tbackend`);
    // A target that starts after the linker: its line comes then.
    const later = await d.request('POST', '/containers/create?name=later', {
      body: { Image: env.busybox, Cmd: ['sleep', '300'], HostConfig: { NetworkMode: 'linked' } },
    });
    await d.request('POST', `/containers/${later.json.Id}/start`);
    const laterIp = (await inspect(later.json.Id)).NetworkSettings.Networks.linked.IPAddress;
    await waitFor(
      async () => (await exec(linker, ['cat', '/etc/hosts'])).out.includes(`${laterIp}\tnext`) || undefined,
      "the linker's hosts to name the later target",
    );
    expect((await exec(linker, ['ping', '-c', '1', '-W', '2', 'backend'])).code).toBe(0);
    // By DNS too, as dockerd's embedded DNS answers them (nslookup skips /etc/hosts): docker-py's test_create_with_links.
    for (const [alias, at] of [
      ['backend', ip],
      ['next', laterIp],
    ]) {
      const looked = await exec(linker, ['nslookup', alias]);
      expect({ alias, code: looked.code }).toEqual({ alias, code: 0 });
      expect(looked.out).toContain(at);
    }
    expect((await inspect(linker)).NetworkSettings.Networks.linked.Links).toEqual([
      `${targetName}:backend`,
      'later:next',
    ]);
    const other = await run({ HostConfig: { NetworkMode: 'linked' } });
    expect((await exec(other, ['ping', '-c', '1', '-W', '1', 'backend'])).code).not.toBe(0);
    // Not by DNS either, whichever file aardvark-dns read last; nor one linked container the other's alias.
    for (let round = 0; round < 5; round++) {
      expect({ round, code: (await exec(other, ['nslookup', 'backend'])).code }).toEqual({ round, code: 1 });
      expect({ round, code: (await exec(other, ['nslookup', 'next'])).code }).toEqual({ round, code: 1 });
      expect({ round, code: (await exec(target, ['nslookup', 'next'])).code }).toEqual({ round, code: 1 });
      expect({ round, code: (await exec(later.json.Id, ['nslookup', 'backend'])).code }).toEqual({ round, code: 1 });
      // A reload between rounds: one more container on the network, then not.
      await d.request('DELETE', `/containers/${await run({ HostConfig: { NetworkMode: 'linked' } })}?force=1`);
    }
    expect((await exec(linker, ['nslookup', 'backend'])).out).toContain(ip);
    for (const id of [linker, target, other, later.json.Id]) await d.request('DELETE', `/containers/${id}?force=1`);
    await d.request('DELETE', '/networks/linked');
  });
});

it('adds the link-local addresses asked for beside its own, shown in IPAMConfig', async () => {
  const id = await run({
    NetworkingConfig: { EndpointsConfig: { bridge: { IPAMConfig: { LinkLocalIPs: ['169.254.8.8'] } } } },
  });
  const ep = (await inspect(id)).NetworkSettings.Networks.bridge;
  expect(ep.IPAMConfig).toEqual({ LinkLocalIPs: ['169.254.8.8'] });
  const addrs = (await exec(id, ['ip', '-4', '-o', 'addr', 'show', 'eth0'])).out;
  expect(addrs).toContain('inet 169.254.8.8/16');
  expect(addrs).toContain(`inet ${ep.IPAddress}/24`);
  await d.request('DELETE', `/containers/${id}?force=1`);
  const v6 = await d.request('POST', '/containers/create', {
    body: {
      Image: env.busybox,
      NetworkingConfig: { EndpointsConfig: { bridge: { IPAMConfig: { LinkLocalIPs: ['169.254.8'] } } } },
    },
  });
  expect(v6.status).toBe(400);
  expect(v6.json.message).toBe('invalid link-local IP address: 169.254.8');
});

describe("a container joining another's network (container:<id>)", () => {
  it('shares its interfaces, address, hosts and resolv.conf', async () => {
    const sandbox = await run({});
    const ip = (await inspect(sandbox)).NetworkSettings.IPAddress;
    const joiner = await run({ HostConfig: { NetworkMode: `container:${sandbox}` } });
    expect((await exec(joiner, ['ip', '-4', 'addr', 'show', 'eth0'])).out).toContain(ip);
    expect((await exec(joiner, ['cat', '/etc/hosts'])).out).toContain(ip);
    const refused = await d.request('POST', '/containers/create', {
      body: {
        Image: env.busybox,
        HostConfig: { NetworkMode: `container:${sandbox}`, PortBindings: { '80/tcp': [{}] } },
      },
    });
    expect(refused.status).toBe(400);
    expect(refused.json.message).toBe('conflicting options: port publishing and the container type network mode');
    for (const id of [joiner, sandbox]) await d.request('DELETE', `/containers/${id}?force=1`);
  });

  it('gives the MAC asked for, container-wide before API 1.44 and per endpoint after', async () => {
    const wide = await d.request('POST', '/v1.43/containers/create', {
      body: { Image: env.busybox, Cmd: ['cat', '/sys/class/net/eth0/address'], MacAddress: '02:42:0a:00:00:99' },
    });
    expect(wide.status, wide.text).toBe(201);
    const ep = await d.request('POST', '/v1.47/containers/create', {
      body: {
        Image: env.busybox,
        Cmd: ['sleep', '60'],
        NetworkingConfig: { EndpointsConfig: { bridge: { MacAddress: '02:42:0a:00:00:98' } } },
      },
    });
    expect(ep.status, ep.text).toBe(201);
    await d.request('POST', `/containers/${ep.json.Id}/start`);
    expect((await exec(ep.json.Id, ['cat', '/sys/class/net/eth0/address'])).out.trim()).toBe('02:42:0a:00:00:98');
    expect((await inspect(ep.json.Id)).NetworkSettings.Networks.bridge.MacAddress).toBe('02:42:0a:00:00:98');
    for (const id of [wide.json.Id, ep.json.Id]) await d.request('DELETE', `/containers/${id}?force=1`);
  });
});

describe('containers on one user network', () => {
  it('reach each other by name, alias and short id', async () => {
    await d.request('POST', '/networks/create', { body: { Name: 'app' } });
    const web = await run(
      {
        HostConfig: { NetworkMode: 'app' },
        NetworkingConfig: { EndpointsConfig: { app: { Aliases: ['www'] } } },
      },
      WEB,
    );
    const webName = (await inspect(web)).Name.slice(1);
    const client = await run({ HostConfig: { NetworkMode: 'app' } });
    for (const name of [webName, 'www', web.slice(0, 12)]) {
      const r = await waitFor(async () => {
        const e = await exec(client, ['wget', '-q', '-O', '-', `http://${name}/`]);
        return e.code === 0 ? e : undefined;
      }, `wget http://${name}/`);
      expect(r.out).toMatch(/^hello from /);
    }
    const dnsNames = (await inspect(web)).NetworkSettings.Networks.app.DNSNames;
    expect(dnsNames).toEqual(expect.arrayContaining([webName, 'www', web.slice(0, 12)]));
    for (const id of [web, client]) await d.request('DELETE', `/containers/${id}?force=1`);
    await d.request('DELETE', '/networks/app');
  });

  it('a container whose start fails leaves no name behind', async () => {
    await d.request('POST', '/networks/create', { body: { Name: 'failing' } });
    const client = await run({ HostConfig: { NetworkMode: 'failing' } });
    const c = await d.request('POST', '/containers/create?name=broken', {
      body: { Image: env.busybox, Cmd: ['/no/such/binary'], HostConfig: { NetworkMode: 'failing' } },
    });
    expect(c.status, c.text).toBe(201);
    const s = await d.request('POST', `/containers/${c.json.Id}/start`);
    expect(s.status).toBeGreaterThanOrEqual(400);
    // The neighbour's server answers (its own name resolves) but has no record of the broken one.
    const own = (await inspect(client)).Name.slice(1);
    await waitFor(async () => (await exec(client, ['nslookup', own])).code === 0, `nslookup ${own}`);
    const r = await exec(client, ['nslookup', 'broken']);
    expect(r.code, r.out).not.toBe(0);
    for (const id of [client, c.json.Id]) await d.request('DELETE', `/containers/${id}?force=1`);
    await d.request('DELETE', '/networks/failing');
  });

  it('connects and disconnects a running container', async () => {
    await d.request('POST', '/networks/create', { body: { Name: 'extra' } });
    const id = await run({});
    const c = await d.request('POST', '/networks/extra/connect', { body: { Container: id } });
    expect(c.status, c.text).toBe(200);
    const ip = (await inspect(id)).NetworkSettings.Networks.extra.IPAddress;
    expect((await exec(id, ['ip', '-4', 'addr', 'show', 'eth1'])).out).toContain(ip);
    const n = await d.request('GET', '/networks/extra');
    expect(Object.keys(n.json.Containers)).toEqual([id]);
    const x = await d.request('POST', '/networks/extra/disconnect', { body: { Container: id } });
    expect(x.status, x.text).toBe(200);
    expect((await exec(id, ['ip', 'link', 'show', 'eth1'])).code).not.toBe(0);
    expect((await inspect(id)).NetworkSettings.Networks.extra).toBeUndefined();
    await d.request('DELETE', `/containers/${id}?force=1`);
    await d.request('DELETE', '/networks/extra');
  });
});

describe('outbound traffic', () => {
  // A machine outside the host: a namespace on a veth from the host, on a private /30 of its own.
  const subnet = `10.${randomInt(100, 150)}.${randomInt(0, 250)}`;
  const [hostSide, outside] = [`${subnet}.1`, `${subnet}.2`];
  let uplink: HostUplink;
  beforeAll(async () => {
    uplink = new HostUplink(randomBytes(3).toString('hex'), `${hostSide}/30`, `${outside}/30`);
    await uplink.serveWho('outside');
  });
  afterAll(() => uplink?.cleanUp());

  /** What the outside server answers the container: `outside <the source address it saw>`. */
  const whoFrom = async (id: string) =>
    whoAnswer((await exec(id, ['wget', '-q', '-O', '-', `http://${outside}/cgi-bin/who`])).out);

  it("leaves masqueraded, from the default bridge and from a user network: the outside sees the host's address", async () => {
    await d.request('POST', '/networks/create', { body: { Name: 'natted' } });
    const onBridge = await run({});
    const onUser = await run({ HostConfig: { NetworkMode: 'natted' } });
    for (const id of [onBridge, onUser]) {
      const own = Object.values(
        (await inspect(id)).NetworkSettings.Networks as Record<string, { IPAddress: string }>,
      )[0]!;
      expect(own.IPAddress).not.toBe(hostSide);
      expect(await whoFrom(id)).toBe(`outside ${hostSide}`);
    }
    for (const id of [onBridge, onUser]) await d.request('DELETE', `/containers/${id}?force=1`);
    await d.request('DELETE', '/networks/natted');
  });

  it('never leaves an internal network', async () => {
    await d.request('POST', '/networks/create', { body: { Name: 'sealed', Internal: true } });
    const id = await run({ HostConfig: { NetworkMode: 'sealed' } });
    const r = await exec(id, ['timeout', '3', 'wget', '-q', '-O', '-', `http://${outside}/cgi-bin/who`]);
    expect(r.code).not.toBe(0);
    expect(r.out).not.toContain('outside');
    await d.request('DELETE', `/containers/${id}?force=1`);
    await d.request('DELETE', '/networks/sealed');
  });
});

describe("berthd's restart", () => {
  it('keeps a running container its address and published port', async () => {
    const id = await run({ HostConfig: { PortBindings: { '80/tcp': [{ HostPort: '' }] } } }, WEB);
    const before = (await inspect(id)).NetworkSettings;
    const port = Number(before.Ports['80/tcp'][0].HostPort);
    await waitFor(() => fetchText('127.0.0.1', port).catch(() => undefined), 'the web server');
    await d.kill();
    await d.restart();
    const after = (await inspect(id)).NetworkSettings;
    expect(after.IPAddress).toBe(before.IPAddress);
    expect(after.Ports).toEqual(before.Ports);
    expect(await fetchText('127.0.0.1', port)).toMatch(/^hello from /);
    await d.request('DELETE', `/containers/${id}?force=1`);
  });
});

describe('names on user networks under load', () => {
  it("resolves a container's hostname from itself by DNS, /etc/hosts emptied (moby TestHostnameDnsResolution)", async () => {
    await d.request('POST', '/networks/create', { body: { Name: 'foobar-net' } });
    const id = await run({ Hostname: 'foobar', HostConfig: { NetworkMode: 'foobar-net' } });
    const r = await exec(id, ['sh', '-c', 'echo 127.0.0.1 localhost > /etc/hosts && ping -c 1 -W 2 foobar']);
    expect(r.out).not.toContain('bad address');
    expect(r.code).toBe(0);
    await d.request('DELETE', `/containers/${id}?force=1`);
    await d.request('DELETE', '/networks/foobar-net');
  });

  it('three containers started at once on two new networks, one of them on both, start every time (10 rounds)', async () => {
    for (let round = 0; round < 10; round++) {
      const [a, b] = [`ra${round}`, `rb${round}`];
      for (const n of [a, b])
        expect((await d.request('POST', '/networks/create', { body: { Name: n } })).status).toBe(201);
      const create = async (body: Record<string, unknown>) =>
        (
          await d.request('POST', '/containers/create', {
            body: { Image: env.busybox, Cmd: ['sleep', '300'], ...body },
          })
        ).json.Id as string;
      const ids = [
        await create({ HostConfig: { NetworkMode: a } }),
        await create({ HostConfig: { NetworkMode: b } }),
        await create({ HostConfig: { NetworkMode: a }, NetworkingConfig: { EndpointsConfig: { [a]: {}, [b]: {} } } }),
      ];
      const started = await Promise.all(ids.map((id) => d.request('POST', `/containers/${id}/start`)));
      expect({ round, answers: started.map((s) => `${s.status} ${s.text}`.trim()) }).toEqual({
        round,
        answers: ['204', '204', '204'],
      });
      // Each resolves the others of its networks at once: the DNS server serves both networks.
      expect((await exec(ids[2]!, ['nslookup', ids[0]!.slice(0, 12)])).code).toBe(0);
      expect((await exec(ids[2]!, ['nslookup', ids[1]!.slice(0, 12)])).code).toBe(0);
      for (const id of ids) await d.request('DELETE', `/containers/${id}?force=1`);
      for (const n of [a, b]) await d.request('DELETE', `/networks/${n}`);
    }
  }, 300_000);
});

describe('endpoint settings at connect (the Python SDK)', () => {
  it("a MAC given at connect of a created container shows before the start and is eth1's after; endpoint driver options are taken as dockerd's bridge takes them", async () => {
    const { values, result } = await runPython(
      d,
      [
        `api = docker.APIClient(base_url=${JSON.stringify(d.host)}, version='1.47')`,
        "api.create_network('macnet')",
        `ct = api.create_container(${JSON.stringify(env.busybox)}, 'sleep 300')`,
        "r = api.post(api._url('/networks/macnet/connect'), json={'Container': ct['Id'], 'EndpointConfig': {'MacAddress': '02:42:0a:0b:0c:0d'}})",
        "emit('connect', r.status_code)",
        "emit('created', api.inspect_container(ct)['NetworkSettings']['Networks']['macnet']['MacAddress'])",
        'api.start(ct)',
        "e = api.exec_create(ct, 'cat /sys/class/net/eth1/address')",
        "emit('running', api.exec_start(e).decode().strip())",
        `other = api.create_container(${JSON.stringify(env.busybox)}, 'sleep 300')`,
        "api.connect_container_to_network(other, 'macnet', driver_opt={'com.example.unread': 'x'})",
        "emit('unread', 'taken')",
        "r = api.post(api._url('/networks/macnet/disconnect'), json={'Container': other['Id']})",
        "r = api.post(api._url('/networks/macnet/connect'), json={'Container': other['Id'], 'EndpointConfig': {'DriverOpts': {'com.docker.network.endpoint.ifname': 'foo0'}}})",
        "emit('ifname', [r.status_code, r.json()['message']])",
        'for c in (ct, other): api.remove_container(c, force=True)',
        "api.remove_network('macnet')",
      ].join('\n'),
    );
    expect(result.code, result.stderr).toBe(0);
    expect(values.connect).toBe(200);
    expect(values.created).toBe('02:42:0a:0b:0c:0d');
    expect(values.running).toBe('02:42:0a:0b:0c:0d');
    expect(values.unread).toBe('taken');
    expect(values.ifname).toEqual([
      400,
      'endpoint driver option com.docker.network.endpoint.ifname (network macnet) is not supported by berth yet',
    ]);
  });
});
