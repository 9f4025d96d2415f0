// rtnetlink's wire format, encoded and decoded here so that the native side
// only moves bytes (src/native/netlink.c): nlmsghdr, the fixed headers of
// links (ifinfomsg), addresses (ifaddrmsg) and routes (rtmsg), attributes
// (rtattr, nested ones flagged NLA_F_NESTED), and the IP, CIDR and MAC text
// forms the messages carry. Host byte order, as the kernel sends it
// (little-endian on every platform berth runs on). Numbers from <linux/*.h>.

/** Message types (<linux/rtnetlink.h>). */
export const RTM = {
  NEWLINK: 16,
  DELLINK: 17,
  GETLINK: 18,
  SETLINK: 19,
  NEWADDR: 20,
  DELADDR: 21,
  GETADDR: 22,
  NEWROUTE: 24,
  DELROUTE: 25,
  GETROUTE: 26,
} as const;

/** nlmsghdr flags (<linux/netlink.h>). */
export const NLM_F = {
  REQUEST: 0x1,
  MULTI: 0x2,
  ACK: 0x4,
  DUMP: 0x300,
  REPLACE: 0x100,
  EXCL: 0x200,
  CREATE: 0x400,
} as const;

/** Link attributes (<linux/if_link.h>). */
export const IFLA = {
  ADDRESS: 1,
  IFNAME: 3,
  MTU: 4,
  LINK: 5,
  MASTER: 10,
  OPERSTATE: 16,
  LINKINFO: 18,
  AF_SPEC: 26,
  NET_NS_FD: 28,
  EXT_MASK: 29,
  // Inside IFLA_LINKINFO.
  INFO_KIND: 1,
  INFO_DATA: 2,
  // Inside IFLA_AF_SPEC's AF_INET.
  INET_CONF: 1,
} as const;

/** Inside a veth's IFLA_INFO_DATA (<linux/veth.h>): the peer, an ifinfomsg and its attributes. */
export const VETH_INFO_PEER = 1;

/** Per-device IPv4 settings, /proc/sys/net/ipv4/conf/<dev>/* (<linux/ip.h> IPV4_DEVCONF_*). */
export const IPV4_DEVCONF = {
  forwarding: 1,
  proxyArp: 3,
  rpFilter: 8,
  routeLocalnet: 26,
} as const;

/** Address attributes and flags (<linux/if_addr.h>). */
export const IFA = { ADDRESS: 1, LOCAL: 2, BROADCAST: 4, FLAGS: 8 } as const;
export const IFA_F_NODAD = 0x02;

/** Route attributes and values (<linux/rtnetlink.h>). */
export const RTA = { DST: 1, OIF: 4, GATEWAY: 5, PRIORITY: 6, TABLE: 15 } as const;
export const RT_TABLE_MAIN = 254;
export const RTPROT_BOOT = 3;
export const RT_SCOPE_UNIVERSE = 0;
export const RT_SCOPE_LINK = 253;
export const RTN_UNICAST = 1;

export const AF_UNSPEC = 0;
export const AF_INET = 2;
export const AF_INET6 = 10;
export const IFF_UP = 0x1;
/** IFLA_EXT_MASK's RTEXT_FILTER_SKIP_STATS: link answers without their counters (most of their size). */
export const RTEXT_FILTER_SKIP_STATS = 1 << 3;

const NLMSG_HDRLEN = 16;
const NLA_HDRLEN = 4;
const NLA_F_NESTED = 0x8000;
const NLA_TYPE_MASK = 0x3fff;
const align4 = (n: number): number => (n + 3) & ~3;

// ─────────────────────────────── attributes ───────────────────────────────

/** An attribute: raw bytes, or attributes nested inside it. */
export interface Attr {
  type: number;
  value: Buffer | Attr[];
}

/** An attribute from a value: a string is NUL-terminated, a number is a u32, an array nests. */
export function attr(type: number, value: Buffer | string | number | Attr[]): Attr {
  if (typeof value === 'string') return { type, value: Buffer.from(`${value}\0`) };
  if (typeof value === 'number') return { type, value: u32(value) };
  return { type, value };
}

export function u32(n: number): Buffer {
  const b = Buffer.alloc(4);
  b.writeUInt32LE(n >>> 0);
  return b;
}

