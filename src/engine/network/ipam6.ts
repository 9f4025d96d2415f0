// The IPv6 half of a dual-stack bridge network's IPAM (dockerd 27, API 1.47):
// a network's IPv6 subnet, gateway and range from its IPAM config, and each
// endpoint's IPv6 address, given or the next free one. ipv6.ts has the
// arithmetic; the IPv4 half stays in service.ts and endpoints.ts.
import { conflict, forbidden, invalidParameter } from '../../errors.js';
import {
  contains6,
  formatIp6,
  formatSubnet6,
  isV6Text,
  nextFreeAddress6,
  overlaps6,
  parseIp6,
  type Subnet6,
  userSubnet6,
} from './ipv6.js';

/** One entry of IPAM.Config as a client gives it. */
export interface IpamConfigEntry {
  Subnet?: string | null;
  IPRange?: string | null;
  Gateway?: string | null;
  AuxiliaryAddresses?: Record<string, string> | null;
}

/** A network's IPv6 columns. */
export interface Network6Fields {
  enable_ipv6: number;
  subnet6: string;
  gateway6: string;
  ip_range6: string;
}

export const NO_IPV6: Network6Fields = { enable_ipv6: 0, subnet6: '', gateway6: '', ip_range6: '' };

/** IPAM.Config's entries split by family (an entry's subnet, else its gateway or range, says which). */
export function splitConfigs<T extends IpamConfigEntry>(configs: readonly T[]): { v4: T[]; v6: T[] } {
  const isV6 = (c: T) => isV6Text(c.Subnet) || (!c.Subnet && (isV6Text(c.Gateway) || isV6Text(c.IPRange)));
  return { v4: configs.filter((c) => !isV6(c)), v6: configs.filter(isV6) };
}

/**
 * `EnableIPv6` (or the driver option com.docker.network.enable_ipv6) and the
 * IPv6 entries of IPAM.Config, as dockerd 27 takes them: an IPv6 subnet is
 * needed, since dockerd 27 has no default IPv6 pool (it answers that all
 * predefined pools are subnetted); without EnableIPv6 an IPv6 entry is kept
 * and shown but not used, as dockerd keeps it.
 */
export function networkIpv6(
  enable: boolean,
  configs: readonly IpamConfigEntry[],
  used: readonly Subnet6[],
): Network6Fields {
  if (configs.length > 1) throw invalidParameter('berth networks have one IPv6 subnet; several were given');
  const cfg = configs[0];
  if (!cfg?.Subnet) {
    if (cfg && (cfg.Gateway || cfg.IPRange)) throw invalidParameter('an IPv6 gateway or IP range needs a subnet');
    if (enable) throw invalidParameter('all predefined address pools have been fully subnetted');
    return NO_IPV6;
  }
  if (!enable) return { ...NO_IPV6, subnet6: cfg.Subnet, gateway6: cfg.Gateway ?? '', ip_range6: cfg.IPRange ?? '' };
  const subnet = userSubnet6(cfg.Subnet);
  if (cfg.AuxiliaryAddresses && Object.keys(cfg.AuxiliaryAddresses).length) {
    throw invalidParameter('IPv6 auxiliary addresses are not supported by berth yet');
  }
  if (used.some((u) => overlaps6(u, subnet))) throw forbidden('Pool overlaps with other one on this address space');
  let gateway = subnet.base + 1n;
  if (cfg.Gateway) {
    const g = parseIp6(cfg.Gateway);
    if (g === null) throw invalidParameter(`invalid network config:\ninvalid gateway ${cfg.Gateway}: invalid address`);
    if (!contains6(subnet, g)) {
      throw invalidParameter(
        `invalid network config:\ninvalid gateway ${cfg.Gateway}: parent subnet ${cfg.Subnet} doesn't contain this address`,
      );
    }
    gateway = g;
  }
  let range = '';
  if (cfg.IPRange) {
    const r = userSubnet6(cfg.IPRange, 'ip-range');
    if (r.prefix < subnet.prefix || !contains6(subnet, r.base)) {
      throw invalidParameter(
        `invalid network config:\ninvalid ip-range ${cfg.IPRange}: parent subnet ${cfg.Subnet} doesn't contain ip-range`,
      );
    }
    range = formatSubnet6(r);
  }
  return { enable_ipv6: 1, subnet6: formatSubnet6(subnet), gateway6: formatIp6(gateway), ip_range6: range };
}

