// IPv4 address management: subnets, pools and leases, as plain numbers.
// berth is the IPAM: it chooses every subnet and address and keeps them in
// SQLite; the links and the firewall are told what was chosen.
import { invalidParameter } from '../../errors.js';
import { ipv4Number } from './ipv4.js';

/** A subnet: its first address (host bits clear) and prefix length. */
export interface Subnet {
  base: number;
  prefix: number;
}

/** Dotted quad → unsigned 32-bit number; null when it is not one. */
export const parseIp = (text: string): number | null => ipv4Number(text.trim());

export function formatIp(n: number): string {
  return [n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255].join('.');
}

const maskOf = (prefix: number) => (prefix === 0 ? 0 : (0xffffffff << (32 - prefix)) >>> 0);

/** `a.b.c.d/n` → the address and prefix as written (host bits kept); null when malformed. */
export function parseCidr(text: string): { ip: number; prefix: number } | null {
  const [addr = '', len, ...rest] = text.split('/');
  if (rest.length || len === undefined || !/^\d{1,2}$/.test(len) || Number(len) > 32) return null;
  const ip = parseIp(addr);
  return ip === null ? null : { ip, prefix: Number(len) };
}

/** The subnet a CIDR names, with host bits cleared. */
export function subnetOf(cidr: { ip: number; prefix: number }): Subnet {
  return { base: (cidr.ip & maskOf(cidr.prefix)) >>> 0, prefix: cidr.prefix };
}

export const formatSubnet = (s: Subnet) => `${formatIp(s.base)}/${s.prefix}`;
export const lastAddress = (s: Subnet) => (s.base | ~maskOf(s.prefix)) >>> 0;
export const contains = (s: Subnet, ip: number) => (ip & maskOf(s.prefix)) >>> 0 === s.base;
export const overlaps = (a: Subnet, b: Subnet) =>
  contains(a.prefix <= b.prefix ? a : b, (a.prefix <= b.prefix ? b : a).base);

/** A subnet given by a user: an IPv4 CIDR with no host bits set, as dockerd's validation asks. */
export function userSubnet(text: string, field = 'subnet'): Subnet {
  const c = parseCidr(text);
  if (!c) {
    throw invalidParameter(
      text.includes(':')
        ? `IPv6 is not supported by berth yet (${field} ${text})`
        : `invalid ${field} ${text}: it is not an IPv4 CIDR`,
    );
  }
  const s = subnetOf(c);
  if (s.base !== c.ip) throw invalidParameter(`invalid ${field} ${text}: it should be ${formatSubnet(s)}`);
  if (s.prefix > 30) throw invalidParameter(`invalid ${field} ${text}: a /${s.prefix} leaves no address to give`);
  return s;
}

/** One of dockerd's default-address-pools: `base` cut into subnets of `size` bits. */
export interface AddressPool {
  base: string;
  size: number;
}

/** The first subnet of the pools that overlaps none of `used`; null when all are taken. */
export function firstFreeSubnet(pools: readonly AddressPool[], used: readonly Subnet[]): Subnet | null {
  for (const pool of pools) {
    const p = parseCidr(pool.base);
    if (!p || pool.size < p.prefix || pool.size > 30) continue;
    // From the address written (172.17.0.0/12 starts at 172.17, as dockerd's pools do) to the block's end.
    const whole = subnetOf(p);
    const step = 2 ** (32 - pool.size);
    const start = subnetOf({ ip: p.ip, prefix: pool.size }).base;
    for (let base = start; base <= lastAddress(whole); base += step) {
      const candidate = { base, prefix: pool.size };
      if (!used.some((u) => overlaps(u, candidate))) return candidate;
    }
  }
  return null;
}

/**
 * The next free address of `range` (within `subnet`) after `after`, wrapping
 * around, as dockerd's allocator hands them out: a released address is not
 * given again at once, so a peer's ARP cache does not send its traffic to a
 * new container. The subnet's first and last addresses are never given.
 */
export function nextFreeAddress(
  subnet: Subnet,
  range: Subnet,
  taken: ReadonlySet<number>,
  after: number,
): number | null {
  const first = Math.max(range.base, subnet.base + 1);
  const last = Math.min(lastAddress(range), lastAddress(subnet) - 1);
  if (first > last) return null;
  const span = last - first + 1;
  const start = after >= first && after <= last ? after - first + 1 : 0;
  for (let i = 0; i < span; i++) {
    const ip = first + ((start + i) % span);
    if (!taken.has(ip)) return ip;
  }
  return null;
}

/** Subnets of the host's IPv4 routes (/proc/net/route): a new network must not overlap them. */
export function parseRouteTable(text: string): Subnet[] {
  const out: Subnet[] = [];
  for (const line of text.split('\n').slice(1)) {
    const f = line.trim().split(/\s+/);
    if (f.length < 8) continue;
    const dest = hostOrder(f[1]!);
    const mask = hostOrder(f[7]!);
    if (dest === null || mask === null || mask === 0) continue; // the default route overlaps everything
    const prefix = Math.clz32(~mask); // the mask's leading ones
    out.push({ base: (dest & mask) >>> 0, prefix });
  }
  return out;
}

/** /proc/net/route writes addresses as little-endian hex. */
function hostOrder(hex: string): number | null {
  if (!/^[0-9A-Fa-f]{8}$/.test(hex)) return null;
  const n = Number.parseInt(hex, 16);
  return (((n & 255) << 24) | (((n >>> 8) & 255) << 16) | (((n >>> 16) & 255) << 8) | (n >>> 24)) >>> 0;
}

/** dockerd's MAC for an IPv4 endpoint: 02:42 then the address's four bytes. */
export function macFor(ip: number): string {
  const bytes = [0x02, 0x42, ip >>> 24, (ip >>> 16) & 255, (ip >>> 8) & 255, ip & 255];
  return bytes.map((b) => b.toString(16).padStart(2, '0')).join(':');
}