export function encodeAttrs(attrs: Attr[]): Buffer {
  return Buffer.concat(attrs.map(encodeAttr));
}

function encodeAttr(a: Attr): Buffer {
  const nested = Array.isArray(a.value);
  const payload = nested ? encodeAttrs(a.value as Attr[]) : (a.value as Buffer);
  const len = NLA_HDRLEN + payload.length;
  const out = Buffer.alloc(align4(len));
  out.writeUInt16LE(len, 0);
  out.writeUInt16LE(a.type | (nested ? NLA_F_NESTED : 0), 2);
  payload.copy(out, NLA_HDRLEN);
  return out;
}

/** The attributes in `buf` by type (flags masked off; a repeated type keeps its last value). */
export function decodeAttrs(buf: Buffer): Map<number, Buffer> {
  const out = new Map<number, Buffer>();
  let off = 0;
  while (off + NLA_HDRLEN <= buf.length) {
    const len = buf.readUInt16LE(off);
    if (len < NLA_HDRLEN || off + len > buf.length) break;
    out.set(buf.readUInt16LE(off + 2) & NLA_TYPE_MASK, buf.subarray(off + NLA_HDRLEN, off + len));
    off += align4(len);
  }
  return out;
}

/** A NUL-terminated string attribute's text. */
export function attrString(b: Buffer | undefined): string | undefined {
  if (!b) return undefined;
  const end = b.indexOf(0);
  return b.toString('utf8', 0, end === -1 ? b.length : end);
}

export function attrU32(b: Buffer | undefined): number | undefined {
  return b && b.length >= 4 ? b.readUInt32LE(0) : undefined;
}

// ──────────────────────────────── messages ────────────────────────────────

/** A whole message: nlmsghdr (seq and pid left 0, the native side sets them), fixed header, attributes. */
export function encodeMessage(type: number, flags: number, fixed: Buffer, attrs: Attr[] = []): Buffer {
  const body = Buffer.concat([fixed, Buffer.alloc(align4(fixed.length) - fixed.length), encodeAttrs(attrs)]);
  const hdr = Buffer.alloc(NLMSG_HDRLEN);
  hdr.writeUInt32LE(NLMSG_HDRLEN + body.length, 0);
  hdr.writeUInt16LE(type, 4);
  hdr.writeUInt16LE(flags | NLM_F.REQUEST, 6);
  return Buffer.concat([hdr, body]);
}

export interface Message {
  type: number;
  flags: number;
  seq: number;
  /** What follows nlmsghdr: the fixed header, then attributes. */
  body: Buffer;
}

export function decodeMessage(buf: Buffer): Message {
  if (buf.length < NLMSG_HDRLEN) throw new RangeError(`netlink message of ${buf.length} bytes`);
  const len = Math.min(buf.readUInt32LE(0), buf.length);
  return {
    type: buf.readUInt16LE(4),
    flags: buf.readUInt16LE(6),
    seq: buf.readUInt32LE(8),
    body: buf.subarray(16, len),
  };
}

/** struct ifinfomsg (16 bytes). `change` says which `flags` bits to set or clear. */
export function ifinfomsg(o: { family?: number; index?: number; flags?: number; change?: number } = {}): Buffer {
  const b = Buffer.alloc(16);
  b.writeUInt8(o.family ?? AF_UNSPEC, 0);
  b.writeInt32LE(o.index ?? 0, 4);
  b.writeUInt32LE(o.flags ?? 0, 8);
  b.writeUInt32LE(o.change ?? 0, 12);
  return b;
}

/** struct ifaddrmsg (8 bytes). */
export function ifaddrmsg(o: { family: number; prefixLength: number; flags?: number; scope?: number; index: number }) {
  const b = Buffer.alloc(8);
  b.writeUInt8(o.family, 0);
  b.writeUInt8(o.prefixLength, 1);
  b.writeUInt8(o.flags ?? 0, 2);
  b.writeUInt8(o.scope ?? 0, 3);
  b.writeUInt32LE(o.index, 4);
  return b;
}

