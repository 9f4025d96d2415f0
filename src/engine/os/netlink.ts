// Links, addresses and routes over rtnetlink, in-process: one request is a
// send and a receive on a NETLINK_ROUTE socket, well under a millisecond
// where spawning `ip` (or a CNI plugin, or netavark) costs tens to hundreds of
// milliseconds on a small machine. The socket is made by src/native/netlink.c,
// in berthd's own network namespace or in another one (a container's); the
// messages are encoded in netlink-wire.ts.
//
// Requests are asynchronous, each on a thread of its own: the kernel answers
// most at once, but every request takes its one rtnl lock, which deleting a
// link or tearing down a namespace (any container's exit) holds for
// milliseconds. A socket's requests run one at a time, in call order. A lost
// answer times out (ETIMEDOUT) rather than hanging.
//
// API (every method but open and close returns a Promise; errors are
// NetlinkError, `code` the errno name: EEXIST, ENODEV…; addAddress's link and
// addRoute's dev may be an index or a Link, which saves a lookup):
//   const nl = Netlink.open(nsPath?)   socket in the namespace at nsPath (/proc/<pid>/ns/net,
//                                      a bind-mounted ns file), or in berthd's own
//   nl.close()                         at once, or once the requests under way are answered
//   nl.link(name): Link | null          nl.linkIndex(name): number | null
//   nl.listLinks(): Link[]              Link = {index, name, kind, master, masterIndex, mac, mtu, up}
//   nl.addBridge(name, {mtu?, mac?, existOk?}): boolean          false: existed (existOk), else EEXIST
//   nl.addVeth(hostName, peerName, peerNs, {mtu?, mac?, peerMac?, master?, up?})
//                                      peer made directly inside peerNs (an ns path or an open fd)
//   nl.deleteLink(name, {missingOk?}): boolean                   false: absent (missingOk), else ENODEV
//   nl.setMaster(name, bridge | null)   nl.setUp(name)   nl.setDown(name)
//   nl.setMac(name, mac)                nl.setMtu(name, mtu)
//   nl.setIPv4Conf(name, {routeLocalnet: 1, …})  /proc/sys/net/ipv4/conf/<name>/*, in the socket's namespace
//   nl.addAddress(link, cidr, {nodad?})           IPv4 or IPv6; EEXIST when present
//   nl.listAddresses(name?): Address[]            Address = {index, family, address, prefixLength, cidr}
//   nl.addRoute(dst, gateway, dev)                dst: 'default' or a CIDR; gateway may be null
//   nl.addDefaultRoute(gateway, dev)
//   nl.listRoutes(family?): Route[]               the main table
//   nl.request(what, type, flags, header, attrs): Message[]   any other rtnetlink request
import { closeSync, constants, openSync } from 'node:fs';
import { native } from './native.js';
import {
  AF_INET,
  AF_INET6,
  AF_UNSPEC,
  type AddressMessage,
  type Attr,
  attr,
  decodeAddress,
  decodeLink,
  decodeMessage,
  decodeRoute,
  encodeAttrs,
  encodeMessage,
  formatMac,
  IFA,
  IFA_F_NODAD,
  ifaddrmsg,
  IFF_UP,
  IFLA,
  ifinfomsg,
  IPV4_DEVCONF,
  type LinkMessage,
  linkNameProblem,
  type Message,
  NLM_F,
  parseCidr,
  parseIP,
  parseMac,
  RT_SCOPE_LINK,
  RT_SCOPE_UNIVERSE,
  RT_TABLE_MAIN,
  RTA,
  RTEXT_FILTER_SKIP_STATS,
  RTM,
  rtmsg,
  RTN_UNICAST,
  type RouteMessage,
  RTPROT_BOOT,
  u32,
  VETH_INFO_PEER,
} from './netlink-wire.js';

export interface Link extends LinkMessage {
  /** The name of the bridge (or other master) it is a port of. */
  master: string | null;
}
export type Address = AddressMessage;
/** A link by name, by index, or as link() found it (its index is used, its name in errors). */
export type LinkRef = string | number | { index: number; name: string };
export type Route = RouteMessage;

/** A refused request: `code` is the errno name (EEXIST, ENODEV, EINVAL…), `detail` the kernel's reason when it gave one. */
export class NetlinkError extends Error {
  constructor(
    message: string,
    readonly code: string,
    readonly errno: number,
    readonly detail?: string,
  ) {
    super(message);
    this.name = 'NetlinkError';
  }
}

