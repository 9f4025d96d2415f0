// Which registries may be asked over plain HTTP, or over TLS without
// verification: dockerd's insecure-registries, and loopback always.
import { lookup } from 'node:dns/promises';
import { BlockList, isIP } from 'node:net';

const INSECURE_TTL_MS = 60_000;

/** dockerd's "insecure" rule: listed names, listed CIDRs, and loopback (127.0.0.0/8, ::1, localhost). */
export class InsecurePolicy {
  private readonly names = new Set<string>();
  private readonly nets = new BlockList();
  private readonly cache = new Map<string, { value: boolean; expiresAt: number }>();

  constructor(entries: readonly string[]) {
    this.nets.addSubnet('127.0.0.0', 8, 'ipv4');
    this.nets.addAddress('::1', 'ipv6');
    for (const raw of entries) {
      const entry = raw
        .trim()
        .replace(/^[a-z]+:\/\//i, '')
        .replace(/\/+$/, '')
        .toLowerCase();
      const cidr = /^(.+)\/(\d{1,3})$/.exec(entry);
      const family = cidr ? isIP(cidr[1]!) : 0;
      if (cidr && family) this.nets.addSubnet(cidr[1]!, Number(cidr[2]), family === 6 ? 'ipv6' : 'ipv4');
      else if (entry) this.names.add(entry);
    }
  }

  async isInsecure(host: string): Promise<boolean> {
    const key = host.toLowerCase();
    const hit = this.cache.get(key);
    if (hit && hit.expiresAt > Date.now()) return hit.value;
    const value = await this.decide(key);
    this.cache.set(key, { value, expiresAt: Date.now() + INSECURE_TTL_MS });
    return value;
  }

  private async decide(host: string): Promise<boolean> {
    if (this.names.has(host)) return true;
    let hostname: string;
    try {
      hostname = new URL(`http://${host}`).hostname.replace(/^\[|\]$/g, '');
    } catch {
      return false;
    }
    if (hostname === 'localhost') return true;
    // As dockerd: the host's addresses decide; an unresolvable host is secure.
    const addresses = isIP(hostname)
      ? [{ address: hostname, family: isIP(hostname) }]
      : await lookup(hostname, { all: true }).catch(() => []);
    return addresses.some((a) => this.nets.check(a.address, a.family === 6 ? 'ipv6' : 'ipv4'));
  }
}
