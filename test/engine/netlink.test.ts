// Links, addresses and routes made in-process over rtnetlink
// (engine/os/netlink.ts, engine/network/links.ts) against the real kernel.
// Everything happens in network namespaces this file makes: the bridge lives
// in one of its own (never in the machine's), one "container" namespace is a
// named one (/run/netns/…), the other exists only through a process, as a
// container's does (/proc/<pid>/ns/net). What was made is read back with
// `ip -j` and tried with busybox ping. Every namespace and process is removed
// after, even when a test fails.
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { closeSync, openSync, readdirSync, statSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { attachContainer, detachContainer, ensureBridge, removeBridge } from '../../src/engine/network/links.js';
import { isNetlinkError, Netlink } from '../../src/engine/os/netlink.js';
import { isEngineError } from '../../src/errors.js';

const TAG = randomBytes(3).toString('hex');
/** Every link this file makes carries TAG in its name, so the machine's namespace can be checked for strays. */
const BRIDGE = `bt${TAG}`;
const VETH_A = `va${TAG}`;
const VETH_B = `vb${TAG}`;

const namedNs: string[] = [];
const processes: ChildProcess[] = [];

/** A named namespace (ip netns add), removed in afterAll. */
function makeNamedNs(suffix: string): string {
  const name = `berth-t-${TAG}-${suffix}`;
  execFileSync('ip', ['netns', 'add', name]);
  namedNs.push(name);
  return `/run/netns/${name}`;
}

/** A namespace held only by a process, as a container's: its /proc/<pid>/ns/net. */
async function makeProcessNs(): Promise<string> {
  const child = spawn('unshare', ['--net', 'busybox', 'sleep', '600'], { stdio: 'ignore' });
  processes.push(child);
  const ns = `/proc/${child.pid}/ns/net`;
  const own = statSync('/proc/self/ns/net').ino;
  for (let i = 0; i < 500; i++) {
    try {
      if (statSync(ns).ino !== own) return ns;
    } catch {}
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error('unshare --net did not start');
}

/** A command run inside the namespace at `ns`. */
const inNs = (ns: string, cmd: string[]) => execFileSync('nsenter', [`--net=${ns}`, ...cmd], { encoding: 'utf8' });
/** `ip -j …` inside `ns`, parsed. */
const ipJson = (ns: string, ...args: string[]): any[] => JSON.parse(inNs(ns, ['ip', '-j', ...args]) || '[]');
const linkNames = (ns: string) => ipJson(ns, 'link').map((l) => l.ifname as string);
const ping = (ns: string, ip: string) => inNs(ns, ['busybox', 'ping', '-c1', '-W5', ip]);

/** What a call threw, for asserting on it. */
function thrown(fn: () => unknown): any {
  try {
    fn();
  } catch (e) {
    return e;
  }
  throw new Error('expected it to throw');
}

const openFds = () => readdirSync('/proc/self/fd').length;

let hostNs: string;
let nsA: string;
let nsB: string;

beforeAll(async () => {
  hostNs = makeNamedNs('host');
  nsA = makeNamedNs('a');
  nsB = await makeProcessNs();
});

afterAll(() => {
  for (const p of processes) p.kill('SIGKILL');
  for (const name of namedNs) {
    try {
      execFileSync('ip', ['netns', 'del', name]);
    } catch (e) {
      console.error('clean-up:', e);
    }
  }
});

describe('bridge and containers over rtnetlink', () => {
  let bridgeMac: string;

  it('makes the bridge in its namespace: up, its addresses, its MTU, a fixed MAC, route_localnet; again changes nothing', () => {
    const made = ensureBridge({ name: BRIDGE, gatewayCidr: ['10.231.0.1/24', 'fd00:231::1/64'], mtu: 1450, hostNs });
    expect(made.created).toBe(true);
    bridgeMac = made.mac;
    const [br] = ipJson(hostNs, '-d', 'addr', 'show', BRIDGE);
    expect(br.linkinfo.info_kind).toBe('bridge');
    expect(br.flags).toContain('UP');
    expect(br.mtu).toBe(1450);
    expect(br.address).toBe(bridgeMac);
    const cidrs = (l: any) =>
      l.addr_info.filter((a: any) => a.scope === 'global').map((a: any) => `${a.local}/${a.prefixlen}`);
    expect(cidrs(br)).toEqual(['10.231.0.1/24', 'fd00:231::1/64']);
    expect(br.addr_info.find((a: any) => a.family === 'inet').broadcast).toBe('10.231.0.255');
    expect(inNs(hostNs, ['cat', `/proc/sys/net/ipv4/conf/${BRIDGE}/route_localnet`]).trim()).toBe('1');

    const again = ensureBridge({ name: BRIDGE, gatewayCidr: ['10.231.0.1/24', 'fd00:231::1/64'], mtu: 1450, hostNs });
    expect(again).toEqual({ ...made, created: false });
    expect(cidrs(ipJson(hostNs, 'addr', 'show', BRIDGE)[0])).toEqual(['10.231.0.1/24', 'fd00:231::1/64']);
    // The bridge stayed in its own namespace.
    expect(linkNames('/proc/self/ns/net')).not.toContain(BRIDGE);
  });

  it('attaches containers: eth0 inside with address, MAC, MTU and default routes; the host end on the bridge, up', () => {
    const a = attachContainer({
      nsPath: nsA,
      bridge: BRIDGE,
      hostIfName: VETH_A,
      cidr: ['10.231.0.2/24', 'fd00:231::2/64'],
      gateway: ['10.231.0.1', 'fd00:231::1'],
      hostNs,
    });
    expect(a).toEqual({ mac: '02:42:0a:e7:00:02', mtu: 1450 });
    const b = attachContainer({
      nsPath: nsB,
      bridge: BRIDGE,
      hostIfName: VETH_B,
      cidr: '10.231.0.3/24',
      gateway: '10.231.0.1',
      mac: '02:00:00:00:00:bb',
      mtu: 1400,
      hostNs,
    });
    expect(b).toEqual({ mac: '02:00:00:00:00:bb', mtu: 1400 });

    const [eth0] = ipJson(nsA, 'addr', 'show', 'eth0');
    expect(eth0).toMatchObject({ address: '02:42:0a:e7:00:02', mtu: 1450, operstate: 'UP' });
    const global = eth0.addr_info.filter((x: any) => x.scope === 'global');
    expect(global.map((x: any) => `${x.local}/${x.prefixlen}`)).toEqual(['10.231.0.2/24', 'fd00:231::2/64']);
    expect(ipJson(nsA, 'route', 'show', 'default')).toEqual([
      expect.objectContaining({ gateway: '10.231.0.1', dev: 'eth0' }),
    ]);
    expect(ipJson(nsA, '-6', 'route', 'show', 'default')).toEqual([
      expect.objectContaining({ gateway: 'fd00:231::1', dev: 'eth0' }),
    ]);
    expect(ipJson(nsB, 'addr', 'show', 'eth0')[0]).toMatchObject({ address: '02:00:00:00:00:bb', mtu: 1400 });

    const ports = ipJson(hostNs, 'link', 'show', 'master', BRIDGE);
    expect(ports.map((p: any) => p.ifname).sort()).toEqual([VETH_A, VETH_B].sort());
    for (const p of ports) expect(p.flags).toContain('UP');

    // Reachable: each other, and the gateway, in IPv4 and IPv6.
    expect(ping(nsA, '10.231.0.3')).toContain('1 packets received');
    expect(ping(nsB, '10.231.0.2')).toContain('1 packets received');
    expect(ping(nsA, '10.231.0.1')).toContain('1 packets received');
    expect(ping(nsA, 'fd00:231::1')).toContain('1 packets received');
    // Ports came and went; the bridge's MAC (the containers' gateway's) did not move.
    expect(ipJson(hostNs, 'link', 'show', BRIDGE)[0].address).toBe(bridgeMac);
  });

  it('detaches: both ends of the pair go; detaching again is no error; the names are free again', () => {
    expect(detachContainer(VETH_A, hostNs)).toBe(true);
    expect(linkNames(hostNs)).not.toContain(VETH_A);
    expect(linkNames(nsA)).toEqual(['lo']);
    expect(ipJson(nsA, 'route')).toEqual([]);
    expect(detachContainer(VETH_A, hostNs)).toBe(false);
    // B is untouched.
    expect(ping(nsB, '10.231.0.1')).toContain('1 packets received');

    attachContainer({ nsPath: nsA, bridge: BRIDGE, hostIfName: VETH_A, cidr: '10.231.0.2/24', hostNs });
    expect(linkNames(nsA)).toEqual(['lo', 'eth0']);
    expect(ping(nsA, '10.231.0.3')).toContain('1 packets received');
    expect(detachContainer(VETH_A, hostNs)).toBe(true);
  });

  it('refuses clearly: bad names and addresses, a missing bridge, taken names, a missing namespace', () => {
    const base = { nsPath: nsA, bridge: BRIDGE, hostIfName: `vc${TAG}`, cidr: '10.231.0.9/24', hostNs };
    const cases: [Record<string, unknown>, string, string | RegExp][] = [
      [{ hostIfName: 'veth/1' }, 'invalid', `invalid interface name "veth/1": it contains '/', ':' or whitespace`],
      [{ ifName: 'a-name-too-long-for-linux' }, 'invalid', /"a-name-too-long-for-linux": it is longer than 15 bytes/],
      [
        { cidr: '10.231.0.9' },
        'invalid',
        'invalid container address "10.231.0.9": not an IP address with a prefix length',
      ],
      [{ cidr: [] }, 'invalid', 'a container needs at least one address'],
      [{ gateway: 'gw' }, 'invalid', 'invalid gateway "gw": not an IP address'],
      [{ mac: '01:00:5e:00:00:01' }, 'invalid', 'invalid MAC address "01:00:5e:00:00:01"'],
      [{ mtu: 20 }, 'invalid', 'invalid MTU 20: not in 68-65535'],
      [{ bridge: `bx${TAG}` }, 'not-found', `bridge bx${TAG} not found`],
      [{ bridge: 'lo' }, 'invalid', 'lo: it is a device, not a bridge'],
      [{ hostIfName: VETH_B }, 'conflict', `interface ${VETH_B} already exists`],
      [{ nsPath: nsB }, 'conflict', `interface eth0 already exists in ${nsB}`],
      [{ nsPath: '/run/netns/berth-t-none' }, 'system', /open '\/run\/netns\/berth-t-none'/],
      // Made, then refused inside: the gateway is off the container's network. Undone.
      [{ gateway: '10.99.0.1' }, 'system', /add route to default via 10.99.0.1 on "eth0": Network is unreachable/],
    ];
    for (const [change, kind, message] of cases) {
      const e = thrown(() => attachContainer({ ...base, ...change } as Parameters<typeof attachContainer>[0]));
      expect([change, isEngineError(e) && e.kind]).toEqual([change, kind]);
      expect(e.message).toMatch(message);
    }
    expect(linkNames(hostNs)).not.toContain(`vc${TAG}`);
    expect(linkNames(nsA)).toEqual(['lo']);

    expect(thrown(() => ensureBridge({ name: VETH_B, hostNs })).message).toBe(`${VETH_B}: it is a veth, not a bridge`);
    expect(thrown(() => removeBridge(VETH_B, hostNs)).message).toBe(
      `cannot remove ${VETH_B}: it is a veth, not a bridge`,
    );
    expect(thrown(() => detachContainer(BRIDGE, hostNs)).message).toBe(
      `cannot detach ${BRIDGE}: it is a bridge, not a veth`,
    );
    expect(thrown(() => ensureBridge({ name: BRIDGE, gatewayCidr: '10.231.0.1', hostNs })).kind).toBe('invalid');
  });

  it('removes the bridge; removing it again is no error', () => {
    expect(detachContainer(VETH_B, hostNs)).toBe(true);
    expect(linkNames(nsB)).toEqual(['lo']);
    expect(removeBridge(BRIDGE, hostNs)).toBe(true);
    expect(linkNames(hostNs)).toEqual(['lo']);
    expect(removeBridge(BRIDGE, hostNs)).toBe(false);
  });
});

describe('Netlink, the requests underneath', () => {
  it('adds, finds, changes and deletes links, addresses and routes', () => {
    const nl = Netlink.open(nsA);
    try {
      expect(nl.addBridge('br0', { mtu: 1500, mac: '02:00:00:00:00:01' })).toBe(true);
      expect(
        isNetlinkError(
          thrown(() => nl.addBridge('br0')),
          'EEXIST',
        ),
      ).toBe(true);
      expect(nl.addBridge('br0', { existOk: true })).toBe(false);
      // Both ends in this one namespace, the peer's named by an open descriptor of it.
      const fd = openSync(nsA, 'r');
      try {
        nl.addVeth('v0', 'v1', fd, { mtu: 1400, mac: '02:00:00:00:00:10', peerMac: '02:00:00:00:00:11' });
      } finally {
        closeSync(fd);
      }
      nl.setMaster('v0', 'br0');
      nl.setUp('v0');
      nl.setUp('br0');
      nl.setMac('v1', '02:00:00:00:00:12');
      nl.setMtu('v1', 1300);
      expect(nl.linkIndex('br0')).toBeGreaterThan(0);
      expect(nl.linkIndex('nothing')).toBeNull();
      expect(nl.link('v0')).toMatchObject({ name: 'v0', kind: 'veth', master: 'br0', mtu: 1400, up: true });
      const links = nl.listLinks();
      expect(links.map((l) => l.name)).toEqual(['lo', 'br0', 'v1', 'v0']);
      expect(links.find((l) => l.name === 'v1')).toMatchObject({ mac: '02:00:00:00:00:12', mtu: 1300, master: null });
      expect(ipJson(nsA, 'link', 'show', 'v0')[0]).toMatchObject({ master: 'br0', address: '02:00:00:00:00:10' });

      nl.addAddress('v1', '192.168.77.2/24');
      nl.addAddress('v1', 'fd00:77::2/64', { nodad: true });
      expect(
        isNetlinkError(
          thrown(() => nl.addAddress('v1', '192.168.77.2/24')),
          'EEXIST',
        ),
      ).toBe(true);
      nl.setUp('v1');
      const mine = nl.listAddresses('v1').filter((x) => !x.address.startsWith('fe80'));
      expect(mine.map((x) => x.cidr)).toEqual(['192.168.77.2/24', 'fd00:77::2/64']);
      nl.addRoute('10.50.0.0/16', '192.168.77.1', 'v1');
      nl.addRoute('10.60.0.0/16', null, 'v1');
      nl.addDefaultRoute('fd00:77::1', 'v1');
      expect(ipJson(nsA, 'route')).toEqual(
        expect.arrayContaining([
          expect.objectContaining({ dst: '10.50.0.0/16', gateway: '192.168.77.1', dev: 'v1' }),
          expect.objectContaining({ dst: '10.60.0.0/16', dev: 'v1', scope: 'link' }),
        ]),
      );
      const v1 = nl.linkIndex('v1');
      expect(nl.listRoutes(4)).toEqual(
        expect.arrayContaining([
          expect.objectContaining({ dst: '10.50.0.0/16', gateway: '192.168.77.1', devIndex: v1 }),
          expect.objectContaining({ dst: '192.168.77.0/24', gateway: null, devIndex: v1 }),
        ]),
      );
      expect(nl.listRoutes(6)).toEqual(
        expect.arrayContaining([expect.objectContaining({ dst: 'default', gateway: 'fd00:77::1' })]),
      );
      expect(thrown(() => nl.addRoute('10.70.0.0/16', 'fd00:77::1', 'v1')).message).toMatch(/differ in family/);

      nl.setMaster('v0', null);
      expect(nl.link('v0')?.master).toBeNull();
      nl.setDown('br0');
      expect(nl.link('br0')?.up).toBe(false);
      expect(nl.deleteLink('v0')).toBe(true);
      expect(nl.link('v1')).toBeNull(); // the peer went with it
      expect(
        isNetlinkError(
          thrown(() => nl.deleteLink('v0')),
          'ENODEV',
        ),
      ).toBe(true);
      expect(nl.deleteLink('v0', { missingOk: true })).toBe(false);
      expect(nl.deleteLink('br0')).toBe(true);
      expect(linkNames(nsA)).toEqual(['lo']);
    } finally {
      nl.close();
    }
  });

  it('names what it was asked when the kernel refuses, with the errno and the kernel’s reason', () => {
    const nl = Netlink.open(nsA);
    try {
      const e = thrown(() => nl.setUp('nothing'));
      expect(e).toMatchObject({ name: 'NetlinkError', code: 'ENODEV', errno: -19 });
      expect(e.message).toBe('bring "nothing" up: No such device');
      const route = thrown(() => nl.addRoute('default', '10.1.1.1', 'lo'));
      expect(route.code).toBe('ENETUNREACH');
      expect(route.message).toMatch(/^add route to default via 10.1.1.1 on "lo": Network is unreachable/);
      expect(thrown(() => nl.addBridge('a:b')).message).toBe(
        `create bridge "a:b": "a:b" is not a valid interface name: it contains '/', ':' or whitespace`,
      );
    } finally {
      nl.close();
    }
    expect(thrown(() => nl.listLinks()).code).toBe('EBADF');
    const notNet = thrown(() => Netlink.open('/proc/self/ns/mnt'));
    expect(notNet).toMatchObject({ code: 'EINVAL' });
    expect(notNet.message).toMatch(/setns '\/proc\/self\/ns\/mnt'/);
    expect(thrown(() => Netlink.open('/nonexistent/ns')).code).toBe('ENOENT');
  });

  it('a socket opened in a namespace sees that namespace only; without one, berthd’s own', () => {
    const inA = Netlink.open(nsA);
    const own = Netlink.open();
    try {
      inA.addBridge('only-in-a');
      expect(inA.linkIndex('only-in-a')).not.toBeNull();
      expect(own.linkIndex('only-in-a')).toBeNull();
      expect(own.listLinks().map((l) => l.name)).toEqual(linkNames('/proc/self/ns/net'));
      inA.deleteLink('only-in-a');
    } finally {
      inA.close();
      own.close();
    }
  });

  it('leaves no descriptor open, whether calls succeed or fail', () => {
    ensureBridge({ name: BRIDGE, gatewayCidr: '10.231.0.1/24', hostNs });
    const attach = () =>
      attachContainer({
        nsPath: nsA,
        bridge: BRIDGE,
        hostIfName: VETH_A,
        cidr: '10.231.0.2/24',
        gateway: '10.231.0.1',
        hostNs,
      });
    attach(); // warm: whatever the first calls open for good (none expected)
    detachContainer(VETH_A, hostNs);
    const before = openFds();
    for (let i = 0; i < 20; i++) {
      attach();
      thrown(attach);
      thrown(() =>
        attachContainer({ nsPath: nsA, bridge: 'absent', hostIfName: VETH_A, cidr: '10.231.0.2/24', hostNs }),
      );
      detachContainer(VETH_A, hostNs);
    }
    expect(openFds()).toBe(before);
    removeBridge(BRIDGE, hostNs);
  });

  it('leaves the machine’s own namespace as it was', () => {
    expect(linkNames('/proc/self/ns/net').filter((n) => n.includes(TAG))).toEqual([]);
  });
});