export const isNetlinkError = (e: unknown, code?: string): e is NetlinkError =>
  e instanceof NetlinkError && (code === undefined || e.code === code);

const CREATE = NLM_F.CREATE | NLM_F.EXCL;
/** A dump the kernel marks interrupted (links changed meanwhile) is asked again, this many times. */
const DUMP_TRIES = 5;

export class Netlink {
  private fd: number;
  private closing = false;
  /** Requests asked and not answered yet. */
  private pending = 0;
  /** The last request asked: the next waits for it (the native side takes one at a time per socket). */
  private tail: Promise<unknown> = Promise.resolve();

  private constructor(fd: number) {
    this.fd = fd;
  }

  /** A socket in the network namespace at `nsPath`, or in berthd's own when absent. */
  static open(nsPath?: string | null): Netlink {
    try {
      return new Netlink(native.netlinkOpen(nsPath ?? null));
    } catch (e) {
      throw wrap(e, `open a netlink socket in ${nsPath ?? "berthd's network namespace"}`);
    }
  }

  /**
   * Closes the socket now, or, when requests are under way, once they and those they
   * lead to (a method may ask several) are answered. A request after that is refused (EBADF).
   */
  close(): void {
    this.closing = true;
    if (this.pending === 0) this.closeNow();
    // A method's next request follows its last answer within the same turn of the loop.
    else setImmediate(() => this.closeWhenIdle());
  }

  private closeWhenIdle(): void {
    if (this.pending === 0) this.closeNow();
  }

  private closeNow(): void {
    if (this.fd < 0) return;
    closeSync(this.fd);
    this.fd = -1;
  }

  /** One request; the answers (without the closing ack). Errors name `what` was asked. */
  request(what: string, type: number, flags: number, fixed: Buffer, attrs: Attr[] = []): Promise<Message[]> {
    if (this.fd < 0) return Promise.reject(new NetlinkError(`${what}: the netlink socket is closed`, 'EBADF', -9));
    const message = encodeMessage(type, flags, fixed, attrs);
    const dump = (flags & NLM_F.DUMP) === NLM_F.DUMP;
    const ask = async (): Promise<Message[]> => {
      for (let attempt = 1; ; attempt++) {
        try {
          return (await native.netlinkRequest(this.fd, message)).map(decodeMessage);
        } catch (e) {
          if (!(dump && attempt < DUMP_TRIES && (e as { code?: string }).code === 'EINTR')) throw wrap(e, what);
        }
      }
    };
    this.pending++;
    const answer = this.tail.then(ask).finally(() => {
      if (--this.pending === 0 && this.closing) setImmediate(() => this.closeWhenIdle());
    });
    this.tail = answer.catch(() => {});
    return answer;
  }

  // ───────────────────────────────── links ─────────────────────────────────

  /** The link called `name`, or null. */
  async link(name: string): Promise<Link | null> {
    const found = await this.linkMessage(name);
    if (!found) return null;
    const master = found.masterIndex === null ? null : await this.linkByIndex(found.masterIndex);
    return { ...found, master: master?.name ?? null };
  }

  async linkIndex(name: string): Promise<number | null> {
    return (await this.linkMessage(name))?.index ?? null;
  }

  async listLinks(): Promise<Link[]> {
    const answers = await this.request('list links', RTM.GETLINK, NLM_F.DUMP, ifinfomsg(), [skipStats()]);
    const links = answers.map(decodeLink);
    const names = new Map(links.map((l) => [l.index, l.name]));
    return links.map((l) => ({ ...l, master: l.masterIndex === null ? null : (names.get(l.masterIndex) ?? null) }));
  }

  /** Creates a bridge, down. With existOk, an existing bridge of that name is not an error (false). */
  async addBridge(name: string, o: { mtu?: number; mac?: string; existOk?: boolean } = {}): Promise<boolean> {
    const what = `create bridge ${quote(name)}`;
    const attrs = [attr(IFLA.IFNAME, checkName(name, what)), ...linkSettings(o, what), kind('bridge')];
    try {
      await this.request(what, RTM.NEWLINK, CREATE, ifinfomsg(), attrs);
      return true;
    } catch (e) {
      if (!o.existOk || !isNetlinkError(e, 'EEXIST')) throw e;
      const other = await this.link(name);
      if (other?.kind === 'bridge') return false;
      throw new NetlinkError(`${what}: a ${other?.kind ?? 'device'} of that name exists`, 'EEXIST', -17);
    }
  }

