// The firewall against the real kernel, inside network namespaces of the
// test's own (the host's iptables are never touched): a "host" with three
// bridges (two networks and an internal one), "containers" on them running
// busybox httpd, and an "outside" namespace on an uplink. What a user would
// see is checked with real connections: published ports from outside, from
// the host, on 127.0.0.1 and from the container itself, outbound NAT,
// isolation, an internal network; then a restart, coalesced changes, the
// disabled mode and the teardown, with a foreign rule that must survive it all.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Firewall, type FirewallNetwork, type PortMapping } from '../../src/engine/network/firewall.js';
import { isEngineError } from '../../src/errors.js';
import { type Container, inNs, Topology, who, whoUdp } from '../harness/netns.js';

const PREFIX = 'BERTH';
const UPLINK = '10.231.100.1';
const OUTSIDE = '10.231.100.2';

let topo: Topology;
let fw: Firewall;
let a1: Container;
let a2: Container;
let b1: Container;
let i1: Container;
let outside: string;
const nets: Record<'a' | 'b' | 'i', FirewallNetwork> = {
  a: { bridge: 'br-a', subnet: '10.231.1.0/24', internal: false, masquerade: true },
  b: { bridge: 'br-b', subnet: '10.231.2.0/24', internal: false, masquerade: true },
  i: { bridge: 'br-i', subnet: '10.231.3.0/24', internal: true, masquerade: true },
};

const port = (key: string, c: Container, hostPort: number, hostIp = ''): PortMapping => ({
  key,
  proto: 'tcp',
  hostIp,
  hostPort,
  containerIp: c.ip,
  containerPort: 80,
});