/** struct rtmsg (12 bytes). */
export function rtmsg(o: {
  family: number;
  dstLength?: number;
  table?: number;
  protocol?: number;
  scope?: number;
  type?: number;
}): Buffer {
  const b = Buffer.alloc(12);
  b.writeUInt8(o.family, 0);
  b.writeUInt8(o.dstLength ?? 0, 1);
  b.writeUInt8(o.table ?? 0, 4);
  b.writeUInt8(o.protocol ?? 0, 5);
  b.writeUInt8(o.scope ?? 0, 6);
  b.writeUInt8(o.type ?? 0, 7);
  return b;
}

/** A link as a RTM_NEWLINK answer describes it. */
export interface LinkMessage {
  index: number;
  name: string;
  /** IFLA_INFO_KIND: 'bridge', 'veth'…; null for a device without one (lo, a physical NIC). */
  kind: string | null;
  /** The index of the bridge (or other master) it is a port of. */
  masterIndex: number | null;
  mac: string | null;
  mtu: number;
  /** Administratively up (IFF_UP). */
  up: boolean;
}

export function decodeLink(m: Message): LinkMessage {
  const attrs = decodeAttrs(m.body.subarray(16));
  const info = attrs.get(IFLA.LINKINFO);
  const mac = attrs.get(IFLA.ADDRESS);
  return {
    index: m.body.readInt32LE(4),
    name: attrString(attrs.get(IFLA.IFNAME)) ?? '',
    kind: (info && attrString(decodeAttrs(info).get(IFLA.INFO_KIND))) ?? null,
    masterIndex: attrU32(attrs.get(IFLA.MASTER)) ?? null,
    mac: mac?.length === 6 ? formatMac(mac) : null,
    mtu: attrU32(attrs.get(IFLA.MTU)) ?? 0,
    up: (m.body.readUInt32LE(8) & IFF_UP) !== 0,
  };
}

/** An address as a RTM_NEWADDR answer describes it. */
export interface AddressMessage {
  index: number;
  family: 4 | 6;
  address: string;
  prefixLength: number;
  /** address/prefixLength */
  cidr: string;
}

export function decodeAddress(m: Message): AddressMessage {
  const attrs = decodeAttrs(m.body.subarray(8));
  // IFA_LOCAL is the interface's own address; IFA_ADDRESS the peer's on point-to-point links.
  const raw = attrs.get(IFA.LOCAL) ?? attrs.get(IFA.ADDRESS) ?? Buffer.alloc(0);
  const address = formatIP(raw);
  const prefixLength = m.body.readUInt8(1);
  return {
    index: m.body.readUInt32LE(4),
    family: m.body.readUInt8(0) === AF_INET6 ? 6 : 4,
    address,
    prefixLength,
    cidr: `${address}/${prefixLength}`,
  };
}

/** A route as a RTM_NEWROUTE answer describes it. */
export interface RouteMessage {
  family: 4 | 6;
  /** 'default', or the destination network as a CIDR. */
  dst: string;
  gateway: string | null;
  /** The output device's index. */
  devIndex: number | null;
  table: number;
  protocol: number;
  scope: number;
  type: number;
}

export function decodeRoute(m: Message): RouteMessage {
  const b = m.body;
  const attrs = decodeAttrs(b.subarray(12));
  const family = b.readUInt8(0) === AF_INET6 ? 6 : 4;
  const dstLength = b.readUInt8(1);
  const dst = attrs.get(RTA.DST);
  const gateway = attrs.get(RTA.GATEWAY);
  return {
    family,
    dst: dstLength === 0 || !dst ? 'default' : `${formatIP(dst)}/${dstLength}`,
    gateway: gateway ? formatIP(gateway) : null,
    devIndex: attrU32(attrs.get(RTA.OIF)) ?? null,
    table: attrU32(attrs.get(RTA.TABLE)) ?? b.readUInt8(4),
    protocol: b.readUInt8(5),
    scope: b.readUInt8(6),
    type: b.readUInt8(7),
  };
}

// ──────────────────────────── names and addresses ────────────────────────────

/** Why the kernel would refuse `name` as an interface name (dev_valid_name), or null when it is fine. */
export function linkNameProblem(name: string): string | null {
  if (name === '') return 'it is empty';
  if (Buffer.byteLength(name) > 15) return 'it is longer than 15 bytes';
  if (name === '.' || name === '..') return 'it is . or ..';
  if (/[/:\s]/.test(name)) return "it contains '/', ':' or whitespace";
  return null;
}