  /**
   * Creates a veth pair: `hostName` in this socket's namespace, `peerName` directly inside
   * `peerNs` (an ns file's path or an open fd of one), so the peer may be called eth0 there.
   * `master` puts the host end on a bridge and `up` brings it up in the same request;
   * the peer stays down.
   */
  async addVeth(
    hostName: string,
    peerName: string,
    peerNs: string | number,
    o: { mtu?: number; mac?: string; peerMac?: string; master?: string | number; up?: boolean } = {},
  ): Promise<void> {
    const what = `create veth ${quote(hostName)} with peer ${quote(peerName)} in ${peerNs}`;
    checkName(hostName, what);
    checkName(peerName, what);
    const peerSettings = linkSettings({ mtu: o.mtu, mac: o.peerMac }, what);
    const hostSettings = linkSettings(o, what);
    const master = o.master === undefined ? [] : [attr(IFLA.MASTER, await this.indexOf(o.master, what))];
    const fd = typeof peerNs === 'number' ? peerNs : openNs(peerNs, what);
    try {
      // The peer is an ifinfomsg and its attributes, as a link of its own would be.
      const peerAttrs = [attr(IFLA.IFNAME, peerName), attr(IFLA.NET_NS_FD, fd), ...peerSettings];
      const peer = Buffer.concat([ifinfomsg(), encodeAttrs(peerAttrs)]);
      const attrs = [
        attr(IFLA.IFNAME, hostName),
        ...hostSettings,
        ...master,
        kind('veth', [attr(VETH_INFO_PEER, peer)]),
      ];
      await this.request(what, RTM.NEWLINK, CREATE, upFlags(o.up ?? false), attrs);
    } finally {
      if (typeof peerNs !== 'number') closeSync(fd);
    }
  }

  /** Deletes a link (a veth's peer goes with it). With missingOk, an absent link is not an error (false). */
  async deleteLink(name: string, o: { missingOk?: boolean } = {}): Promise<boolean> {
    const what = `delete link ${quote(name)}`;
    try {
      await this.request(what, RTM.DELLINK, 0, ifinfomsg(), [attr(IFLA.IFNAME, checkName(name, what))]);
      return true;
    } catch (e) {
      if (o.missingOk && isNetlinkError(e, 'ENODEV')) return false;
      throw e;
    }
  }

  /** Makes `name` a port of `bridge`, or of nothing (null). */
  async setMaster(name: string, bridge: string | null): Promise<void> {
    const what =
      bridge === null ? `detach ${quote(name)} from its bridge` : `attach ${quote(name)} to ${quote(bridge)}`;
    const master = bridge === null ? 0 : await this.indexOf(bridge, what);
    await this.setLink(name, what, ifinfomsg(), [attr(IFLA.MASTER, master)]);
  }

  setUp(name: string): Promise<void> {
    return this.setLink(name, `bring ${quote(name)} up`, upFlags(true));
  }

  setDown(name: string): Promise<void> {
    return this.setLink(name, `bring ${quote(name)} down`, upFlags(false));
  }

  setMac(name: string, mac: string): Promise<void> {
    const what = `set the MAC address of ${quote(name)}`;
    return this.setLink(name, what, ifinfomsg(), linkSettings({ mac }, what));
  }

  setMtu(name: string, mtu: number): Promise<void> {
    const what = `set the MTU of ${quote(name)}`;
    return this.setLink(name, what, ifinfomsg(), linkSettings({ mtu }, what));
  }

  /** Per-device IPv4 settings (net/ipv4/conf/<name>/…) of this socket's namespace, whichever it is. */
  setIPv4Conf(name: string, conf: Partial<Record<keyof typeof IPV4_DEVCONF, number>>): Promise<void> {
    const what = `set IPv4 settings of ${quote(name)}`;
    const values = Object.entries(conf).map(([k, v]) => attr(IPV4_DEVCONF[k as keyof typeof IPV4_DEVCONF], v));
    const inet = [attr(AF_INET, [attr(IFLA.INET_CONF, values)])];
    return this.setLink(name, what, ifinfomsg(), [attr(IFLA.AF_SPEC, inet)]);
  }

  // ─────────────────────────────── addresses ───────────────────────────────

