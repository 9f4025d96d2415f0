import { describe, expect, it } from 'vitest';
import {
  firstFreeSubnet,
  formatIp,
  formatSubnet,
  macFor,
  nextFreeAddress,
  parseCidr,
  parseIp,
  parseRouteTable,
  subnetOf,
  userSubnet,
} from '../../src/engine/network/ipam.js';

const subnet = (text: string) => subnetOf(parseCidr(text)!);
const POOLS = [
  { base: '172.17.0.0/12', size: 16 },
  { base: '192.168.0.0/16', size: 20 },
];

describe('subnets', () => {
  it('parses and formats addresses and CIDRs', () => {
    expect(formatIp(parseIp('10.1.2.3')!)).toBe('10.1.2.3');
    expect(parseIp('10.1.2.256')).toBeNull();
    expect(parseCidr('10.1.2.3/33')).toBeNull();
    expect(formatSubnet(subnet('10.1.2.3/16'))).toBe('10.1.0.0/16');
  });

  it('takes a user subnet only without host bits, as dockerd', () => {
    expect(formatSubnet(userSubnet('10.9.0.0/16'))).toBe('10.9.0.0/16');
    expect(() => userSubnet('10.9.0.1/16')).toThrow('it should be 10.9.0.0/16');
    expect(() => userSubnet('fd00::/64')).toThrow('IPv6 is not supported by berth yet');
  });
});

describe('the pools', () => {
  it('give 172.17.0.0/16 first, then the next free /16, then 192.168.x.0/20', () => {
    expect(formatSubnet(firstFreeSubnet(POOLS, [])!)).toBe('172.17.0.0/16');
    expect(formatSubnet(firstFreeSubnet(POOLS, [subnet('172.17.5.0/24')])!)).toBe('172.18.0.0/16');
    const all172 = Array.from({ length: 15 }, (_, i) => subnet(`172.${17 + i}.0.0/16`));
    expect(formatSubnet(firstFreeSubnet(POOLS, all172)!)).toBe('192.168.0.0/20');
    expect(formatSubnet(firstFreeSubnet(POOLS, [...all172, subnet('192.168.0.0/24')])!)).toBe('192.168.16.0/20');
  });

  it('skip what a host route covers (/proc/net/route), ignoring the default route', () => {
    const table = [
      'Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT',
      'eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0',
      'eth0\t000200C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0',
      'docker0\t000011AC\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0',
    ].join('\n');
    const routes = parseRouteTable(table);
    expect(routes.map(formatSubnet)).toEqual(['192.0.2.0/24', '172.17.0.0/16']);
    expect(formatSubnet(firstFreeSubnet(POOLS, routes)!)).toBe('172.18.0.0/16');
  });
});

describe('addresses', () => {
  const s = subnet('10.0.0.0/29');
  it('are given in turn after the last one, never the network or broadcast address', () => {
    const taken = new Set([parseIp('10.0.0.1')!]);
    const a = nextFreeAddress(s, s, taken, 0)!;
    expect(formatIp(a)).toBe('10.0.0.2');
    const b = nextFreeAddress(s, s, taken, a)!;
    expect(formatIp(b)).toBe('10.0.0.3');
    // After the last one it wraps around to the first free.
    expect(formatIp(nextFreeAddress(s, s, taken, parseIp('10.0.0.6')!)!)).toBe('10.0.0.2');
  });

  it('come from the range when there is one, and run out', () => {
    const range = subnet('10.0.0.4/30');
    expect(formatIp(nextFreeAddress(s, range, new Set(), 0)!)).toBe('10.0.0.4');
    const full = new Set([4, 5, 6].map((n) => parseIp(`10.0.0.${n}`)!));
    expect(nextFreeAddress(s, range, full, 0)).toBeNull();
  });

  it("get dockerd's MAC: 02:42 and the address", () => {
    expect(macFor(parseIp('172.17.0.2')!)).toBe('02:42:ac:11:00:02');
  });
});
