// IPv6 address management for dual-stack bridge networks: subnets and
// addresses as 128-bit numbers (bigint), checked as dockerd 27 checks them,
// and written in the one form (RFC 5952) that inspect, the kernel and
// ip6tables-save print, so that what berth stores compares equal to what it reads.
import { invalidParameter } from '../../errors.js';
import { formatIP, parseIP } from '../os/netlink-wire.js';

export interface Subnet6 {
  base: bigint;
  prefix: number;
}

const ALL = (1n << 128n) - 1n;
const maskOf = (prefix: number) => (ALL << BigInt(128 - prefix)) & ALL;

/** An IPv6 address (not an IPv4 one, nor IPv4-mapped) as a number; null when it is not one. */
export function parseIp6(text: string): bigint | null {
  const b = text.includes(':') ? parseIP(text.trim()) : null;
  if (b?.length !== 16) return null;
  const n = BigInt(`0x${b.toString('hex')}`);
  return n >> 32n === 0xffffn ? null : n;
}

export function formatIp6(n: bigint): string {
  return formatIP(Buffer.from(n.toString(16).padStart(32, '0'), 'hex'));
}

/** The canonical text of an IPv6 address, or null when `text` is none. */
export const canonicalIp6 = (text: string): string | null => {
  const n = parseIp6(text);
  return n === null ? null : formatIp6(n);
};

/** `fd00::/64` → the address as written and the prefix; null when malformed. */
function parseCidr6(text: string): { ip: bigint; prefix: number } | null {
  const [addr = '', len, ...rest] = text.split('/');
  if (rest.length || len === undefined || !/^\d{1,3}$/.test(len) || Number(len) > 128) return null;
  const ip = parseIp6(addr);
  return ip === null ? null : { ip, prefix: Number(len) };
}

export const formatSubnet6 = (s: Subnet6) => `${formatIp6(s.base)}/${s.prefix}`;
export const lastAddress6 = (s: Subnet6) => s.base | (~maskOf(s.prefix) & ALL);
export const contains6 = (s: Subnet6, ip: bigint) => (ip & maskOf(s.prefix)) === s.base;
export const overlaps6 = (a: Subnet6, b: Subnet6) =>
  contains6(a.prefix <= b.prefix ? a : b, (a.prefix <= b.prefix ? b : a).base);

/** True for text that is an IPv6 CIDR's or address's (it has a colon); IPv4 has none. */
export const isV6Text = (text: string | null | undefined) => !!text?.includes(':');

const LINK_LOCAL: Subnet6 = { base: 0xfe80n << 112n, prefix: 64 };

/**
 * An IPv6 subnet given by a user, as dockerd 27 checks it (ValidateIPAM and the
 * bridge driver's validateIPv6Subnet): host bits clear, not multicast, not
 * within the link-local fe80::/64 (which each interface has of its own).
 */
export function userSubnet6(text: string, field = 'subnet'): Subnet6 {
  const c = parseCidr6(text);
  if (!c) throw invalidParameter(`invalid network config:\ninvalid ${field} ${text}: invalid CIDR block notation`);
  const s = { base: c.ip & maskOf(c.prefix), prefix: c.prefix };
  if (s.base !== c.ip) {
    throw invalidParameter(`invalid network config:\ninvalid ${field} ${text}: it should be ${formatSubnet6(s)}`);
  }
  if (s.base >> 120n === 0xffn) throw invalidParameter(`multicast subnet '${text}' is not allowed`);
  if (!(s.prefix === 64 && s.base === LINK_LOCAL.base) && overlaps6(s, LINK_LOCAL)) {
    throw invalidParameter(`'${text}' clashes with the Link-Local prefix 'fe80::/64'`);
  }
  // The subnet's first address is the router anycast; one more leaves nothing to give.
  if (s.prefix > 126) throw invalidParameter(`invalid ${field} ${text}: a /${s.prefix} leaves no address to give`);
  return s;
}

/**
 * The next free address of `range` (within `subnet`) after `after`, wrapping
 * around, as dockerd's allocator hands them out (IPv4's rule: a released
 * address is not given again at once). The subnet's first address (the
 * router anycast) is never given; IPv6 has no broadcast, so the last may be.
 * The search looks at most `limit` addresses: an IPv6 subnet is too big to walk.
 */
export function nextFreeAddress6(
  subnet: Subnet6,
  range: Subnet6,
  taken: ReadonlySet<bigint>,
  after: bigint,
  limit = 1 << 16,
): bigint | null {
  const first = range.base > subnet.base ? range.base : subnet.base + 1n;
  const last = lastAddress6(range) < lastAddress6(subnet) ? lastAddress6(range) : lastAddress6(subnet);
  if (first > last) return null;
  const span = last - first + 1n;
  const start = after >= first && after <= last ? after - first + 1n : 0n;
  for (let i = 0n; i < span && i < BigInt(limit); i++) {
    const ip = first + ((start + i) % span);
    if (!taken.has(ip)) return ip;
  }
  return null;
}
