// A bridge network's links, made in-process over rtnetlink (os/netlink.ts):
// the bridge with its gateway address, and each container's veth pair, one
// end on the bridge, the other as eth0 inside the container's network
// namespace with its address, MAC and default route. Firewall rules and DNS
// are not here.
//
// API (each returns a Promise; names are interface names, at most 15 bytes;
// `hostNs` is the path of the namespace the bridge lives in, berthd's own when absent):
//   ensureBridge({name, gatewayCidr?, mtu?, mac?, hostNs?, ipv6?}): {created, index, mac, mtu}
//       creates the bridge when absent (with a fixed MAC: a bridge without one takes
//       its ports' lowest, which changes as containers come and go), adds the gateway
//       address(es), sets route_localnet (so DNAT to 127.0.0.1 works), brings it up;
//       on an existing bridge does what is missing of the same, and drops IPv4
//       addresses it was not given (when given one). Idempotent.
//   linkIPv4Cidrs(name, hostNs?): string[]      the link's IPv4 addresses; [] when absent
//   removeBridge(name, hostNs?): boolean       false: there was none
//   attachContainer({nsPath, bridge, hostIfName, ifName = 'eth0', cidr, gateway?, mac?, mtu?, hostNs?, ipv6?}):
//       {mac, mtu}
//       a veth pair with its peer made inside nsPath, host end on the bridge and up;
//       in the namespace: IPv6 on or off (disable_ipv6) when asked, the address(es),
//       the MAC (dockerd's 02:42:<IPv4> when not given), up, and a default route
//       through each gateway. Undone when a step fails.
//   detachContainer(hostIfName, hostNs?): boolean   deletes the host end (its peer goes
//       with it); false: there was none
//   macForIPv4(ip): string                     dockerd's 02:42:<the 4 bytes> (not a Promise)
// cidr and gateway take one address or a list (IPv4 and IPv6; one default route per
// gateway). Errors are EngineErrors: invalid input, a missing bridge (not found), a
// name in use (conflict); what the kernel refuses otherwise is a system error whose
// cause is the NetlinkError.
import { randomBytes } from 'node:crypto';
import { conflict, EngineError, invalidParameter, notFound, systemError } from '../../errors.js';
import { isNetlinkError, type Link, Netlink } from '../os/netlink.js';
import { formatIP, formatMac, linkNameProblem, parseCidr, parseIP, parseMac } from '../os/netlink-wire.js';
import { writeNetnsSysctl } from '../os/netns-sysctl.js';

export interface BridgeSpec {
  name: string;
  /** The bridge's own address(es) on the network, the containers' gateway: 172.18.0.1/16. */
  gatewayCidr?: string | string[];
  mtu?: number;
  mac?: string;
  hostNs?: string;
  /** IPv6 turned on for the bridge (disable_ipv6 0), before its IPv6 gateway address is added. */
  ipv6?: boolean;
}

export interface BridgeState {
  /** False when the bridge was there already. */
  created: boolean;
  index: number;
  mac: string;
  mtu: number;
}

export interface AttachSpec {
  /** The container's network namespace: /proc/<pid>/ns/net or a bind-mounted ns file. */
  nsPath: string;
  bridge: string;
  /** The host end's name, unique on the host: e.g. veth + part of the container's id. */
  hostIfName: string;
  /** The name inside the container. */
  ifName?: string;
  /** The container's address(es) with prefix length: 172.18.0.2/16. */
  cidr: string | string[];
  /** A default route through each. */
  gateway?: string | string[];
  mac?: string;
  /** The bridge's when absent. */
  mtu?: number;
  hostNs?: string;
  /**
   * false: IPv6 is turned off on the interface (disable_ipv6), as dockerd does
   * for an endpoint without an IPv6 address; true: on. Absent: as the kernel has it.
   */
  ipv6?: boolean;
}

export interface Attachment {
  mac: string;
  mtu: number;
}

export async function ensureBridge(spec: BridgeSpec): Promise<BridgeState> {
  checkName(spec.name);
  const cidrs = checkCidrs(list(spec.gatewayCidr), 'gateway');
  if (spec.mac !== undefined) checkMac(spec.mac);
  if (spec.mtu !== undefined) checkMtu(spec.mtu);
  return withNetlink(spec.hostNs, `set up bridge ${spec.name}`, async (nl) => {
    const existing = await nl.link(spec.name);
    if (existing && existing.kind !== 'bridge') throw conflict(isNot(existing, 'bridge'));
    // existOk: made meanwhile by another call is as good.
    const created =
      !existing && (await nl.addBridge(spec.name, { mtu: spec.mtu, mac: spec.mac ?? randomMac(), existOk: true }));
    try {
      return await configureBridge(nl, spec, cidrs, created);
    } catch (e) {
      if (created) await undo(() => nl.deleteLink(spec.name, { missingOk: true }));
      throw e;
    }
  });
}