  /**
   * Adds `cidr` (10.0.0.2/24, fd00::2/64) to a link, by name or index. IPv4 gets its broadcast address,
   * as `ip addr add … brd +` would. nodad: an IPv6 address usable at once, without
   * duplicate address detection.
   */
  async addAddress(link: LinkRef, cidr: string, o: { nodad?: boolean } = {}): Promise<void> {
    const what = `add address ${cidr} to ${label(link)}`;
    const c = parseCidr(cidr);
    if (!c) throw invalid(what, `${quote(cidr)} is not an IP address with a prefix length`);
    const family = c.family === 4 ? AF_INET : AF_INET6;
    const attrs = [attr(IFA.LOCAL, c.address), attr(IFA.ADDRESS, c.address)];
    if (c.family === 4 && c.prefixLength < 31) attrs.push(attr(IFA.BROADCAST, broadcast(c.address, c.prefixLength)));
    const flags = o.nodad ? IFA_F_NODAD : 0;
    const index = await this.indexOf(link, what);
    await this.request(
      what,
      RTM.NEWADDR,
      CREATE,
      ifaddrmsg({ family, prefixLength: c.prefixLength, flags, index }),
      attrs,
    );
  }

  /** Removes `cidr` from a link; with missingOk, an address it does not have is not an error. */
  async deleteAddress(link: LinkRef, cidr: string, o: { missingOk?: boolean } = {}): Promise<void> {
    const what = `remove address ${cidr} from ${label(link)}`;
    const c = parseCidr(cidr);
    if (!c) throw invalid(what, `${quote(cidr)} is not an IP address with a prefix length`);
    const family = c.family === 4 ? AF_INET : AF_INET6;
    const index = await this.indexOf(link, what);
    try {
      await this.request(what, RTM.DELADDR, 0, ifaddrmsg({ family, prefixLength: c.prefixLength, flags: 0, index }), [
        attr(IFA.LOCAL, c.address),
      ]);
    } catch (e) {
      if (!(o.missingOk && isNetlinkError(e, 'EADDRNOTAVAIL'))) throw e;
    }
  }

  /** The addresses of `name`, or of every link. */
  async listAddresses(name?: string): Promise<Address[]> {
    const index = name === undefined ? null : await this.indexOf(name, `list the addresses of ${quote(name)}`);
    const header = ifaddrmsg({ family: AF_UNSPEC, prefixLength: 0, index: 0 });
    const all = await this.request('list addresses', RTM.GETADDR, NLM_F.DUMP, header);
    return all.map(decodeAddress).filter((a) => index === null || a.index === index);
  }

  // ──────────────────────────────── routes ─────────────────────────────────

  /** A route in the main table to `dst` ('default' or a CIDR), through `gateway` or directly on `dev`. */
  async addRoute(dst: string, gateway: string | null | undefined, dev: LinkRef): Promise<void> {
    const what = `add route to ${dst}${gateway ? ` via ${gateway}` : ''} on ${label(dev)}`;
    const to = dst === 'default' ? null : parseCidr(dst);
    if (dst !== 'default' && !to) throw invalid(what, `${quote(dst)} is not 'default' or a network in CIDR form`);
    const via = gateway ? parseIP(gateway) : null;
    if (gateway && !via) throw invalid(what, `${quote(gateway)} is not an IP address`);
    const family = to ? to.family : via?.length === 16 ? 6 : 4;
    if (via && via.length !== (family === 4 ? 4 : 16))
      throw invalid(what, 'the gateway and destination differ in family');
    const attrs: Attr[] = [];
    if (to && to.prefixLength > 0) attrs.push(attr(RTA.DST, to.address));
    if (via) attrs.push(attr(RTA.GATEWAY, via));
    attrs.push(attr(RTA.OIF, await this.indexOf(dev, what)));
    // As `ip route add`: a route without a gateway is on-link (scope link), except in IPv6.
    const scope = !via && family === 4 ? RT_SCOPE_LINK : RT_SCOPE_UNIVERSE;
    const header = rtmsg({
      family: family === 4 ? AF_INET : AF_INET6,
      dstLength: to?.prefixLength ?? 0,
      table: RT_TABLE_MAIN,
      protocol: RTPROT_BOOT,
      scope,
      type: RTN_UNICAST,
    });
    await this.request(what, RTM.NEWROUTE, CREATE, header, attrs);
  }

  addDefaultRoute(gateway: string, dev: LinkRef): Promise<void> {
    return this.addRoute('default', gateway, dev);
  }

  /** The main table's routes, of one family or both. */
  async listRoutes(family?: 4 | 6): Promise<Route[]> {
    const af = family === 4 ? AF_INET : family === 6 ? AF_INET6 : AF_UNSPEC;
    const all = await this.request('list routes', RTM.GETROUTE, NLM_F.DUMP, rtmsg({ family: af }));
    return all.map(decodeRoute).filter((r) => r.table === RT_TABLE_MAIN);
  }

  // ──────────────────────────────── helpers ────────────────────────────────

