// The default bridge dual stack, as dockerd's `--ipv6 --fixed-cidr-v6` makes
// it: the bridge network shows its IPv6 subnet, a container on it gets an
// address made from the subnet and its MAC (a /64, so /80 or larger: dockerd's
// rule), a default route through the bridge, and a port published on [::]
// reached over IPv6; through the API and the docker CLI.
import { randomInt } from 'node:crypto';
import { beforeAll, describe, expect, it } from 'vitest';
import { canonicalIp6 } from '../../src/engine/network/ipv6.js';
import { type Cli, dockerCli } from '../harness/cli.js';
import type { Daemon } from '../harness/daemon.js';
import { type Env, useEnv } from '../harness/env.js';
import { httpGetWhenUp } from '../harness/http.js';
import { networkSetup, tearDownAfterAll } from '../harness/network.js';

const net = networkSetup();
tearDownAfterAll(net);
// A ULA /64 of this file's own, written as berth shows it (no leading zeros).
const group = () => (0x1000 + randomInt(0xf000)).toString(16);
const prefix = `fd${(0x10 + randomInt(0xf0)).toString(16)}:${group()}:${group()}:2`;
const subnet = `${prefix}::/64`;
// Nothing here leaves the host, so the host's IPv6 forwarding is left as it is found.
const ctx = useEnv({ args: [...net.args, '--ipv6', '--fixed-cidr-v6', subnet, '--ip-forward=false'] });
let env: Env;
let d: Daemon;
let cli: Cli;
beforeAll(() => {
  ({ env, daemon: d } = ctx);
  cli = dockerCli(d);
});

/** dockerd's address for a MAC on a /64: the prefix, then the MAC's six bytes. */
const fromMac = (mac: string) => {
  const h = mac.split(':');
  const groups = [h[0]! + h[1]!, h[2]! + h[3]!, h[4]! + h[5]!].map((g) => Number.parseInt(g, 16).toString(16));
  return canonicalIp6(`${prefix}:0:${groups.join(':')}`);
};

describe('the default bridge with --ipv6 --fixed-cidr-v6', () => {
  it('shows EnableIPv6 and its IPv6 subnet, the bridge its first address', async () => {
    const n = (await d.request('GET', '/networks/bridge')).json;
    expect(n.EnableIPv6).toBe(true);
    expect(n.IPAM.Config).toContainEqual({ Subnet: subnet, Gateway: `${prefix}::1` });
  });

  it('gives a container an address from its MAC, a route through the bridge, and reaches another over IPv6', async () => {
    const first = (await cli.ok(['run', '-d', env.busybox, 'sleep', '300'])).trim();
    const shown = JSON.parse(await cli.ok(['inspect', first]))[0].NetworkSettings;
    expect(shown.GlobalIPv6Address).toBe(fromMac(shown.MacAddress));
    expect(shown).toMatchObject({ GlobalIPv6PrefixLen: 64, IPv6Gateway: `${prefix}::1` });
    expect(shown.Networks.bridge.GlobalIPv6Address).toBe(shown.GlobalIPv6Address);
    const route = await cli.ok(['exec', first, 'ip', '-6', 'route']);
    expect(route).toContain(`default via ${prefix}::1 dev eth0`);
    const ping = await cli(['run', '--rm', env.busybox, 'ping', '-6', '-c', '1', '-W', '3', shown.GlobalIPv6Address]);
    expect(ping.code, ping.stdout + ping.stderr).toBe(0);
    const asked = await cli(['run', '--rm', '--ip6', `${prefix}::99`, env.busybox, 'true']);
    expect(asked.code).not.toBe(0);
    expect(asked.stderr).toContain('user specified IP address is supported only');
    await cli.ok(['rm', '-f', first]);
  });

  it('publishes a port on [::] too, reached over IPv6', async () => {
    const id = (
      await cli.ok([
        'run',
        '-d',
        '-p',
        '80',
        env.busybox,
        'sh',
        '-c',
        'mkdir -p /www && echo hello v6 > /www/index.html && exec httpd -f -p 80 -h /www',
      ])
    ).trim();
    const ports = (await cli.ok(['port', id, '80'])).trim().split('\n');
    expect(ports).toHaveLength(2);
    expect(ports[1]).toMatch(/^\[::\]:\d+$/);
    const port = Number(ports[1]!.split(':').at(-1));
    expect(await httpGetWhenUp(`${prefix}::1`, port, 'the port on the bridge address')).toBe('hello v6\n');
    expect(await httpGetWhenUp('::1', port, 'the port on [::1]')).toBe('hello v6\n');
    await cli.ok(['rm', '-f', id]);
  });
});
