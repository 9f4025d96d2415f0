// Which host ports berth has handed out, by protocol and address, with
// dockerd's rules (libnetwork/portallocator): a port taken on 0.0.0.0 is
// taken on every IPv4 address, one taken on an address is taken for 0.0.0.0
// (and :: likewise for IPv6: the two families' sockets do not meet);
// ephemeral ports come from the kernel's ip_local_port_range, skipping
// ip_local_reserved_ports, each range searched on from the port it handed out
// last. This table only says what berth has promised; whether another process
// holds a port is learnt by binding it (ports.ts).
import { readFileSync } from 'node:fs';
import type { Proto } from './rules.js';

export const ANY = '0.0.0.0';
/** IPv6's every address: bound IPv6-only, beside 0.0.0.0. */
export const ANY6 = '::';

const family = (addr: string) => (addr.includes(':') ? 6 : 4);
const isAny = (addr: string) => addr === ANY || addr === ANY6;

export interface PortRange {
  start: number;
  end: number;
}

/** Dockerd's fallback when the kernel's range cannot be read. */
const DEFAULT_RANGE: PortRange = { start: 49153, end: 60999 };

export function localPortRange(file = '/proc/sys/net/ipv4/ip_local_port_range'): PortRange {
  try {
    const [start, end] = readFileSync(file, 'utf8').trim().split(/\s+/).map(Number);
    if (start && end && start <= end) return { start, end };
  } catch {
    // Not Linux's procfs: the fallback.
  }
  return DEFAULT_RANGE;
}

/** `8080,9000-9002` → {8080, 9000, 9001, 9002}. */
export function reservedPorts(file = '/proc/sys/net/ipv4/ip_local_reserved_ports'): Set<number> {
  const ports = new Set<number>();
  let text = '';
  try {
    text = readFileSync(file, 'utf8').trim();
  } catch {
    return ports;
  }
  for (const part of text.split(',').filter(Boolean)) {
    const [a, b = a] = part.split('-').map(Number);
    for (let p = a!; p <= b!; p++) ports.add(p);
  }
  return ports;
}

export class PortTable {
  /** `proto/port` → the addresses it is taken on. */
  private taken = new Map<string, Set<string>>();
  /** The last port handed out from each range (`proto start-end`). */
  private last = new Map<string, number>();

  constructor(
    readonly ephemeral: PortRange = localPortRange(),
    private readonly reserved: Set<number> = reservedPorts(),
  ) {}

  /** The address on which `port` is already taken in a way that keeps it from `addr`, or null. */
  holder(proto: Proto, addr: string, port: number): string | null {
    const on = this.taken.get(`${proto}/${port}`);
    if (!on) return null;
    const same = [...on].filter((a) => family(a) === family(addr));
    if (isAny(addr)) return same[0] ?? null;
    if (on.has(addr)) return addr;
    return same.find(isAny) ?? null;
  }

  take(proto: Proto, addrs: string[], port: number): void {
    const k = `${proto}/${port}`;
    const on = this.taken.get(k) ?? new Set();
    for (const a of addrs) on.add(a);
    this.taken.set(k, on);
  }

  free(proto: Proto, addrs: string[], port: number): void {
    const k = `${proto}/${port}`;
    const on = this.taken.get(k);
    if (!on) return;
    for (const a of addrs) on.delete(a);
    if (on.size === 0) this.taken.delete(k);
  }

  /**
   * The next port of the range (the ephemeral one when `range` is null) free
   * on every address, searching on from the last one handed out; null when
   * none is. The caller takes it.
   */
  next(proto: Proto, addrs: string[], range: PortRange | null): number | null {
    const r = range ?? this.ephemeral;
    const k = `${proto} ${r.start}-${r.end}`;
    let port = this.last.get(k) ?? r.end;
    for (let i = r.start; i <= r.end; i++) {
      port = port >= r.end ? r.start : port + 1;
      if (!range && this.reserved.has(port)) continue;
      if (addrs.every((a) => this.holder(proto, a, port) === null)) {
        this.last.set(k, port);
        return port;
      }
    }
    return null;
  }
}
