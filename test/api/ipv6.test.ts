// Dual-stack user networks (EnableIPv6), on a berthd with its own bridges and
// chains: the network's IPv6 subnet, each container's IPv6 address (given or
// chosen), its default route and names over IPv6, IPv6 turned off where a
// network has none, published ports on IPv6 host addresses through ip6tables
// and the proxy, and nothing left of it in ip6tables once it goes; through the
// API, the docker CLI and the Python SDK (what docker-py's newest tests ask).
// Every IPv6 subnet is a random ULA /64 of the test's own.
import { execFileSync } from 'node:child_process';
import { randomBytes, randomInt } from 'node:crypto';
import { beforeAll, describe, expect, it } from 'vitest';
import { type Cli, dockerCli } from '../harness/cli.js';
import { runPython } from '../harness/clients.js';
import type { Daemon } from '../harness/daemon.js';
import { type Env, execOnTty, runDetached, useEnv } from '../harness/env.js';
import { httpGetWhenUp } from '../harness/http.js';
import { networkSetup, tearDownAfterAll } from '../harness/network.js';

const net = networkSetup();
tearDownAfterAll(net);
// Nothing here leaves the host, so the host's IPv6 forwarding is left as it is found.
const ctx = useEnv({ args: [...net.args, '--ip-forward=false'] });
let env: Env;
let d: Daemon;
let cli: Cli;
beforeAll(() => {
  ({ env, daemon: d } = ctx);
  cli = dockerCli(d);
});

/** A ULA /64 no other test uses: fdXX:XXXX:XXXX::/64 (never the host's own fd00::/64). */
function ula(): { subnet: string; at: (suffix: string) => string } {
  // Groups of four digits with no leading zero: the text is already the canonical one berth shows.
  const group = () => (0x1000 + randomInt(0xf000)).toString(16);
  const base = `fd${(0x10 + randomInt(0xf0)).toString(16)}:${group()}:${group()}:1`;
  return { subnet: `${base}::/64`, at: (suffix) => `${base}::${suffix}` };
}

const name = (what: string) => `${what}-${randomBytes(3).toString('hex')}`;

async function createNetwork(body: Record<string, unknown>): Promise<string> {
  const r = await d.request('POST', '/networks/create', { body });
  expect(r.status, r.text).toBe(201);
  return r.json.Id;
}

const run = (body: Record<string, unknown>, cmd?: string[]) => runDetached(d, { Image: env.busybox, ...body }, cmd);

const exec = (id: string, cmd: string[]) => execOnTty(d, id, cmd);

const inspect = async (id: string) => (await d.request('GET', `/containers/${id}/json`)).json;
const remove = (id: string) => d.request('DELETE', `/containers/${id}?force=1`);

/** berth's lines in the host's ip6tables for this daemon's prefix. */
const ip6Rules = () =>
  execFileSync('ip6tables-save', { encoding: 'utf8' })
    .split('\n')
    .filter((l) => l.startsWith('-A') && l.includes(`${net.prefix}-`));

const WEB = [
  'sh',
  '-c',
  'mkdir -p /www && echo hello from $(hostname) > /www/index.html && exec httpd -f -p 80 -h /www',
];

