// rtnetlink's wire format (src/engine/os/netlink-wire.ts): the bytes of
// headers and attributes as the kernel lays them out, nested attributes,
// decoding of the kernel's answers, and the IP, CIDR and MAC text forms.
import { isIP } from 'node:net';
import { describe, expect, it } from 'vitest';
import { macForIPv4 } from '../../src/engine/network/links.js';
import {
  attr,
  decodeAddress,
  decodeAttrs,
  decodeLink,
  decodeMessage,
  decodeRoute,
  encodeAttrs,
  encodeMessage,
  formatIP,
  formatMac,
  IFA,
  ifaddrmsg,
  IFLA,
  ifinfomsg,
  linkNameProblem,
  NLM_F,
  parseCidr,
  parseIP,
  parseMac,
  RTA,
  RTM,
  rtmsg,
} from '../../src/engine/os/netlink-wire.js';

describe('netlink messages', () => {
  it('lays out nlmsghdr, the fixed header and attributes padded to 4 bytes', () => {
    const msg = encodeMessage(RTM.NEWLINK, NLM_F.CREATE | NLM_F.EXCL, ifinfomsg({ index: 7, flags: 1, change: 1 }), [
      attr(IFLA.IFNAME, 'br0'),
      attr(IFLA.MTU, 1500),
    ]);
    expect(msg.toString('hex')).toBe(
      [
        '30000000', // nlmsg_len 48 = 16 + 16 + 8 + 8 (nlmsghdr, ifinfomsg, IFNAME, MTU)
        '1000', // RTM_NEWLINK
        '0106', // NLM_F_REQUEST | NLM_F_EXCL | NLM_F_CREATE
        '00000000', // seq: set by the native side
        '00000000', // pid
        '00000000', // family, pad, type
        '07000000', // index
        '01000000', // flags IFF_UP
        '01000000', // change
        '0800', // rta_len 8: 4 + "br0\0"
        '0300', // IFLA_IFNAME
        '62723000',
        '0800', // rta_len 8
        '0400', // IFLA_MTU
        'dc050000', // 1500
      ].join(''),
    );
  });

  it('pads a payload whose length is not a multiple of 4, and records its unpadded length', () => {
    const b = encodeAttrs([attr(IFLA.IFNAME, 'veth1'), attr(IFLA.ADDRESS, Buffer.from([2, 0x42, 10, 0, 0, 2]))]);
    // "veth1\0" is 6 bytes: rta_len 10, padded to 12; the MAC rta_len 10, padded to 12.
    expect(b.length).toBe(24);
    expect(b.readUInt16LE(0)).toBe(10);
    expect(b.readUInt16LE(12)).toBe(10);
    expect(b.subarray(10, 12)).toEqual(Buffer.alloc(2));
    const back = decodeAttrs(b);
    expect(back.get(IFLA.IFNAME)?.toString()).toBe('veth1\0');
    expect(formatMac(back.get(IFLA.ADDRESS)!)).toBe('02:42:0a:00:00:02');
  });

  it('flags nested attributes NLA_F_NESTED, and decoding masks the flag off', () => {
    const linkinfo = attr(IFLA.LINKINFO, [
      attr(IFLA.INFO_KIND, 'veth'),
      attr(IFLA.INFO_DATA, [attr(1, Buffer.alloc(4))]),
    ]);
    const b = encodeAttrs([linkinfo]);
    expect(b.readUInt16LE(2)).toBe(IFLA.LINKINFO | 0x8000);
    expect(b.readUInt16LE(0)).toBe(b.length); // 4 + (4 + 5 → 12) + (4 + 8)
    const inner = decodeAttrs(decodeAttrs(b).get(IFLA.LINKINFO)!);
    expect(inner.get(IFLA.INFO_KIND)?.toString()).toBe('veth\0');
    expect(decodeAttrs(inner.get(IFLA.INFO_DATA)!).get(1)).toEqual(Buffer.alloc(4));
  });

  it('stops at a truncated or malformed attribute instead of reading past the buffer', () => {
    const b = encodeAttrs([attr(IFLA.MTU, 1500), attr(IFLA.IFNAME, 'eth0')]);
    expect([...decodeAttrs(b.subarray(0, 10)).keys()]).toEqual([IFLA.MTU]);
    const bad = Buffer.from(b);
    bad.writeUInt16LE(200, 8); // the second one claims more than there is
    expect([...decodeAttrs(bad).keys()]).toEqual([IFLA.MTU]);
    bad.writeUInt16LE(2, 8); // shorter than its own header
    expect([...decodeAttrs(bad).keys()]).toEqual([IFLA.MTU]);
  });

  it('writes the fixed headers of addresses and routes', () => {
    expect(ifaddrmsg({ family: 10, prefixLength: 64, flags: 2, index: 3 }).toString('hex')).toBe('0a40020003000000');
    // family, dst_len, src_len, tos, table, protocol, scope, type, flags (u32)
    expect(rtmsg({ family: 2, dstLength: 24, table: 254, protocol: 3, scope: 253, type: 1 }).toString('hex')).toBe(
      '02180000fe03fd0100000000',
    );
  });
});