/**
 * A bridge has the one IPv4 address it is given, as dockerd's setupBridgeIPv4
 * replaces docker0's: an address left by another --bip, or by an earlier
 * daemon that chose another subnet, would otherwise stay and grow in number
 * with each start.
 */
async function dropOtherIPv4(nl: Netlink, name: string, cidrs: string[]): Promise<void> {
  const wanted = cidrs.map(parseCidr).filter((c) => c?.family === 4);
  if (wanted.length === 0) return;
  const keep = new Set(wanted.map((c) => `${formatIP(c!.address)}/${c!.prefixLength}`));
  for (const a of await nl.listAddresses(name)) {
    if (a.family === 4 && !keep.has(a.cidr)) await nl.deleteAddress(name, a.cidr, { missingOk: true });
  }
}

/** The IPv4 addresses (with prefix length) a link has now; none when there is no such link. */
export async function linkIPv4Cidrs(name: string, hostNs?: string): Promise<string[]> {
  checkName(name);
  return withNetlink(hostNs, `list the addresses of ${name}`, async (nl) => {
    if ((await nl.linkIndex(name)) === null) return [];
    return (await nl.listAddresses(name)).filter((a) => a.family === 4).map((a) => a.cidr);
  });
}

/** What an existing bridge may lack: the asked MTU and MAC, route_localnet, the addresses, up. */
async function configureBridge(nl: Netlink, spec: BridgeSpec, cidrs: string[], created: boolean) {
  const { name, mtu, mac } = spec;
  const before = (await nl.link(name))!;
  if (mtu !== undefined && before.mtu !== mtu) await nl.setMtu(name, mtu);
  if (mac !== undefined && before.mac !== formatMac(parseMac(mac)!)) await nl.setMac(name, mac);
  await nl.setIPv4Conf(name, { routeLocalnet: 1 });
  // Dropped first: removing a primary address takes the secondaries of its subnet with it.
  await dropOtherIPv4(nl, name, cidrs);
  if (spec.ipv6) setInterfaceIPv6(spec.hostNs ?? '/proc/self/ns/net', name, true);
  for (const cidr of cidrs) await addAddressOnce(nl, name, cidr);
  await nl.setUp(name);
  const after = (await nl.link(name))!;
  return { created, index: after.index, mac: after.mac!, mtu: after.mtu };
}

export async function removeBridge(name: string, hostNs?: string): Promise<boolean> {
  checkName(name);
  return withNetlink(hostNs, `remove bridge ${name}`, async (nl) => {
    const link = await nl.link(name);
    if (!link) return false;
    if (link.kind !== 'bridge') throw conflict(`cannot remove ${isNot(link, 'bridge')}`);
    return nl.deleteLink(name, { missingOk: true });
  });
}

export async function attachContainer(spec: AttachSpec): Promise<Attachment> {
  const ifName = spec.ifName ?? 'eth0';
  for (const name of [spec.bridge, spec.hostIfName, ifName]) checkName(name);
  const cidrs = checkCidrs(list(spec.cidr), 'container');
  if (cidrs.length === 0) throw invalidParameter('a container needs at least one address');
  const gateways = list(spec.gateway).map(checkGateway);
  const mac = spec.mac ?? defaultMac(cidrs);
  if (mac !== undefined) checkMac(mac);
  if (spec.mtu !== undefined) checkMtu(spec.mtu);
  return withNetlink(spec.hostNs, `attach ${spec.hostIfName} to ${spec.bridge}`, async (host) => {
    const bridge = await host.link(spec.bridge);
    if (!bridge) throw notFound(`bridge ${spec.bridge} not found`);
    if (bridge.kind !== 'bridge') throw invalidParameter(isNot(bridge, 'bridge'));
    const mtu = spec.mtu ?? bridge.mtu;
    // Opened first: a bad namespace fails here, before anything is made.
    const inside = Netlink.open(spec.nsPath);
    try {
      await createVeth(host, spec, ifName, { mtu, peerMac: mac, master: bridge.index, up: true });
      try {
        if (spec.ipv6 !== undefined) setInterfaceIPv6(spec.nsPath, ifName, spec.ipv6);
        return await configureInside(inside, ifName, cidrs, gateways, mtu);
      } catch (e) {
        await undo(() => host.deleteLink(spec.hostIfName, { missingOk: true }));
        throw e;
      }
    } finally {
      inside.close();
    }
  });
}

export async function detachContainer(hostIfName: string, hostNs?: string): Promise<boolean> {
  checkName(hostIfName);
  return withNetlink(hostNs, `detach ${hostIfName}`, async (nl) => {
    const link = await nl.link(hostIfName);
    if (!link) return false;
    if (link.kind !== 'veth') throw conflict(`cannot detach ${isNot(link, 'veth')}`);
    return nl.deleteLink(hostIfName, { missingOk: true });
  });
}