/**
 * The default bridge's IPv6 columns from dockerd's `ipv6` and `fixed-cidr-v6`:
 * the subnet's first address is the bridge's (dockerd's default gateway); a
 * fixed-cidr-v6 without ipv6 is kept, unused, as dockerd keeps it.
 */
export function defaultBridgeIpv6(s: { ipv6?: boolean; fixedCidrV6?: string }): Network6Fields {
  if (!s.fixedCidrV6) return NO_IPV6;
  const subnet = userSubnet6(s.fixedCidrV6, 'fixed-cidr-v6');
  return {
    enable_ipv6: s.ipv6 ? 1 : 0,
    subnet6: formatSubnet6(subnet),
    gateway6: formatIp6(subnet.base + 1n),
    ip_range6: '',
  };
}

/** The IPv6 subnet of a network's columns, when it has IPv6 on. */
export function subnet6Of(n: { enableIPv6: boolean; subnet6: string }): Subnet6 | null {
  return n.enableIPv6 && n.subnet6 ? userSubnet6(n.subnet6) : null;
}

/** What endpoint addressing needs of a network. */
export interface Network6 {
  id: string;
  name: string;
  /** The default bridge: no asked address; from a /80 or larger, addresses from the MAC, as dockerd's. */
  predefined: boolean;
  enableIPv6: boolean;
  subnet6: string;
  gateway6: string;
  ipRange6: string;
}

/** Hands out endpoints' IPv6 addresses: asked ones checked, free ones after the last given. */
export class Ipv6Addresses {
  private readonly lastGiven = new Map<string, bigint>();

  /**
   * The endpoint's IPv6 address and whether it was asked for; '' on a network
   * without IPv6, where an asked address gets dockerd's answer.
   */
  choose(
    network: Network6,
    asked: string | null | undefined,
    taken: () => string[],
    mac = '',
  ): { ip6: string; static: boolean } {
    const subnet = subnet6Of(network);
    if (!subnet) {
      if (asked) {
        throw forbidden(
          'user specified IP address is supported only when connecting to networks with user configured subnets',
        );
      }
      return { ip6: '', static: false };
    }
    const gateway = parseIp6(network.gateway6)!;
    if (asked && network.predefined) {
      throw forbidden(
        'user specified IP address is supported only when connecting to networks with user configured subnets',
      );
    }
    // dockerd's default bridge on a fixed-cidr-v6 of /80 or larger: the MAC's 48 bits end the prefix.
    if (network.predefined && subnet.prefix <= 80 && /^([0-9a-f]{2}:){5}[0-9a-f]{2}$/i.test(mac)) {
      return { ip6: formatIp6(subnet.base | BigInt(`0x${mac.replaceAll(':', '')}`)), static: false };
    }
    if (asked) {
      const ip = parseIp6(asked);
      if (ip === null || ip === 0n) throw invalidParameter(`invalid IPv6 address: ${asked}`);
      if (!contains6(subnet, ip) || ip === subnet.base) {
        throw invalidParameter(`no configured subnet or ip-range contain the IP address ${asked}`);
      }
      if (ip === gateway) throw conflict('Address already in use');
      return { ip6: formatIp6(ip), static: true };
    }
    const used = new Set(
      taken()
        .map((t) => parseIp6(t))
        .filter((n): n is bigint => n !== null),
    );
    used.add(gateway);
    const range = network.ipRange6 ? userSubnet6(network.ipRange6, 'ip-range') : subnet;
    const ip = nextFreeAddress6(subnet, range, used, this.lastGiven.get(network.id) ?? 0n);
    if (ip === null) throw forbidden(`no available IPv6 addresses on network ${network.name}`);
    this.lastGiven.set(network.id, ip);
    return { ip6: formatIp6(ip), static: false };
  }
}
