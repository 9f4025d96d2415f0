// IPv6 for dual-stack networks, in-process: subnets and addresses as dockerd
// 27 checks and hands them out, the ip6tables rules they become, the host
// ports of both families, and daemon.json's default-bridge IPv6 refused.
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../../src/config.js';
import { PortTable } from '../../src/engine/network/allocator.js';
import { Ipv6Addresses, networkIpv6, splitConfigs } from '../../src/engine/network/ipam6.js';
import { canonicalIp6, formatIp6, nextFreeAddress6, parseIp6, userSubnet6 } from '../../src/engine/network/ipv6.js';
import { chainsOf, renderState, type RuleNetwork } from '../../src/engine/network/rules.js';
import { scratchDir } from '../harness/tmp.js';

const refusal = (fn: () => unknown): string => {
  try {
    fn();
  } catch (e) {
    return (e as Error).message;
  }
  throw new Error('expected a refusal');
};

describe('IPv6 subnets and addresses', () => {
  it('reads and writes addresses in the one form ip6tables-save and inspect print', () => {
    expect(canonicalIp6('FD00:0000:0000:0000:0000:0000:0000:0001')).toBe('fd00::1');
    expect(canonicalIp6('fd00:0:1:0:0:1:0:1')).toBe('fd00:0:1::1:0:1');
    expect(canonicalIp6('10.0.0.1')).toBeNull();
    expect(canonicalIp6('::ffff:10.0.0.1')).toBeNull();
    expect(formatIp6(parseIp6('fd00:1::ffff')! + 1n)).toBe('fd00:1::1:0');
  });

  it("checks a user's subnet as dockerd does", () => {
    expect(userSubnet6('fd00:1::/64')).toEqual({ base: parseIp6('fd00:1::'), prefix: 64 });
    expect(refusal(() => userSubnet6('fd00:1::5/64'))).toBe(
      'invalid network config:\ninvalid subnet fd00:1::5/64: it should be fd00:1::/64',
    );
    expect(refusal(() => userSubnet6('ff02::/64'))).toBe("multicast subnet 'ff02::/64' is not allowed");
    expect(refusal(() => userSubnet6('fe80::/56'))).toBe("'fe80::/56' clashes with the Link-Local prefix 'fe80::/64'");
    expect(refusal(() => userSubnet6('fd00::/129'))).toMatch(/invalid CIDR block notation/);
  });

  it('hands out the next free address after the last given, never the subnet-router anycast', () => {
    const s = userSubnet6('fd00:1::/120');
    const taken = new Set([parseIp6('fd00:1::1')!]);
    expect(formatIp6(nextFreeAddress6(s, s, taken, 0n)!)).toBe('fd00:1::2');
    expect(formatIp6(nextFreeAddress6(s, s, taken, parseIp6('fd00:1::2')!)!)).toBe('fd00:1::3');
    // Wrapping past the end (IPv6 has no broadcast: the last address is given).
    expect(formatIp6(nextFreeAddress6(s, s, taken, parseIp6('fd00:1::fe')!)!)).toBe('fd00:1::ff');
    expect(formatIp6(nextFreeAddress6(s, s, taken, parseIp6('fd00:1::ff')!)!)).toBe('fd00:1::2');
    const range = userSubnet6('fd00:1::80/121');
    expect(formatIp6(nextFreeAddress6(s, range, taken, 0n)!)).toBe('fd00:1::80');
  });

  it('splits IPAM.Config by family and takes EnableIPv6 as dockerd 27 does', () => {
    const configs = [{ Subnet: '10.1.0.0/24' }, { Subnet: 'fd00:2::/64', Gateway: 'fd00:2::fe' }];
    const { v4, v6 } = splitConfigs(configs);
    expect(v4).toEqual([configs[0]]);
    expect(networkIpv6(true, v6, [])).toEqual({
      enable_ipv6: 1,
      subnet6: 'fd00:2::/64',
      gateway6: 'fd00:2::fe',
      ip_range6: '',
    });
    // Kept, not used, without EnableIPv6.
    expect(networkIpv6(false, v6, [])).toMatchObject({ enable_ipv6: 0, subnet6: 'fd00:2::/64' });
    expect(refusal(() => networkIpv6(true, [], []))).toBe('all predefined address pools have been fully subnetted');
    expect(refusal(() => networkIpv6(true, v6, [userSubnet6('fd00:2::/48')]))).toBe(
      'Pool overlaps with other one on this address space',
    );
    expect(refusal(() => networkIpv6(true, [{ Subnet: 'fd00:2::/64', Gateway: 'fd00:3::1' }], []))).toMatch(
      /parent subnet fd00:2::\/64 doesn't contain this address/,
    );
  });

  it('gives endpoints their addresses, an asked one checked', () => {
    const a = new Ipv6Addresses();
    const network = {
      id: 'n',
      name: 'n',
      predefined: false,
      enableIPv6: true,
      subnet6: 'fd00:4::/64',
      gateway6: 'fd00:4::1',
      ipRange6: '',
    };
    expect(a.choose(network, undefined, () => [])).toEqual({ ip6: 'fd00:4::2', static: false });
    expect(a.choose(network, undefined, () => ['fd00:4::2'])).toEqual({ ip6: 'fd00:4::3', static: false });
    expect(a.choose(network, 'FD00:4::0:99', () => [])).toEqual({ ip6: 'fd00:4::99', static: true });
    expect(refusal(() => a.choose(network, 'fd00:5::1', () => []))).toBe(
      'no configured subnet or ip-range contain the IP address fd00:5::1',
    );
    expect(refusal(() => a.choose(network, 'fd00:4::1', () => []))).toBe('Address already in use');
    expect(refusal(() => a.choose({ ...network, enableIPv6: false }, 'fd00:4::5', () => []))).toMatch(
      /supported only when connecting to networks with user configured subnets/,
    );
    expect(a.choose({ ...network, enableIPv6: false }, undefined, () => [])).toEqual({ ip6: '', static: false });
  });

  it("gives the default bridge's endpoints dockerd's MAC-made addresses on a fixed-cidr-v6 of /80 or larger", () => {
    const a = new Ipv6Addresses();
    const bridge = {
      id: 'b',
      name: 'bridge',
      predefined: true,
      enableIPv6: true,
      subnet6: 'fd00:7::/64',
      gateway6: 'fd00:7::1',
      ipRange6: '',
    };
    expect(a.choose(bridge, undefined, () => [], '02:42:ac:11:00:02')).toEqual({
      ip6: 'fd00:7::242:ac11:2',
      static: false,
    });
    // Smaller than /80: the next free one, as on a user network.
    const narrow = { ...bridge, subnet6: 'fd00:7::/96' };
    expect(a.choose(narrow, undefined, () => [], '02:42:ac:11:00:02')).toEqual({ ip6: 'fd00:7::2', static: false });
    expect(refusal(() => a.choose(bridge, 'fd00:7::9', () => [], '02:42:ac:11:00:02'))).toMatch(
      /supported only when connecting to networks with user configured subnets/,
    );
  });
});