/** The host namespace's whole ruleset, counters left out. */
const saveAll = () => inNs(topo.host, ['iptables-save']).replace(/^#.*\n/gm, '');
const FOREIGN = ['-A FORWARD -i foreign0 -j ACCEPT', '-A OTHER -j RETURN'];

beforeAll(async () => {
  topo = new Topology('fw');
  const [a, b, i] = [
    topo.bridge('br-a', '10.231.1.1/24'),
    topo.bridge('br-b', '10.231.2.1/24'),
    topo.bridge('br-i', '10.231.3.1/24'),
  ];
  a1 = topo.container('a1', a, '10.231.1.2');
  a2 = topo.container('a2', a, '10.231.1.3');
  b1 = topo.container('b1', b, '10.231.2.2');
  i1 = topo.container('i1', i, '10.231.3.2');
  outside = topo.outside('out', `${UPLINK}/24`, `${OUTSIDE}/24`);
  // The outside can route to the containers' subnets, so that only the firewall keeps it from reaching them directly.
  inNs(outside, ['ip', 'route', 'add', '10.231.0.0/16', 'via', UPLINK]);
  // Someone else's rules, which berth must leave alone.
  inNs(topo.host, ['iptables-restore', '-w', '--noflush'], `*filter\n:OTHER - [0:0]\n${FOREIGN.join('\n')}\nCOMMIT\n`);
  for (const [c, name] of [
    [a1, 'a1'],
    [a2, 'a2'],
    [b1, 'b1'],
    [i1, 'i1'],
  ] as const) {
    await topo.serveWho(c.ns, name);
  }
  await topo.serveWho(outside, 'outside');
  await topo.serveWhoUdp(a1.ns, 'a1', 53);
  fw = new Firewall({ prefix: PREFIX, netns: topo.host });
  await fw.init();
  await Promise.all(Object.values(nets).map((n) => fw.setNetwork(n)));
});

afterAll(() => topo?.cleanUp());

describe('published ports', () => {
  beforeAll(async () => {
    await fw.addPorts([port('a1', a1, 8080), port('a1', a1, 8081, '127.0.0.1')]);
  });

  it('reach the container from outside, the client address kept', () => {
    expect(who(outside, UPLINK, 8080)).toBe(`a1 ${OUTSIDE}`);
  });

  it('reach it from the host itself, on its own addresses and on 127.0.0.1', () => {
    expect(who(topo.host, UPLINK, 8080)).toMatch(/^a1 /);
    expect(who(topo.host, '10.231.2.1', 8080)).toMatch(/^a1 /);
    // From 127.0.0.1 the container sees the bridge's address (masqueraded: it cannot answer 127.0.0.1).
    expect(who(topo.host, '127.0.0.1', 8080)).toBe('a1 10.231.1.1');
  });

  it('reach it from itself and from its neighbours through the host (hairpin)', () => {
    expect(who(a1.ns, '10.231.1.1', 8080)).toBe('a1 10.231.1.1');
    expect(who(a2.ns, UPLINK, 8080)).toBe('a1 10.231.1.1');
  });

  it('UDP: reach the container from outside and from the host', async () => {
    await fw.addPorts([{ ...port('a1', a1, 5353), proto: 'udp', containerPort: 53 }]);
    expect(whoUdp(outside, UPLINK, 5353)).toBe(`a1 ${OUTSIDE}`);
    expect(whoUdp(topo.host, '127.0.0.1', 5353)).toBe('a1 10.231.1.1');
  });

  it('reach it from a container of another network through the host address', () => {
    expect(who(b1.ns, '10.231.2.1', 8080)).toMatch(/^a1 /);
  });

  it('published on 127.0.0.1: reached from the host, not from outside', () => {
    expect(who(topo.host, '127.0.0.1', 8081)).toBe('a1 10.231.1.1');
    expect(who(outside, UPLINK, 8081, 1)).toBeNull();
  });

  it('leave the container unreachable directly from outside (only what is published, only through the host)', () => {
    expect(who(outside, a1.ip, 80, 1)).toBeNull();
  });

  it('are gone once removed', async () => {
    await fw.addPorts([port('a2', a2, 8090)]);
    expect(who(outside, UPLINK, 8090)).toBe(`a2 ${OUTSIDE}`);
    await fw.removePorts('a2');
    expect(who(outside, UPLINK, 8090, 1)).toBeNull();
    expect(who(outside, UPLINK, 8080)).toBe(`a1 ${OUTSIDE}`);
  });

  it('are refused for a container of an internal network or of no known network', async () => {
    const refused = async (m: PortMapping) => {
      const e = await fw.addPorts([m]).catch((x: unknown) => x);
      expect(isEngineError(e, 'invalid'), String(e)).toBe(true);
    };
    await refused(port('i1', i1, 8100));
    await refused({ ...port('x', a1, 8101), containerIp: '10.9.9.9' });
    await refused({ ...port('x', a1, 8102), hostIp: '::1' });
  });
});

describe('outbound traffic', () => {
  it('leaves masqueraded: the outside sees the host, not the container', () => {
    expect(who(a1.ns, OUTSIDE, 80)).toBe(`outside ${UPLINK}`);
    expect(who(b1.ns, OUTSIDE, 80)).toBe(`outside ${UPLINK}`);
  });

  it('without masquerade, leaves with the container address', async () => {
    await fw.setNetwork({ ...nets.b, masquerade: false });
    try {
      expect(who(b1.ns, OUTSIDE, 80)).toBe(`outside ${b1.ip}`);
    } finally {
      await fw.setNetwork(nets.b);
    }
  });

  it('flows between containers of one network', () => {
    expect(who(a2.ns, a1.ip, 80)).toBe(`a1 ${a2.ip}`);
  });

  it('does not cross from one network to another', () => {
    expect(who(a1.ns, b1.ip, 80, 1)).toBeNull();
    expect(who(b1.ns, a1.ip, 80, 1)).toBeNull();
  });

  it('never leaves an internal network, nor enters it', () => {
    expect(who(i1.ns, OUTSIDE, 80, 1)).toBeNull();
    expect(who(i1.ns, a1.ip, 80, 1)).toBeNull();
    expect(who(a1.ns, i1.ip, 80, 1)).toBeNull();
    expect(who(outside, i1.ip, 80, 1)).toBeNull();
    // The host itself still reaches it (nothing is routed).
    expect(who(topo.host, i1.ip, 80)).toBe('i1 10.231.3.1');
  });
});

describe('restart, coalescing, teardown', () => {
  it('a restarted daemon keeps the rules working and rewrites exactly the same ones', async () => {
    const before = await fw.liveRules();
    expect(before.length).toBeGreaterThan(10);
    const state = fw.state();
    const restarted = new Firewall({ prefix: PREFIX, netns: topo.host });
    await restarted.init();
    // init creates what is missing and flushes nothing: published ports work until the state is given.
    expect(await restarted.liveRules()).toEqual(before);
    expect(who(outside, UPLINK, 8080)).toBe(`a1 ${OUTSIDE}`);
    await restarted.replace(state);
    expect(await restarted.liveRules()).toEqual(before);
    expect(who(outside, UPLINK, 8080)).toBe(`a1 ${OUTSIDE}`);
    fw = restarted;
  });

  it('a restarted daemon drops what it no longer has (rules of a crash are replaced, not added to)', async () => {
    const state = fw.state();
    await fw.addPorts([port('a2', a2, 8095)]);
    const restarted = new Firewall({ prefix: PREFIX, netns: topo.host });
    await restarted.replace(state);
    expect(who(outside, UPLINK, 8095, 1)).toBeNull();
    expect((await restarted.liveRules()).filter((r) => r.includes('8095'))).toEqual([]);
    fw = restarted;
  });

  it('twenty containers publishing at once: every change is in when its promise resolves, in a few writes', async () => {
    const writes: number[] = [];
    const counting = new Firewall({
      prefix: PREFIX,
      netns: topo.host,
      log: { debug: (o: { changes: number }) => writes.push(o.changes) } as never,
    });
    await counting.replace(fw.state());
    writes.length = 0;
    await Promise.all(
      Array.from({ length: 20 }, (_, i) => counting.addPorts([port(`c${i}`, i % 2 ? a1 : a2, 9000 + i)])),
    );
    expect(writes.length).toBeLessThan(20);
    expect(writes.reduce((a, b) => a + b, 0)).toBe(20);
    const dnat = (await counting.liveRules()).filter((r) => /--dport 90\d\d -j DNAT/.test(r));
    expect(dnat).toHaveLength(20);
    expect(who(outside, UPLINK, 9000)).toBe(`a2 ${OUTSIDE}`);
    expect(who(outside, UPLINK, 9019)).toBe(`a1 ${OUTSIDE}`);
    fw = counting;
  });

  it('disabled, it changes nothing', async () => {
    const before = saveAll();
    const off = new Firewall({ prefix: 'OFF', netns: topo.host, enabled: false });
    await off.init();
    await off.setNetwork(nets.a);
    await off.addPorts([port('a1', a1, 7000)]);
    await off.teardown();
    expect(saveAll()).toBe(before);
  });

  it('another prefix (a second daemon) lives beside it without touching its rules', async () => {
    const before = await fw.liveRules();
    const other = new Firewall({ prefix: 'BERTH2', netns: topo.host });
    await other.setNetwork({ bridge: 'br-x', subnet: '10.231.9.0/24', internal: false, masquerade: true });
    expect((await other.liveRules()).length).toBeGreaterThan(0);
    expect(await fw.liveRules()).toEqual(before);
    await other.teardown();
    expect(await other.liveRules()).toEqual([]);
    expect(await fw.liveRules()).toEqual(before);
  });

  it('teardown leaves no chain and no jump of its prefix, and the foreign rules as they were', async () => {
    await fw.teardown();
    const all = saveAll();
    expect(all).not.toContain(PREFIX);
    for (const rule of FOREIGN) expect(all).toContain(rule);
    expect(who(outside, UPLINK, 8080, 1)).toBeNull();
    // A second teardown (nothing left) is a no-op.
    await fw.teardown();
    expect(saveAll()).toBe(all);
  });

  it('refuses a prefix that would make invalid or too long chain names', () => {
    expect(() => new Firewall({ prefix: 'BAD PREFIX' })).toThrow(/invalid firewall chain prefix/);
    expect(() => new Firewall({ prefix: 'A'.repeat(17) })).toThrow(/invalid firewall chain prefix/);
  });
});