/** An IPv4 or IPv6 address's bytes (4 or 16), or null when `text` is neither. */
export function parseIP(text: string): Buffer | null {
  return parseIPv4(text) ?? parseIPv6(text);
}

function parseIPv4(text: string): Buffer | null {
  const parts = text.split('.');
  if (parts.length !== 4 || !parts.every((p) => /^(0|[1-9]\d{0,2})$/.test(p) && Number(p) <= 255)) return null;
  return Buffer.from(parts.map(Number));
}

function parseIPv6(text: string): Buffer | null {
  if (!/^[0-9a-fA-F:.]+$/.test(text) || text.split('::').length > 2) return null;
  const [head, tail] = text.includes('::') ? text.split('::') : [text, undefined];
  // An embedded IPv4 address may only end the whole address.
  const groups = (s: string | undefined, last: boolean): number[] | null => {
    if (!s) return [];
    const out: number[] = [];
    const parts = s.split(':');
    for (const [i, p] of parts.entries()) {
      const v4 = last && i === parts.length - 1 && p.includes('.') ? parseIPv4(p) : null;
      if (v4) out.push(v4.readUInt16BE(0), v4.readUInt16BE(2));
      else if (/^[0-9a-fA-F]{1,4}$/.test(p)) out.push(Number.parseInt(p, 16));
      else return null;
    }
    return out;
  };
  const h = groups(head, tail === undefined);
  const t = groups(tail, true);
  if (!h || !t) return null;
  if (tail === undefined ? h.length !== 8 : h.length + t.length > 7) return null;
  const all = [...h, ...Array<number>(8 - h.length - t.length).fill(0), ...t];
  const b = Buffer.alloc(16);
  for (const [i, g] of all.entries()) b.writeUInt16BE(g, i * 2);
  return b;
}

/** Text of a 4- or 16-byte address; IPv6 in RFC 5952's form (lower case, longest zero run as ::). */
export function formatIP(b: Buffer): string {
  if (b.length === 4) return [...b].join('.');
  if (b.length !== 16) return b.toString('hex');
  if (b.subarray(0, 10).every((x) => x === 0) && b.readUInt16BE(10) === 0xffff)
    return `::ffff:${[...b.subarray(12)].join('.')}`;
  const g = Array.from({ length: 8 }, (_, i) => b.readUInt16BE(i * 2));
  let best = -1;
  let bestLen = 1;
  for (let i = 0; i < 8; ) {
    let j = i;
    while (j < 8 && g[j] === 0) j++;
    if (j - i > bestLen) [best, bestLen] = [i, j - i];
    i = j === i ? i + 1 : j;
  }
  const hex = (a: number[]) => a.map((x) => x.toString(16)).join(':');
  if (best === -1) return hex(g);
  return `${hex(g.slice(0, best))}::${hex(g.slice(best + bestLen))}`;
}

export interface Cidr {
  family: 4 | 6;
  address: Buffer;
  prefixLength: number;
}

/** `10.0.0.2/24`, `fd00::2/64`; null when malformed or the prefix is out of range. */
export function parseCidr(text: string): Cidr | null {
  const slash = text.indexOf('/');
  if (slash === -1 || !/^\d{1,3}$/.test(text.slice(slash + 1))) return null;
  const address = parseIP(text.slice(0, slash));
  const prefixLength = Number(text.slice(slash + 1));
  if (!address || prefixLength > address.length * 8) return null;
  return { family: address.length === 4 ? 4 : 6, address, prefixLength };
}

/** `02:42:ac:11:00:02` (or with '-') as 6 bytes; null when malformed. */
export function parseMac(text: string): Buffer | null {
  if (!/^[0-9a-fA-F]{2}([:-][0-9a-fA-F]{2}){5}$/.test(text)) return null;
  return Buffer.from(text.split(/[:-]/).map((x) => Number.parseInt(x, 16)));
}

export function formatMac(b: Buffer): string {
  return [...b].map((x) => x.toString(16).padStart(2, '0')).join(':');
}