describe('decoding the kernel’s answers', () => {
  /** A message as the kernel would send it (type, fixed header, attributes). */
  const answer = (type: number, fixed: Buffer, attrs: Parameters<typeof encodeAttrs>[0]) =>
    decodeMessage(encodeMessage(type, NLM_F.MULTI, fixed, attrs));

  it('reads a link: index, name, kind, master, MAC, MTU, up', () => {
    const m = answer(RTM.NEWLINK, ifinfomsg({ index: 5, flags: 0x1003 }), [
      attr(IFLA.IFNAME, 'veth9'),
      attr(IFLA.MTU, 1400),
      attr(IFLA.MASTER, 2),
      attr(IFLA.ADDRESS, Buffer.from('0242ac110002', 'hex')),
      attr(IFLA.LINKINFO, [attr(IFLA.INFO_KIND, 'veth')]),
    ]);
    expect(m.type).toBe(RTM.NEWLINK);
    expect(decodeLink(m)).toEqual({
      index: 5,
      name: 'veth9',
      kind: 'veth',
      masterIndex: 2,
      mac: '02:42:ac:11:00:02',
      mtu: 1400,
      up: true,
    });
    const lo = decodeLink(answer(RTM.NEWLINK, ifinfomsg({ index: 1 }), [attr(IFLA.IFNAME, 'lo')]));
    expect(lo).toMatchObject({ name: 'lo', kind: null, masterIndex: null, mac: null, up: false });
  });

  it('reads an address, the interface’s own (IFA_LOCAL) before the peer’s', () => {
    const m = answer(RTM.NEWADDR, ifaddrmsg({ family: 2, prefixLength: 16, index: 4 }), [
      attr(IFA.ADDRESS, Buffer.from([10, 0, 0, 9])),
      attr(IFA.LOCAL, Buffer.from([172, 18, 0, 2])),
    ]);
    expect(decodeAddress(m)).toEqual({
      index: 4,
      family: 4,
      address: '172.18.0.2',
      prefixLength: 16,
      cidr: '172.18.0.2/16',
    });
    const v6 = answer(RTM.NEWADDR, ifaddrmsg({ family: 10, prefixLength: 64, index: 4 }), [
      attr(IFA.ADDRESS, parseIP('fd00::2')!),
    ]);
    expect(decodeAddress(v6).cidr).toBe('fd00::2/64');
  });

  it('reads a route: default or a network, gateway, device, table', () => {
    const def = answer(RTM.NEWROUTE, rtmsg({ family: 2, table: 254, protocol: 3, type: 1 }), [
      attr(RTA.GATEWAY, Buffer.from([172, 18, 0, 1])),
      attr(RTA.OIF, 2),
      attr(RTA.TABLE, 254),
    ]);
    expect(decodeRoute(def)).toEqual({
      family: 4,
      dst: 'default',
      gateway: '172.18.0.1',
      devIndex: 2,
      table: 254,
      protocol: 3,
      scope: 0,
      type: 1,
    });
    const net = answer(RTM.NEWROUTE, rtmsg({ family: 10, dstLength: 64, table: 254 }), [
      attr(RTA.DST, parseIP('fd00:1::')!),
    ]);
    expect(decodeRoute(net)).toMatchObject({ family: 6, dst: 'fd00:1::/64', gateway: null, devIndex: null });
  });
});

