// The Plumbing berthd uses: the host's own side of networks, made of the
// parts beside this file — links.ts (bridges and veths over rtnetlink),
// firewall.ts (iptables: NAT, isolation, published ports), ports.ts (the host
// ports held, and the proxy behind them) and dns.ts (aardvark-dns, names on
// user networks). Told by the network service; keeps nothing the database
// does not (the host ports chosen for a container are recorded by the caller).
import { readFileSync, writeFileSync } from 'node:fs';
import type { Logger } from '../../log.js';
import type { Dns } from './dns.js';
import type { Firewall, FirewallNetwork } from './firewall.js';
import { attachContainer, detachContainer, ensureBridge, linkIPv4Cidrs, removeBridge } from './links.js';
import { parseLink } from './linkspec.js';
import type { Attachment, Plumbing } from './plumbing.js';
import { dualStack, type HostPorts, mappings6Of, mappingsOf } from './ports.js';
import type { Endpoint, Member, Network } from './records.js';

export interface HostPlumbingDeps {
  firewall: Firewall;
  /** ip6tables, for dual-stack networks (EnableIPv6); absent: they get no IPv6 firewall rules. */
  firewall6?: Firewall;
  /** Turn on the host's IPv6 forwarding at the first dual-stack network, as dockerd does (its ip-forward). */
  ipForward6?: boolean;
  ports: HostPorts;
  dns: Dns;
  log: Logger;
}

const firewallNetwork = (n: Network): FirewallNetwork => ({
  bridge: n.bridge,
  subnet: n.subnet,
  internal: n.internal,
  masquerade: !n.internal,
});
/** The IPv6 side of a dual-stack network, for ip6tables. */
const firewallNetwork6 = (n: Network): FirewallNetwork => ({
  ...firewallNetwork(n),
  subnet: n.subnet6,
});
const dualStacked = (n: Network) => n.enableIPv6 && n.subnet6 !== '';
/** The host end of an endpoint's veth: named from the endpoint, so it is known again after a restart. */
export const hostIfName = (endpointId: string) => `vb${endpointId.slice(0, 12)}`;
/** Docker's default bridge has no names; user networks do. */
const hasDns = (n: Network) => !n.predefined;

export class HostPlumbing implements Plumbing {
  constructor(private readonly deps: HostPlumbingDeps) {}

  /**
   * The bridges and the firewall's networks as recorded; the names on user
   * networks start empty, and running containers' ports and names come back
   * as the containers are restored (Endpoints.restore).
   */
  async init(networks: Network[]): Promise<void> {
    for (const n of networks) await this.makeBridge(n);
    // A daemon with no bridge network (`--bridge none`, none created) leaves the firewall alone.
    if (networks.length) await this.deps.firewall.replace({ networks: networks.map(firewallNetwork), ports: [] });
    const v6 = networks.filter(dualStacked);
    if (v6.length) await this.deps.firewall6?.replace({ networks: v6.map(firewallNetwork6), ports: [] });
    await this.deps.dns.reconcile(
      networks.filter(hasDns).map((n) => ({ name: n.id, gatewayIp: n.gateway, entries: [] })),
    );
  }

  private async makeBridge(n: Network): Promise<void> {
    const v6 = dualStacked(n);
    if (v6) this.ipv6Forwarding();
    await ensureBridge({
      name: n.bridge,
      gatewayCidr: [`${n.gateway}/${n.prefixLen}`, ...(v6 ? [`${n.gateway6}/${n.prefixLen6}`] : [])],
      ...(v6 ? { ipv6: true } : {}),
    });
  }

  /** dockerd turns on IPv6 forwarding (default and all) for its first IPv6 network: else nothing routes to it. */
  private ipv6Forwarding(): void {
    if (!this.deps.ipForward6) return;
    for (const file of ['/proc/sys/net/ipv6/conf/default/forwarding', '/proc/sys/net/ipv6/conf/all/forwarding']) {
      try {
        if (readFileSync(file, 'utf8').trim() !== '1') writeFileSync(file, '1\n');
      } catch (err) {
        this.deps.log.warn({ err }, 'could not turn on IPv6 forwarding: IPv6 traffic may not leave the host');
      }
    }
  }