describe('ip6tables rules', () => {
  const net6: RuleNetwork = {
    bridge: 'br-6',
    subnet: 'fd00:6::/64',
    internal: false,
    masquerade: true,
    net: { cidr: 'fd00:6::/64', has: (a) => a.startsWith('fd00:6::') },
  };
  const text = renderState(
    chainsOf('B6', 6),
    [net6],
    [
      { key: 'c', proto: 'tcp', hostIp: '', hostPort: 8080, containerIp: 'fd00:6::2', containerPort: 80 },
      { key: 'c', proto: 'tcp', hostIp: '::1', hostPort: 8081, containerIp: 'fd00:6::2', containerPort: 80 },
    ],
  );

  it('publish to [address]:port with /128 host addresses, masquerade the subnet, and have no loopback rules', () => {
    expect(text).toContain('-A B6-DNAT -p tcp -m tcp --dport 8080 -j DNAT --to-destination [fd00:6::2]:80');
    expect(text).toContain('-A B6-DNAT -d ::1/128 -p tcp -m tcp --dport 8081 -j DNAT --to-destination [fd00:6::2]:80');
    expect(text).toContain(
      '-A B6-FORWARD -d fd00:6::2/128 -o br-6 -p tcp -m tcp --dport 80 -m conntrack --ctstate DNAT -j ACCEPT',
    );
    expect(text).toContain('-A B6-POSTROUTING -s fd00:6::/64 ! -o br-6 -j MASQUERADE');
    expect(text).not.toContain('127.0.0.0/8');
    expect(text).toMatch(/\*raw\n:B6-PREROUTING - \[0:0\]\nCOMMIT/);
  });
});

describe('host ports of both families', () => {
  it('keep 0.0.0.0 and :: apart, each covering its own family', () => {
    const t = new PortTable({ start: 40000, end: 40010 }, new Set());
    t.take('tcp', ['0.0.0.0'], 40001);
    expect(t.holder('tcp', '::', 40001)).toBeNull();
    expect(t.holder('tcp', '::1', 40001)).toBeNull();
    expect(t.holder('tcp', '127.0.0.1', 40001)).toBe('0.0.0.0');
    t.take('tcp', ['::'], 40001);
    expect(t.holder('tcp', '::1', 40001)).toBe('::');
    t.take('tcp', ['::1'], 40002);
    expect(t.holder('tcp', '::', 40002)).toBe('::1');
    expect(t.holder('tcp', '0.0.0.0', 40002)).toBeNull();
  });
});

describe("daemon.json's IPv6 for the default bridge", () => {
  it('needs fixed-cidr-v6, in dockerd 27 words; ip6tables is read', () => {
    const dir = scratchDir('berth-ipv6-config-');
    const file = (name: string, json: unknown) => {
      const p = path.join(dir, name);
      writeFileSync(p, JSON.stringify(json));
      return p;
    };
    const e = refusalOf(() => loadConfig(['--config-file', file('a.json', { ipv6: true })], {}));
    expect(e).toBeInstanceOf(ConfigError);
    expect((e as Error).message).toBe(
      'IPv6 is enabled for the default bridge, but no subnet is configured. Specify an IPv6 subnet using --fixed-cidr-v6',
    );
    const both = loadConfig(['--config-file', file('e.json', { ipv6: true, 'fixed-cidr-v6': 'fd00:9::/64' })], {});
    expect(both.config.network).toMatchObject({ ipv6: true, fixedCidrV6: 'fd00:9::/64' });
    const flags = loadConfig(['--ipv6', '--fixed-cidr-v6', 'fd00:9::/64', '--config-file', file('f.json', {})], {});
    expect(flags.config.network).toMatchObject({ ipv6: true, fixedCidrV6: 'fd00:9::/64' });
    expect(loadConfig(['--config-file', file('b.json', { ipv6: false })], {}).config.network.ip6tables).toBe(true);
    expect(loadConfig(['--config-file', file('c.json', { ip6tables: false })], {}).config.network.ip6tables).toBe(
      false,
    );
    expect(loadConfig(['--ip6tables=false', '--config-file', file('d.json', {})], {}).config.network.ip6tables).toBe(
      false,
    );
  });
});

function refusalOf(fn: () => unknown): unknown {
  try {
    fn();
  } catch (e) {
    return e;
  }
  throw new Error('expected a refusal');
}