describe('addresses, networks, MACs and names', () => {
  it('parses what node:net calls an IP address, and nothing it does not', () => {
    const texts = [
      '0.0.0.0',
      '172.17.0.2',
      '255.255.255.255',
      '256.1.1.1',
      '1.2.3',
      '01.2.3.4',
      '1.2.3.4.5',
      '::',
      '::1',
      '1::',
      'fd00::2',
      '2001:db8:0:0:1:0:0:1',
      '2001:DB8::1',
      '::ffff:10.0.0.1',
      '64:ff9b::192.0.2.33',
      '1:2:3:4:5:6:7:8',
      '1:2:3:4:5:6:7::',
      '1:2:3:4:5:6:7:8:9',
      '1:2:3:4:5:6:7:8::',
      '1::2::3',
      ':1:2:3:4:5:6:7',
      '12345::',
      '1.2.3.4::',
      '',
      'localhost',
    ];
    for (const t of texts) expect([t, parseIP(t) !== null]).toEqual([t, isIP(t) !== 0]);
    // A zone names an interface, which netlink carries apart (the address's ifindex).
    expect(parseIP('fe80::1%eth0')).toBeNull();
    expect(parseIP('10.0.0.1')).toEqual(Buffer.from([10, 0, 0, 1]));
    expect(parseIP('::ffff:10.0.0.1')?.toString('hex')).toBe('00000000000000000000ffff0a000001');
    expect(parseIP('fd00::2')?.toString('hex')).toBe('fd000000000000000000000000000002');
  });

  it('writes IPv6 as RFC 5952 says: lower case, the longest run of zeros as ::, never a single zero', () => {
    const cases: [string, string][] = [
      ['0:0:0:0:0:0:0:0', '::'],
      ['0:0:0:0:0:0:0:1', '::1'],
      ['2001:DB8:0:0:1:0:0:1', '2001:db8::1:0:0:1'],
      ['2001:db8:0:0:0:1:0:0', '2001:db8::1:0:0'],
      ['2001:db8:0:1:1:1:1:1', '2001:db8:0:1:1:1:1:1'],
      ['fd00:0000:0000:0000:0000:0000:0000:0002', 'fd00::2'],
      ['fe80::42:acff:fe11:2', 'fe80::42:acff:fe11:2'],
      ['1:0:0:2:0:0:0:3', '1:0:0:2::3'],
      ['1:2:3:4:5:6:7:0', '1:2:3:4:5:6:7:0'],
      ['::ffff:10.0.0.1', '::ffff:10.0.0.1'],
    ];
    for (const [input, out] of cases) expect([input, formatIP(parseIP(input)!)]).toEqual([input, out]);
    expect(formatIP(Buffer.from([192, 168, 1, 200]))).toBe('192.168.1.200');
  });

  it('parses a CIDR, refusing a prefix longer than the address', () => {
    expect(parseCidr('172.18.0.1/16')).toEqual({ family: 4, address: Buffer.from([172, 18, 0, 1]), prefixLength: 16 });
    expect(parseCidr('fd00::1/64')).toMatchObject({ family: 6, prefixLength: 64 });
    expect(parseCidr('10.0.0.1/32')?.prefixLength).toBe(32);
    expect(parseCidr('::/128')?.prefixLength).toBe(128);
    for (const bad of ['10.0.0.1', '10.0.0.1/33', 'fd00::1/129', '10.0.0.1/', '10.0.0.1/-1', '10.0.0.1/1x', 'x/8'])
      expect([bad, parseCidr(bad)]).toEqual([bad, null]);
  });

  it('parses and writes MAC addresses; dockerd’s MAC is 02:42 and the IPv4 address', () => {
    expect(parseMac('02:42:AC:11:00:02')).toEqual(Buffer.from([2, 0x42, 0xac, 0x11, 0, 2]));
    expect(parseMac('02-42-ac-11-00-02')).toEqual(Buffer.from([2, 0x42, 0xac, 0x11, 0, 2]));
    for (const bad of ['02:42:ac:11:00', '02:42:ac:11:00:02:03', '2:42:ac:11:0:2', 'zz:42:ac:11:00:02'])
      expect(parseMac(bad)).toBeNull();
    expect(macForIPv4('172.17.0.2')).toBe('02:42:ac:11:00:02');
    expect(() => macForIPv4('fd00::2')).toThrow('fd00::2 is not an IPv4 address');
  });

  it('says why the kernel would refuse an interface name', () => {
    for (const ok of ['eth0', 'br-0123456789ab', 'veth1234567890a', 'a.b_c-d@e'])
      expect(linkNameProblem(ok)).toBeNull();
    expect(linkNameProblem('')).toBe('it is empty');
    expect(linkNameProblem('veth1234567890ab')).toBe('it is longer than 15 bytes');
    expect(linkNameProblem('ééééééééé')).toBe('it is longer than 15 bytes');
    expect(linkNameProblem('..')).toBe('it is . or ..');
    for (const bad of ['a/b', 'a:b', 'a b', 'a\tb']) expect(linkNameProblem(bad)).toMatch(/contains/);
  });
});
