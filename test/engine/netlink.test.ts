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

/** What a promise was rejected with. */
async function rejected(p: Promise<unknown>): Promise<any> {
  return p.then(
    () => {
      throw new Error('expected it to be rejected');
    },
    (e) => e,
  );
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

  it('makes the bridge in its namespace: up, its addresses, its MTU, a fixed MAC, route_localnet; again changes nothing', async () => {
    const made = await ensureBridge({
      name: BRIDGE,
      gatewayCidr: ['10.231.0.1/24', 'fd00:231::1/64'],
      mtu: 1450,
      hostNs,
    });
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

    const again = await ensureBridge({
      name: BRIDGE,
      gatewayCidr: ['10.231.0.1/24', 'fd00:231::1/64'],
      mtu: 1450,
      hostNs,
    });
    expect(again).toEqual({ ...made, created: false });
    expect(cidrs(ipJson(hostNs, 'addr', 'show', BRIDGE)[0])).toEqual(['10.231.0.1/24', 'fd00:231::1/64']);
    // The bridge stayed in its own namespace.
    expect(linkNames('/proc/self/ns/net')).not.toContain(BRIDGE);
  });

  it('attaches containers: eth0 inside with address, MAC, MTU and default routes; the host end on the bridge, up', async () => {
    const a = await attachContainer({
      nsPath: nsA,
      bridge: BRIDGE,
      hostIfName: VETH_A,
      cidr: ['10.231.0.2/24', 'fd00:231::2/64'],
      gateway: ['10.231.0.1', 'fd00:231::1'],
      hostNs,
    });
    expect(a).toEqual({ mac: '02:42:0a:e7:00:02', mtu: 1450 });
    const b = await attachContainer({
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

  it('detaches: both ends of the pair go; detaching again is no error; the names are free again', async () => {
    expect(await detachContainer(VETH_A, hostNs)).toBe(true);
    expect(linkNames(hostNs)).not.toContain(VETH_A);
    expect(linkNames(nsA)).toEqual(['lo']);
    expect(ipJson(nsA, 'route')).toEqual([]);
    expect(await detachContainer(VETH_A, hostNs)).toBe(false);
    // B is untouched.
    expect(ping(nsB, '10.231.0.1')).toContain('1 packets received');

    await attachContainer({ nsPath: nsA, bridge: BRIDGE, hostIfName: VETH_A, cidr: '10.231.0.2/24', hostNs });
    expect(linkNames(nsA)).toEqual(['lo', 'eth0']);
    expect(ping(nsA, '10.231.0.3')).toContain('1 packets received');
    expect(await detachContainer(VETH_A, hostNs)).toBe(true);
  });

  it('refuses clearly: bad names and addresses, a missing bridge, taken names, a missing namespace', async () => {
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
      const e = await rejected(attachContainer({ ...base, ...change } as Parameters<typeof attachContainer>[0]));
      expect([change, isEngineError(e) && e.kind]).toEqual([change, kind]);
      expect(e.message).toMatch(message);
    }
    expect(linkNames(hostNs)).not.toContain(`vc${TAG}`);
    expect(linkNames(nsA)).toEqual(['lo']);

    expect((await rejected(ensureBridge({ name: VETH_B, hostNs }))).message).toBe(
      `${VETH_B}: it is a veth, not a bridge`,
    );
    expect((await rejected(removeBridge(VETH_B, hostNs))).message).toBe(
      `cannot remove ${VETH_B}: it is a veth, not a bridge`,
    );
    expect((await rejected(detachContainer(BRIDGE, hostNs))).message).toBe(
      `cannot detach ${BRIDGE}: it is a bridge, not a veth`,
    );
    expect((await rejected(ensureBridge({ name: BRIDGE, gatewayCidr: '10.231.0.1', hostNs }))).kind).toBe('invalid');
  });

  it('removes the bridge; removing it again is no error', async () => {
    expect(await detachContainer(VETH_B, hostNs)).toBe(true);
    expect(linkNames(nsB)).toEqual(['lo']);
    expect(await removeBridge(BRIDGE, hostNs)).toBe(true);
    expect(linkNames(hostNs)).toEqual(['lo']);
    expect(await removeBridge(BRIDGE, hostNs)).toBe(false);
  });
});

describe('Netlink, the requests underneath', () => {
  it('adds, finds, changes and deletes links, addresses and routes', async () => {
    const nl = Netlink.open(nsA);
    try {
      expect(await nl.addBridge('br0', { mtu: 1500, mac: '02:00:00:00:00:01' })).toBe(true);
      expect(isNetlinkError(await rejected(nl.addBridge('br0')), 'EEXIST')).toBe(true);
      expect(await nl.addBridge('br0', { existOk: true })).toBe(false);
      // Both ends in this one namespace, the peer's named by an open descriptor of it.
      const fd = openSync(nsA, 'r');
      try {
        await nl.addVeth('v0', 'v1', fd, { mtu: 1400, mac: '02:00:00:00:00:10', peerMac: '02:00:00:00:00:11' });
      } finally {
        closeSync(fd);
      }
      await nl.setMaster('v0', 'br0');
      await nl.setUp('v0');
      await nl.setUp('br0');
      await nl.setMac('v1', '02:00:00:00:00:12');
      await nl.setMtu('v1', 1300);
      expect(await nl.linkIndex('br0')).toBeGreaterThan(0);
      expect(await nl.linkIndex('nothing')).toBeNull();
      expect(await nl.link('v0')).toMatchObject({ name: 'v0', kind: 'veth', master: 'br0', mtu: 1400, up: true });
      const links = await nl.listLinks();
      expect(links.map((l) => l.name)).toEqual(['lo', 'br0', 'v1', 'v0']);
      expect(links.find((l) => l.name === 'v1')).toMatchObject({ mac: '02:00:00:00:00:12', mtu: 1300, master: null });
      expect(ipJson(nsA, 'link', 'show', 'v0')[0]).toMatchObject({ master: 'br0', address: '02:00:00:00:00:10' });

      await nl.addAddress('v1', '192.168.77.2/24');
      await nl.addAddress('v1', 'fd00:77::2/64', { nodad: true });
      expect(isNetlinkError(await rejected(nl.addAddress('v1', '192.168.77.2/24')), 'EEXIST')).toBe(true);
      await nl.setUp('v1');
      const mine = (await nl.listAddresses('v1')).filter((x) => !x.address.startsWith('fe80'));
      expect(mine.map((x) => x.cidr)).toEqual(['192.168.77.2/24', 'fd00:77::2/64']);
      await nl.addRoute('10.50.0.0/16', '192.168.77.1', 'v1');
      await nl.addRoute('10.60.0.0/16', null, 'v1');
      await nl.addDefaultRoute('fd00:77::1', 'v1');
      expect(ipJson(nsA, 'route')).toEqual(
        expect.arrayContaining([
          expect.objectContaining({ dst: '10.50.0.0/16', gateway: '192.168.77.1', dev: 'v1' }),
          expect.objectContaining({ dst: '10.60.0.0/16', dev: 'v1', scope: 'link' }),
        ]),
      );
      const v1 = await nl.linkIndex('v1');
      expect(await nl.listRoutes(4)).toEqual(
        expect.arrayContaining([
          expect.objectContaining({ dst: '10.50.0.0/16', gateway: '192.168.77.1', devIndex: v1 }),
          expect.objectContaining({ dst: '192.168.77.0/24', gateway: null, devIndex: v1 }),
        ]),
      );
      expect(await nl.listRoutes(6)).toEqual(
        expect.arrayContaining([expect.objectContaining({ dst: 'default', gateway: 'fd00:77::1' })]),
      );
      expect((await rejected(nl.addRoute('10.70.0.0/16', 'fd00:77::1', 'v1'))).message).toMatch(/differ in family/);

      await nl.setMaster('v0', null);
      expect((await nl.link('v0'))?.master).toBeNull();
      await nl.setDown('br0');
      expect((await nl.link('br0'))?.up).toBe(false);
      expect(await nl.deleteLink('v0')).toBe(true);
      expect(await nl.link('v1')).toBeNull(); // the peer went with it
      expect(isNetlinkError(await rejected(nl.deleteLink('v0')), 'ENODEV')).toBe(true);
      expect(await nl.deleteLink('v0', { missingOk: true })).toBe(false);
      expect(await nl.deleteLink('br0')).toBe(true);
      expect(linkNames(nsA)).toEqual(['lo']);
    } finally {
      nl.close();
    }
  });

  it('names what it was asked when the kernel refuses, with the errno and the kernel’s reason', async () => {
    const nl = Netlink.open(nsA);
    try {
      const e = await rejected(nl.setUp('nothing'));
      expect(e).toMatchObject({ name: 'NetlinkError', code: 'ENODEV', errno: -19 });
      expect(e.message).toBe('bring "nothing" up: No such device');
      const route = await rejected(nl.addRoute('default', '10.1.1.1', 'lo'));
      expect(route.code).toBe('ENETUNREACH');
      expect(route.detail).toMatch(/gateway/i); // the kernel's reason, from its extended ack
      expect(route.message).toMatch(/^add route to default via 10.1.1.1 on "lo": Network is unreachable/);
      expect((await rejected(nl.addBridge('a:b'))).message).toBe(
        `create bridge "a:b": "a:b" is not a valid interface name: it contains '/', ':' or whitespace`,
      );
    } finally {
      nl.close();
    }
    expect((await rejected(nl.listLinks())).code).toBe('EBADF');
    const notNet = thrown(() => Netlink.open('/proc/self/ns/mnt'));
    expect(notNet).toMatchObject({ code: 'EINVAL' });
    expect(notNet.message).toMatch(/setns '\/proc\/self\/ns\/mnt'/);
    expect(thrown(() => Netlink.open('/nonexistent/ns')).code).toBe('ENOENT');
  });

  it('a socket opened in a namespace sees that namespace only; without one, berthd’s own', async () => {
    const inA = Netlink.open(nsA);
    const own = Netlink.open();
    try {
      await inA.addBridge('only-in-a');
      expect(await inA.linkIndex('only-in-a')).not.toBeNull();
      expect(await own.linkIndex('only-in-a')).toBeNull();
      expect((await own.listLinks()).map((l) => l.name)).toEqual(linkNames('/proc/self/ns/net'));
      await inA.deleteLink('only-in-a');
    } finally {
      inA.close();
      own.close();
    }
  });

  it('answers requests asked together one at a time, in order; close waits for those under way', async () => {
    const nl = Netlink.open(nsA);
    const asked = [nl.addBridge('q0'), nl.addBridge('q1', { mtu: 1400 }), nl.link('q1'), nl.listLinks()] as const;
    // Many at once: answers to one request never reach another.
    const many = Array.from({ length: 40 }, (_, i) => (i % 2 ? nl.listLinks() : nl.link(i % 4 ? 'q0' : 'q1')));
    nl.close();
    const [q0, q1, link, links] = await Promise.all(asked);
    expect([q0, q1]).toEqual([true, true]);
    expect(link).toMatchObject({ name: 'q1', kind: 'bridge', mtu: 1400 });
    expect(links.map((l) => l.name)).toEqual(['lo', 'q0', 'q1']);
    for (const [i, answer] of (await Promise.all(many)).entries()) {
      if (Array.isArray(answer)) expect(answer.map((l) => l.name)).toEqual(['lo', 'q0', 'q1']);
      else expect(answer?.name).toBe(i % 4 ? 'q0' : 'q1');
    }
    await new Promise((r) => setImmediate(r));
    expect((await rejected(nl.link('q0'))).code).toBe('EBADF');
    const other = Netlink.open(nsA);
    await Promise.all([other.deleteLink('q0'), other.deleteLink('q1')]);
    other.close();
    expect(linkNames(nsA)).toEqual(['lo']);
  });

  it('leaves no descriptor open, whether calls succeed or fail', async () => {
    await ensureBridge({ name: BRIDGE, gatewayCidr: '10.231.0.1/24', hostNs });
    const attach = () =>
      attachContainer({
        nsPath: nsA,
        bridge: BRIDGE,
        hostIfName: VETH_A,
        cidr: '10.231.0.2/24',
        gateway: '10.231.0.1',
        hostNs,
      });
    await attach(); // warm: whatever the first calls open for good (none expected)
    await detachContainer(VETH_A, hostNs);
    const before = openFds();
    for (let i = 0; i < 20; i++) {
      await attach();
      await rejected(attach());
      await rejected(
        attachContainer({ nsPath: nsA, bridge: 'absent', hostIfName: VETH_A, cidr: '10.231.0.2/24', hostNs }),
      );
      await detachContainer(VETH_A, hostNs);
    }
    expect(openFds()).toBe(before);
    await removeBridge(BRIDGE, hostNs);
  });

  it('leaves the machine’s own namespace as it was', async () => {
    expect(linkNames('/proc/self/ns/net').filter((n) => n.includes(TAG))).toEqual([]);
  });
});