  private linkMessage(name: string): Promise<LinkMessage | null> {
    const what = `look up link ${quote(name)}`;
    return this.getLink(what, ifinfomsg(), [attr(IFLA.IFNAME, checkName(name, what))]);
  }

  private linkByIndex(index: number): Promise<LinkMessage | null> {
    return this.getLink(`look up link ${index}`, ifinfomsg({ index }), []);
  }

  /** RTM_GETLINK for one link; null when there is none. */
  private async getLink(what: string, header: Buffer, attrs: Attr[]): Promise<LinkMessage | null> {
    try {
      const [m] = await this.request(what, RTM.GETLINK, 0, header, [...attrs, skipStats()]);
      return m ? decodeLink(m) : null;
    } catch (e) {
      if (isNetlinkError(e, 'ENODEV')) return null;
      throw e;
    }
  }

  /** The index of a link named (or numbered) so; ENODEV naming it when there is none. */
  private async indexOf(link: LinkRef, what: string): Promise<number> {
    if (typeof link === 'number') return link;
    if (typeof link === 'object') return link.index;
    const index = await this.linkIndex(link);
    if (index === null) throw new NetlinkError(`${what}: there is no link ${quote(link)}`, 'ENODEV', -19);
    return index;
  }

  /** RTM_SETLINK on the link called `name`. */
  private async setLink(name: string, what: string, header: Buffer, attrs: Attr[] = []): Promise<void> {
    await this.request(what, RTM.SETLINK, 0, header, [attr(IFLA.IFNAME, checkName(name, what)), ...attrs]);
  }
}

const quote = (s: string) => JSON.stringify(s);
/** A link as errors name it: "eth0", or link 5. */
const label = (link: LinkRef) =>
  typeof link === 'number' ? `link ${link}` : quote(typeof link === 'string' ? link : link.name);

function invalid(what: string, why: string): NetlinkError {
  return new NetlinkError(`${what}: ${why}`, 'EINVAL', -22);
}

function checkName(name: string, what: string): string {
  const problem = linkNameProblem(name);
  if (problem) throw invalid(what, `${quote(name)} is not a valid interface name: ${problem}`);
  return name;
}

/** IFLA_MTU and IFLA_ADDRESS from options, checked. */
function linkSettings(o: { mtu?: number | undefined; mac?: string | undefined }, what: string): Attr[] {
  const out: Attr[] = [];
  if (o.mtu !== undefined) {
    if (!Number.isInteger(o.mtu) || o.mtu < 68 || o.mtu > 65535) throw invalid(what, `MTU ${o.mtu} is out of range`);
    out.push(attr(IFLA.MTU, o.mtu));
  }
  if (o.mac !== undefined) {
    const mac = parseMac(o.mac);
    if (!mac) throw invalid(what, `${quote(o.mac)} is not a MAC address`);
    if (mac[0]! & 1) throw invalid(what, `${formatMac(mac)} is a multicast MAC address`);
    out.push(attr(IFLA.ADDRESS, mac));
  }
  return out;
}

function kind(name: string, data?: Attr[]): Attr {
  return attr(IFLA.LINKINFO, [attr(IFLA.INFO_KIND, name), ...(data ? [attr(IFLA.INFO_DATA, data)] : [])]);
}

function skipStats(): Attr {
  return attr(IFLA.EXT_MASK, u32(RTEXT_FILTER_SKIP_STATS));
}

function upFlags(up: boolean): Buffer {
  return ifinfomsg({ flags: up ? IFF_UP : 0, change: IFF_UP });
}

function broadcast(address: Buffer, prefixLength: number): Buffer {
  const host = 2 ** (32 - prefixLength) - 1;
  return u32BE((address.readUInt32BE(0) | host) >>> 0);
}

function u32BE(n: number): Buffer {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(n);
  return b;
}

function openNs(nsPath: string, what: string): number {
  try {
    return openSync(nsPath, constants.O_RDONLY); // libuv adds O_CLOEXEC
  } catch (e) {
    throw wrap(e, what);
  }
}

/** A native or fs error as a NetlinkError saying what was asked. */
function wrap(e: unknown, what: string): NetlinkError {
  if (e instanceof NetlinkError) return e;
  const err = e as { code?: string; errno?: number; message?: string; detail?: string };
  const error = new NetlinkError(
    `${what}: ${err.message ?? String(e)}`,
    err.code ?? 'EUNKNOWN',
    err.errno ?? 0,
    err.detail,
  );
  error.cause = e;
  return error;
}