  bridgeAddresses(name: string): Promise<string[]> {
    return linkIPv4Cidrs(name);
  }

  async addNetwork(n: Network): Promise<void> {
    await this.makeBridge(n);
    try {
      await this.deps.firewall.setNetwork(firewallNetwork(n));
      if (dualStacked(n)) await this.deps.firewall6?.setNetwork(firewallNetwork6(n));
    } catch (e) {
      await this.deps.firewall.removeNetwork(n.bridge);
      await removeBridge(n.bridge);
      throw e;
    }
  }

  async removeNetwork(n: Network): Promise<void> {
    await this.deps.firewall.removeNetwork(n.bridge);
    if (dualStacked(n)) await this.deps.firewall6?.removeNetwork(n.bridge);
    if (hasDns(n)) await this.deps.dns.removeNetwork(n.id);
    await removeBridge(n.bridge);
  }

  async attach(a: Attachment): Promise<void> {
    const { member, endpoint } = a;
    const { network, row } = endpoint;
    const veth = hostIfName(row.id);
    if (!member.restoring) {
      const linkLocal = JSON.parse(row.link_local_ips) as string[];
      await attachContainer({
        nsPath: member.nsPath!,
        bridge: network.bridge,
        hostIfName: veth,
        ifName: a.ifName,
        cidr: [
          `${row.ip}/${network.prefixLen}`,
          ...(row.ip6 ? [`${row.ip6}/${network.prefixLen6}`] : []),
          // dockerd gives each link-local address a /16 in IPv4, a /64 in IPv6.
          ...linkLocal.map((ip) => `${ip}/${ip.includes(':') ? 64 : 16}`),
        ],
        // The default routes are through the first network's gateways only, as dockerd routes them.
        ...(a.first ? { gateway: [network.gateway, ...(row.ip6 ? [network.gateway6] : [])] } : {}),
        mac: row.mac,
        // dockerd turns IPv6 off on an interface that has no IPv6 address (a network without EnableIPv6).
        ipv6: row.ip6 !== '' || linkLocal.some((ip) => ip.includes(':')),
      });
      // A container reaching its own published port through the host comes back in by the
      // port it left from: the bridge forwards that only in hairpin mode.
      writeFileSync(`/sys/class/net/${veth}/brport/hairpin_mode`, '1');
    }
    try {
      if (a.publish?.length) {
        const addresses = { ipv4: row.ip, ...(row.ip6 ? { ipv6: row.ip6 } : {}) };
        const bindings = await this.deps.ports.reserve(member.id, addresses, dualStack(a.publish, addresses));
        await this.deps.firewall.addPorts(mappingsOf(member.id, row.ip, bindings));
        const v6 = mappings6Of(member.id, row.ip6, bindings);
        if (v6.length) await this.deps.firewall6?.addPorts(v6);
        a.published?.(bindings);
      }
      if (!a.named) await this.addNames(member, endpoint);
    } catch (e) {
      await this.detach(a);
      throw e;
    }
  }

  async addNames(member: Member, endpoint: Endpoint): Promise<void> {
    const { network, row } = endpoint;
    if (!hasDns(network)) return;
    await this.deps.dns.addEntry(network.id, network.gateway, {
      containerId: member.id,
      ipv4: row.ip,
      ...(row.ip6 ? { ipv6: row.ip6 } : {}),
      // dockerd adds the hostname to the names (updateNetworkConfig).
      names: member.hostname ? [...endpoint.dnsNames, member.hostname] : endpoint.dnsNames,
      links: endpoint.links.map((spec) => {
        const { name, alias } = parseLink(spec);
        return { target: name, alias };
      }),
    });
  }

  async removeNames(member: Member, endpoint: Endpoint): Promise<void> {
    if (hasDns(endpoint.network)) await this.deps.dns.removeEntry(endpoint.network.id, member.id);
  }

  async detach(a: Attachment): Promise<void> {
    const { member, endpoint } = a;
    await this.deps.firewall.removePorts(member.id);
    await this.deps.firewall6?.removePorts(member.id);
    await this.deps.ports.release(member.id);
    await this.removeNames(member, endpoint);
    await detachContainer(hostIfName(endpoint.row.id));
  }

  async close(): Promise<void> {
    await this.deps.ports.close();
  }
}