describe('a dual-stack network', () => {
  const v6 = ula();
  const netName = name('dual');
  let netId: string;
  let auto: string;
  let fixed: string;

  beforeAll(async () => {
    netId = await createNetwork({
      Name: netName,
      EnableIPv6: true,
      IPAM: { Config: [{ Subnet: v6.subnet, IPRange: `${v6.at('')}/96`, Gateway: v6.at('ffff') }] },
    });
    auto = await run({ HostConfig: { NetworkMode: netName } });
    fixed = await run({
      HostConfig: { NetworkMode: netName },
      NetworkingConfig: { EndpointsConfig: { [netName]: { IPAMConfig: { IPv6Address: v6.at('f00') } } } },
    });
  });

  it('shows EnableIPv6 and both subnets, an IPv4 one chosen from the pool beside the IPv6 one given', async () => {
    const n = (await d.request('GET', `/networks/${netId}`)).json;
    expect(n.EnableIPv6).toBe(true);
    expect(n.IPAM.Config).toHaveLength(2);
    expect(n.IPAM.Config[0].Subnet).toMatch(/^10\.\d+\.\d+\.0\/24$/);
    expect(n.IPAM.Config[1]).toEqual({ Subnet: v6.subnet, Gateway: v6.at('ffff'), IPRange: `${v6.at('')}/96` });
    expect(n.Containers[fixed].IPv6Address).toBe(`${v6.at('f00')}/64`);
  });

  it('gives each container an IPv6 address, the asked one as asked, and a default route through the gateway', async () => {
    const a = (await inspect(auto)).NetworkSettings.Networks[netName];
    const f = (await inspect(fixed)).NetworkSettings.Networks[netName];
    expect(a.GlobalIPv6Address).toBe(v6.at('1'));
    expect(a).toMatchObject({ GlobalIPv6PrefixLen: 64, IPv6Gateway: v6.at('ffff'), IPAMConfig: null });
    expect(f.GlobalIPv6Address).toBe(v6.at('f00'));
    expect(f.IPAMConfig).toEqual({ IPv6Address: v6.at('f00') });
    const addr = await exec(auto, ['ip', '-6', 'addr', 'show', 'eth0']);
    expect(addr.out).toContain(`inet6 ${v6.at('1')}/64 scope global`);
    const hosts = (await exec(auto, ['cat', '/etc/hosts'])).out;
    const hostname = (await inspect(auto)).Config.Hostname;
    expect(hosts).toContain(`${a.IPAddress}\t${hostname}`);
    expect(hosts).toContain(`${v6.at('1')}\t${hostname}`);
    const route = await exec(auto, ['ip', '-6', 'route']);
    expect(route.out).toMatch(new RegExp(`default via ${v6.at('ffff')} dev eth0`));
  });

  it('reaches another container over IPv6, by address and by name (an AAAA answer)', async () => {
    const ping = await exec(auto, ['ping', '-6', '-c', '1', '-W', '3', v6.at('f00')]);
    expect(ping.code, ping.out).toBe(0);
    const fixedName = (await inspect(fixed)).Name.slice(1);
    const lookup = await exec(auto, ['nslookup', '-type=AAAA', fixedName]);
    expect(lookup.out).toContain(`Address: ${v6.at('f00')}`);
    const byName = await exec(auto, ['ping', '-6', '-c', '1', '-W', '3', fixedName]);
    expect(byName.code, byName.out).toBe(0);
  });

  it('refuses an asked address that is taken, outside the subnet, or not IPv6, in dockerd words', async () => {
    const ask = async (ip: string) =>
      d.request('POST', '/containers/create', {
        body: {
          Image: env.busybox,
          HostConfig: { NetworkMode: netName },
          NetworkingConfig: { EndpointsConfig: { [netName]: { IPAMConfig: { IPv6Address: ip } } } },
        },
      });
    const taken = await ask(v6.at('f00'));
    expect(taken.status).toBe(409);
    expect(taken.json.message).toBe('Address already in use');
    const outside = await ask('fd00:dead::5');
    expect(outside.status).toBe(400);
    expect(outside.json.message).toBe('no configured subnet or ip-range contain the IP address fd00:dead::5');
    const notV6 = await ask('10.0.0.5');
    expect(notV6.status).toBe(400);
    expect(notV6.json.message).toBe('invalid IPv6 address: 10.0.0.5');
  });

  it('refuses an overlapping IPv6 subnet', async () => {
    const r = await d.request('POST', '/networks/create', {
      body: { Name: name('overlap'), EnableIPv6: true, IPAM: { Config: [{ Subnet: v6.subnet }] } },
    });
    expect(r.status).toBe(403);
    expect(r.json.message).toBe('Pool overlaps with other one on this address space');
  });
});

describe('networks without IPv6', () => {
  it('refuse EnableIPv6 without an IPv6 subnet, as dockerd 27 (no default IPv6 pool) does', async () => {
    const r = await d.request('POST', '/networks/create', { body: { Name: name('nov6'), EnableIPv6: true } });
    expect(r.status).toBe(400);
    expect(r.json.message).toBe('all predefined address pools have been fully subnetted');
  });

  it('turn IPv6 off on the container side, and refuse an asked IPv6 address', async () => {
    const n = name('v4');
    await createNetwork({ Name: n });
    const id = await run({ HostConfig: { NetworkMode: n } });
    expect((await exec(id, ['cat', '/proc/sys/net/ipv6/conf/eth0/disable_ipv6'])).out.trim()).toBe('1');
    expect((await exec(id, ['ip', '-6', 'addr', 'show', 'eth0'])).out.trim()).toBe('');
    expect((await inspect(id)).NetworkSettings.Networks[n].GlobalIPv6Address).toBe('');
    const asked = await d.request('POST', '/containers/create', {
      body: {
        Image: env.busybox,
        HostConfig: { NetworkMode: n },
        NetworkingConfig: { EndpointsConfig: { [n]: { IPAMConfig: { IPv6Address: 'fd00:1::5' } } } },
      },
    });
    expect(asked.status).toBe(403);
    expect(asked.json.message).toBe(
      'user specified IP address is supported only when connecting to networks with user configured subnets',
    );
    await remove(id);
  });

  it('take IPv6 link-local addresses asked for, as a /64, with IPv6 on for that interface', async () => {
    const id = await run({
      NetworkingConfig: { EndpointsConfig: { bridge: { IPAMConfig: { LinkLocalIPs: ['169.254.8.9', 'FE80::0:8'] } } } },
    });
    expect((await inspect(id)).NetworkSettings.Networks.bridge.IPAMConfig).toEqual({
      LinkLocalIPs: ['169.254.8.9', 'fe80::8'],
    });
    expect((await exec(id, ['ip', '-6', 'addr', 'show', 'eth0'])).out).toContain('inet6 fe80::8/64 scope link');
    await remove(id);
  });

  it('keep an IPv6 IPAM config given without EnableIPv6, unused, as dockerd does', async () => {
    const v6 = ula();
    const n = name('kept');
    const id = await createNetwork({ Name: n, IPAM: { Config: [{ Subnet: '10.251.9.0/24' }, { Subnet: v6.subnet }] } });
    const shown = (await d.request('GET', `/networks/${id}`)).json;
    expect(shown.EnableIPv6).toBe(false);
    expect(shown.IPAM.Config).toEqual([{ Subnet: '10.251.9.0/24', Gateway: '10.251.9.1' }, { Subnet: v6.subnet }]);
    const c = await run({ HostConfig: { NetworkMode: n } });
    expect((await inspect(c)).NetworkSettings.Networks[n].GlobalIPv6Address).toBe('');
    await remove(c);
    // Its subnet is not from this daemon's pool, which the harness's teardown knows: removed here.
    expect((await d.request('DELETE', `/networks/${id}`)).status).toBe(204);
  });
});

