// IPv4 addresses and subnets as the firewall and the port allocator need
// them: checked, normalised to the form iptables-save prints (a subnet's
// network address, no leading zeros), and compared. IPv6 is not handled by
// berth's networking yet; callers refuse it with that reason.
import net from 'node:net';

/** The address as a 32-bit unsigned number, or null when it is not dotted-quad IPv4. */
export function ipv4Number(addr: string): number | null {
  if (!net.isIPv4(addr)) return null;
  return addr.split('.').reduce((n, part) => n * 256 + Number(part), 0);
}

const dotted = (n: number): string => [24, 16, 8, 0].map((s) => Math.floor(n / 2 ** s) % 256).join('.');

export interface Subnet {
  /** The network address and prefix length, as iptables-save prints it: `172.17.0.0/16`. */
  cidr: string;
  base: number;
  bits: number;
}

/** `172.17.0.1/16` → 172.17.0.0/16; null when it is not an IPv4 CIDR. */
export function parseSubnet(text: string): Subnet | null {
  const [addr, len, extra] = text.split('/');
  if (extra !== undefined || addr === undefined || len === undefined || !/^\d{1,2}$/.test(len)) return null;
  const n = ipv4Number(addr);
  const bits = Number(len);
  if (n === null || bits > 32) return null;
  const size = 2 ** (32 - bits);
  const base = n - (n % size);
  return { cidr: `${dotted(base)}/${bits}`, base, bits };
}

export function inSubnet(addr: string, subnet: Subnet): boolean {
  const n = ipv4Number(addr);
  return n !== null && n - (n % 2 ** (32 - subnet.bits)) === subnet.base;
}

/** True for 0.0.0.0 and for the empty text Docker uses for "every address". */
export const isUnspecified = (addr: string): boolean => addr === '' || addr === '0.0.0.0';

export const isLoopback = (addr: string): boolean => addr.startsWith('127.') && net.isIPv4(addr);