/** dockerd's MAC for a container's IPv4 address: 02:42 and the address's 4 bytes. */
export function macForIPv4(ip: string): string {
  const b = parseIP(ip);
  if (b?.length !== 4) throw invalidParameter(`${ip} is not an IPv4 address`);
  return dockerMac(b);
}

const dockerMac = (ipv4: Buffer): string => formatMac(Buffer.from([0x02, 0x42, ...ipv4]));

async function createVeth(
  host: Netlink,
  spec: AttachSpec,
  ifName: string,
  o: { mtu: number; peerMac: string | undefined; master: number; up: boolean },
): Promise<void> {
  try {
    await host.addVeth(spec.hostIfName, ifName, spec.nsPath, o);
  } catch (e) {
    if (!isNetlinkError(e, 'EEXIST')) throw e;
    // The kernel does not say which end's name is taken.
    if ((await host.linkIndex(spec.hostIfName)) !== null) throw conflict(`interface ${spec.hostIfName} already exists`);
    throw conflict(`interface ${ifName} already exists in ${spec.nsPath}`);
  }
}

async function configureInside(nl: Netlink, ifName: string, cidrs: string[], gateways: string[], mtu: number) {
  const link = await nl.link(ifName);
  if (!link) throw systemError(`${ifName} is missing from the container's namespace right after it was made`);
  for (const cidr of cidrs) await nl.addAddress(link, cidr, { nodad: true });
  await nl.setUp(ifName);
  for (const gateway of gateways) await nl.addDefaultRoute(gateway, link);
  return { mac: link.mac!, mtu };
}

/** disable_ipv6 of the interface, before it has an address or is up; nothing when the kernel has no IPv6. */
function setInterfaceIPv6(nsPath: string, ifName: string, on: boolean): void {
  try {
    writeNetnsSysctl(nsPath, ['ipv6', 'conf', ifName, 'disable_ipv6'], on ? '0' : '1');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
  }
}

/**
 * Undoes what a failed call made. The call's own error is what the caller needs;
 * a failure to undo leaves a link that the next attempt reports by name.
 */
async function undo(fn: () => Promise<unknown>): Promise<void> {
  await fn().catch(() => {});
}

/** Adds an address unless the link has it already. */
async function addAddressOnce(nl: Netlink, name: string, cidr: string): Promise<void> {
  try {
    await nl.addAddress(name, cidr, { nodad: true });
  } catch (e) {
    if (!isNetlinkError(e, 'EEXIST')) throw e;
  }
}

/** Runs `fn` with a socket in `nsPath`, closed after; kernel refusals become system errors saying what failed. */
async function withNetlink<T>(nsPath: string | undefined, what: string, fn: (nl: Netlink) => Promise<T>): Promise<T> {
  let nl: Netlink | undefined;
  try {
    nl = Netlink.open(nsPath);
    return await fn(nl);
  } catch (e) {
    if (e instanceof EngineError) throw e;
    throw systemError(`${what}: ${(e as Error).message}`, e);
  } finally {
    nl?.close();
  }
}

/** "eth1: it is a device, not a veth" (a device has no kind: lo, a physical NIC). */
const isNot = (link: Link, kind: string): string => `${link.name}: it is a ${link.kind ?? 'device'}, not a ${kind}`;

const list = (v: string | string[] | undefined): string[] => (v === undefined ? [] : Array.isArray(v) ? v : [v]);

function checkName(name: string): void {
  const problem = linkNameProblem(name);
  if (problem) throw invalidParameter(`invalid interface name ${JSON.stringify(name)}: ${problem}`);
}

function checkCidrs(cidrs: string[], whose: string): string[] {
  for (const c of cidrs)
    if (!parseCidr(c))
      throw invalidParameter(`invalid ${whose} address ${JSON.stringify(c)}: not an IP address with a prefix length`);
  return cidrs;
}

function checkGateway(gateway: string): string {
  if (!parseIP(gateway)) throw invalidParameter(`invalid gateway ${JSON.stringify(gateway)}: not an IP address`);
  return gateway;
}

function checkMtu(mtu: number): void {
  if (!Number.isInteger(mtu) || mtu < 68 || mtu > 65535) throw invalidParameter(`invalid MTU ${mtu}: not in 68-65535`);
}

function checkMac(mac: string): void {
  const b = parseMac(mac);
  if (!b || b[0]! & 1) throw invalidParameter(`invalid MAC address ${JSON.stringify(mac)}`);
}

/** dockerd's MAC from the first IPv4 address; none for IPv6 alone (the kernel picks a random one). */
function defaultMac(cidrs: string[]): string | undefined {
  const v4 = cidrs.map(parseCidr).find((c) => c?.family === 4);
  return v4 ? dockerMac(v4.address) : undefined;
}

/** A random locally administered unicast MAC. */
function randomMac(): string {
  const b = randomBytes(6);
  b[0] = (b[0]! & 0xfe) | 0x02;
  return formatMac(b);
}