describe('published ports on a dual-stack network', () => {
  it('bind [::] beside 0.0.0.0, reach the container over IPv6 via ip6tables and [::1] via the proxy, and leave no rule', async () => {
    const v6 = ula();
    const n = name('pub');
    const netId = await createNetwork({ Name: n, EnableIPv6: true, IPAM: { Config: [{ Subnet: v6.subnet }] } });
    const id = await run(
      {
        HostConfig: { NetworkMode: n, PortBindings: { '80/tcp': [{ HostPort: '' }] } },
        ExposedPorts: { '80/tcp': {} },
      },
      WEB,
    );
    const ports = (await inspect(id)).NetworkSettings.Ports['80/tcp'] as { HostIp: string; HostPort: string }[];
    expect(ports.map((p) => p.HostIp)).toEqual(['0.0.0.0', '::']);
    const port = ports[0]!.HostPort;
    expect(ports[1]!.HostPort).toBe(port);
    const hostname = (await inspect(id)).Config.Hostname;
    // The bridge's own address is a host address: OUTPUT's DNAT takes it to the container's IPv6 address.
    expect(await httpGetWhenUp(v6.at('1'), Number(port), 'the port on the bridge address')).toBe(
      `hello from ${hostname}\n`,
    );
    expect(await httpGetWhenUp('::1', Number(port), 'the port on [::1]')).toBe(`hello from ${hostname}\n`);
    // The bridge address's request went through the DNAT rule (the proxy on [::] would answer it too).
    const counted = execFileSync('ip6tables-save', ['-c', '-t', 'nat'], { encoding: 'utf8' })
      .split('\n')
      .find((l) => l.includes(`-A ${net.prefix}-DNAT`) && l.includes(`--dport ${port} `));
    expect(Number(/^\[(\d+):/.exec(counted ?? '')?.[1])).toBeGreaterThan(0);
    const rules = ip6Rules();
    expect(rules).toContain(
      `-A ${net.prefix}-DNAT -p tcp -m tcp --dport ${port} -j DNAT --to-destination [${v6.at('2')}]:80`,
    );
    expect(rules).toContain(`-A ${net.prefix}-POSTROUTING -s ${v6.subnet} ! -o br-${netId.slice(0, 12)} -j MASQUERADE`);
    await remove(id);
    expect(ip6Rules().filter((l) => l.includes(`--dport ${port}`))).toEqual([]);
    expect((await d.request('DELETE', `/networks/${netId}`)).status).toBe(204);
    expect(ip6Rules().filter((l) => l.includes(v6.subnet) || l.includes(netId.slice(0, 12)))).toEqual([]);
  });

  it('publish on an IPv6 host address given, [::1]', async () => {
    const v6 = ula();
    const n = name('lo6');
    await createNetwork({ Name: n, EnableIPv6: true, IPAM: { Config: [{ Subnet: v6.subnet }] } });
    const id = await run(
      {
        HostConfig: { NetworkMode: n, PortBindings: { '80/tcp': [{ HostIp: '::1', HostPort: '' }] } },
        ExposedPorts: { '80/tcp': {} },
      },
      WEB,
    );
    const ports = (await inspect(id)).NetworkSettings.Ports['80/tcp'] as { HostIp: string; HostPort: string }[];
    expect(ports).toHaveLength(1);
    expect(ports[0]!.HostIp).toBe('::1');
    expect(await httpGetWhenUp('::1', Number(ports[0]!.HostPort), 'the port on [::1]')).toMatch(/^hello from /);
    await remove(id);
  });
});

describe('the docker CLI', () => {
  it('network create --ipv6 --subnet, run --ip6, one container pinging another over IPv6', async () => {
    const v6 = ula();
    const n = name('cli6');
    await cli.ok(['network', 'create', '--ipv6', '--subnet', v6.subnet, n]);
    expect((await cli.ok(['network', 'inspect', n, '--format', '{{.EnableIPv6}}'])).trim()).toBe('true');
    const server = name('srv');
    await cli.ok(['run', '-d', '--name', server, '--network', n, '--ip6', v6.at('a'), env.busybox, 'sleep', '300']);
    expect(
      (
        await cli.ok(['inspect', server, '--format', `{{(index .NetworkSettings.Networks "${n}").GlobalIPv6Address}}`])
      ).trim(),
    ).toBe(v6.at('a'));
    const ping = await cli(['run', '--rm', '--network', n, env.busybox, 'ping', '-6', '-c', '1', '-W', '3', server]);
    expect(ping.code, ping.stderr).toBe(0);
    expect(ping.stdout).toContain(`bytes from ${v6.at('a')}`);
    const refused = await cli(['network', 'create', '--ipv6', name('nosub')]);
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toContain('all predefined address pools have been fully subnetted');
    await cli.ok(['rm', '-f', server]);
    await cli.ok(['network', 'rm', n]);
  });
});

describe('the Python SDK', () => {
  it('creates an IPv6 network and gives static IPv6 addresses at create and at connect (docker-py 5.0.3)', async () => {
    const v6 = ula();
    const { values: v, result } = await runPython(
      d,
      `
from docker.types import IPAMConfig, IPAMPool
api = client.api
net = "${name('py6')}"
api.create_network(net, enable_ipv6=True, ipam=IPAMConfig(driver="default", pool_configs=[
    IPAMPool(subnet="${v6.subnet}", iprange="${v6.at('')}/96", gateway="${v6.at('ffff')}")]))
emit("enabled", api.inspect_network(net)["EnableIPv6"])
created = api.create_container("${env.busybox}", "top", host_config=api.create_host_config(network_mode=net),
    networking_config=api.create_networking_config({net: api.create_endpoint_config(ipv6_address="${v6.at('f00')}")}))
api.start(created)
emit("atCreate", api.inspect_container(created)["NetworkSettings"]["Networks"][net]["IPAMConfig"]["IPv6Address"])
other = api.create_container("${env.busybox}", "top")
api.connect_container_to_network(other, net, ipv6_address="${v6.at('f01')}")
api.start(other)
ns = api.inspect_container(other)["NetworkSettings"]["Networks"][net]
emit("atConnect", [ns["IPAMConfig"]["IPv6Address"], ns["GlobalIPv6Address"]])
for c in (created, other):
    api.remove_container(c, force=True)
api.remove_network(net)
`,
    );
    expect(result.code, result.stderr).toBe(0);
    expect(v.enabled).toBe(true);
    expect(v.atCreate).toBe(v6.at('f00'));
    expect(v.atConnect).toEqual([v6.at('f01'), v6.at('f01')]);
  });
});

describe("berthd's restart", () => {
  it('keeps a dual-stack network its bridge address, and a running container its IPv6 address and ports', async () => {
    const v6 = ula();
    const n = name('again');
    const netId = await createNetwork({ Name: n, EnableIPv6: true, IPAM: { Config: [{ Subnet: v6.subnet }] } });
    const id = await run(
      {
        HostConfig: { NetworkMode: n, PortBindings: { '80/tcp': [{ HostPort: '' }] } },
        ExposedPorts: { '80/tcp': {} },
      },
      WEB,
    );
    const before = (await inspect(id)).NetworkSettings;
    const port = Number(before.Ports['80/tcp'][0].HostPort);
    await httpGetWhenUp(v6.at('1'), port, 'the web server over IPv6');
    // The bridge is made again at start: with its IPv6 address back, and ip6tables as before.
    await d.kill();
    execFileSync('ip', ['-6', 'addr', 'flush', 'dev', `br-${netId.slice(0, 12)}`, 'scope', 'global']);
    await d.restart();
    const after = (await inspect(id)).NetworkSettings;
    expect(after.Networks[n].GlobalIPv6Address).toBe(before.Networks[n].GlobalIPv6Address);
    expect(after.Ports).toEqual(before.Ports);
    expect(await httpGetWhenUp(v6.at('1'), port, 'the web server over IPv6')).toMatch(/^hello from /);
    expect(await httpGetWhenUp('::1', port, 'the web server on [::1]')).toMatch(/^hello from /);
    await remove(id);
  });
});
