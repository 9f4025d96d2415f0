// A container's endpoints: its place on each network it joins, from create
// (NetworkMode and NetworkingConfig) or connect until disconnect or removal,
// and the host's side of them while it runs (attach at start, detach at exit).
import { randomBytes } from 'node:crypto';
import { z } from 'zod';
import { lazySchema } from '../../lazy-schema.js';
import { conflict, forbidden, invalidParameter, notFound } from '../../errors.js';
import type { Logger } from '../../log.js';
import type { EventBus } from '../events.js';
import { isUniqueViolation } from '../store/containers.js';
import type { EndpointRow, NetworkRepository } from '../store/networks.js';
import { contains, formatIp, macFor, nextFreeAddress, parseCidr, parseIp, subnetOf, userSubnet } from './ipam.js';
import { Ipv6Addresses } from './ipam6.js';
import { canonicalIp6 } from './ipv6.js';
import { checkLinkAlias, parseLink } from './linkspec.js';
import type { Plumbing } from './plumbing.js';
import type { PortBinding } from './ports.js';
import { type Endpoint, endpointOf, type Member, type Network } from './records.js';
import { bridgeResolvConf, type DnsOverrides, readHostResolvConf, resolvConf } from './resolvconf.js';

export type { Endpoint, Member } from './records.js';
export { checkLinkAlias, parseLink } from './linkspec.js';

/** An endpoint's settings as a client gives them (Docker's EndpointSettings); the output fields are read as absent. */
export const EndpointSettingsSchema = lazySchema(() =>
  z.looseObject({
    IPAMConfig: z
      .looseObject({
        IPv4Address: z.string().nullish(),
        IPv6Address: z.string().nullish(),
        LinkLocalIPs: z.array(z.string()).nullish(),
      })
      .nullish(),
    Links: z.array(z.string()).nullish(),
    Aliases: z.array(z.string()).nullish(),
    MacAddress: z.string().nullish(),
    DriverOpts: z.record(z.string(), z.string()).nullish(),
    GwPriority: z.number().nullish(),
  }),
);
export type EndpointSettings = z.output<typeof EndpointSettingsSchema>;

/** A container's networking as inspect and the list show it. */
export interface ContainerNetworking {
  endpoints: Endpoint[];
  ports: PortBinding[];
}

/**
 * The networks as the endpoints need them (the network service, given): by
 * reference, and who a container on them is called.
 */
export interface NetworkLookup {
  find(ref: string): Network;
  nameOf(containerId: string): string;
}

/** NetworkMode values that are not networks. */
const isContainerMode = (mode: string) => mode.startsWith('container:');

export class Endpoints {
  /** The last address given on each network: the next is given after it (see nextFreeAddress). */
  private readonly lastGiven = new Map<string, number>();
  private readonly ipv6 = new Ipv6Addresses();

  constructor(
    private readonly deps: {
      repo: NetworkRepository;
      networks: NetworkLookup;
      plumbing: Plumbing;
      events: EventBus;
      logger: Logger;
      /** The daemon's --dns, --dns-search, --dns-opt: what a container without its own gets. */
      dnsDefaults: DnsOverrides;
    },
  ) {}

  /** `default` is the default bridge, or none when berthd runs without one (`--bridge none`). */
  private networkOfMode(mode: string): string {
    if (mode !== 'default') return mode;
    return this.deps.repo.findByName('bridge') ? 'bridge' : 'none';
  }

  /**
   * Checks a create's networks and records the container's endpoints on them
   * (the container's row exists already). NetworkMode names the first network;
   * NetworkingConfig may add settings for it and, from API 1.44, more networks.
   */
  createEndpoints(
    containerId: string,
    mode: string,
    configs: Record<string, unknown | null>,
    opts: { macAddress: string; publishes: boolean },
  ): string[] {
    if (isContainerMode(mode)) {
      if (Object.keys(configs).length) {
        throw invalidParameter("conflicting options: container type network can't be used with NetworkingConfig");
      }
      if (opts.macAddress)
        throw invalidParameter("conflicting options: container type network can't be used with mac-address");
      return [];
    }
    const first = this.deps.networks.find(this.networkOfMode(mode));
    const wanted = new Map<string, { network: Network; settings: EndpointSettings }>();
    // The container-wide MacAddress (deprecated in API 1.44) is its first network's.
    wanted.set(first.id, { network: first, settings: opts.macAddress ? { MacAddress: opts.macAddress } : {} });
    for (const [name, raw] of Object.entries(configs)) {
      const network = this.deps.networks.find(this.networkOfMode(name));
      const settings = parseSettings(raw, name);
      if (network.id === first.id && opts.macAddress && !settings.MacAddress) settings.MacAddress = opts.macAddress;
      wanted.set(network.id, { network, settings });
    }
    const all = [...wanted.values()];
    if (all.length > 1 && all.some((w) => w.network.driver !== 'bridge')) {
      throw invalidParameter(
        `Container cannot be connected to network endpoints: ${all.map((w) => w.network.name).join(', ')}`,
      );
    }
    this.insert(
      containerId,
      all.map((w) => [w.network, w.settings]),
    );
    // dockerd takes them, says so, and publishes nothing: a host-network container has no network of its own.
    if (opts.publishes && first.driver === 'host')
      return ['Published ports are discarded when using host network mode'];
    return [];
  }

  /** Records endpoints, each given its address; a static address already taken is refused. */
  private insert(containerId: string, entries: [Network, EndpointSettings][]): void {
    const rows = entries.map(([network, settings]) => this.newRow(containerId, network, settings));
    try {
      this.deps.repo.insertEndpoints(rows);
    } catch (e) {
      if (isUniqueViolation(e)) throw conflict('Address already in use');
      throw e;
    }
  }

  private newRow(containerId: string, network: Network, settings: EndpointSettings): Omit<EndpointRow, 'seq'> {
    checkSettings(network, settings);
    const row = {
      id: randomBytes(32).toString('hex'),
      network_id: network.id,
      container_id: containerId,
      ip: '',
      mac: settings.MacAddress ?? '',
      static_ip: 0,
      aliases: JSON.stringify(settings.Aliases ?? []),
      links: JSON.stringify(settings.Links ?? []),
      link_local_ips: JSON.stringify(linkLocalIps(settings)),
      ip6: '',
      static_ip6: 0,
    };
    if (network.driver !== 'bridge') return row;
    const asked = settings.IPAMConfig?.IPv4Address;
    const ip = asked ? this.staticAddress(network, asked) : this.freeAddress(network);
    const mac = row.mac || macFor(ip);
    const v6 = this.ipv6.choose(
      network,
      settings.IPAMConfig?.IPv6Address,
      () => this.deps.repo.endpointsOfNetwork(network.id).map((e) => e.ip6),
      mac,
    );
    return {
      ...row,
      ip: formatIp(ip),
      mac,
      static_ip: asked ? 1 : 0,
      ip6: v6.ip6,
      static_ip6: v6.static ? 1 : 0,
    };
  }

  private staticAddress(network: Network, text: string): number {
    if (!network.ipamGiven) {
      throw forbidden(
        'user specified IP address is supported only when connecting to networks with user configured subnets',
      );
    }
    const ip = parseIp(text);
    const subnet = subnetOf(parseCidr(network.subnet)!);
    if (ip === null) throw invalidParameter(`invalid IPv4 address: ${text}`);
    if (!contains(subnet, ip) || ip === parseIp(network.gateway)) {
      throw invalidParameter(`no configured subnet or ip-range contain the IP address ${text}`);
    }
    // Reserved, as held by another endpoint: libnetwork's IPAM answers the same.
    if (auxAddresses(network).includes(ip)) throw conflict('Address already in use');
    return ip;
  }

  private freeAddress(network: Network): number {
    const subnet = subnetOf(parseCidr(network.subnet)!);
    const range = network.ipRange ? userSubnet(network.ipRange, 'ip-range') : subnet;
    const taken = new Set(
      this.deps.repo
        .endpointsOfNetwork(network.id)
        .map((e) => parseIp(e.ip))
        .filter((n): n is number => n !== null),
    );
    taken.add(parseIp(network.gateway)!);
    for (const aux of auxAddresses(network)) taken.add(aux);
    const ip = nextFreeAddress(subnet, range, taken, this.lastGiven.get(network.id) ?? 0);
    if (ip === null) throw forbidden(`no available IPv4 addresses on network ${network.name}`);
    this.lastGiven.set(network.id, ip);
    return ip;
  }

  /** The container's endpoints, in connection order (the first is eth0). */
  of(containerId: string, name = ''): Endpoint[] {
    return this.deps.repo
      .endpointsOfContainer(containerId)
      .map((row) => endpointOf(row, this.deps.networks.find(row.network_id), name));
  }

  /**
   * The endpoints and published ports of many containers (a list's): one query
   * for each kind, and each network looked up once, rather than all per container.
   */
  ofMany(members: { id: string; name: string }[]): Map<string, ContainerNetworking> {
    const ids = members.map((m) => m.id);
    const out = new Map(members.map((m): [string, ContainerNetworking] => [m.id, { endpoints: [], ports: [] }]));
    const names = new Map(members.map((m) => [m.id, m.name]));
    const networks = new Map<string, Network>();
    for (const row of this.deps.repo.endpointsOfContainers(ids)) {
      let network = networks.get(row.network_id);
      if (!network) {
        network = this.deps.networks.find(row.network_id);
        networks.set(row.network_id, network);
      }
      out.get(row.container_id)?.endpoints.push(endpointOf(row, network, names.get(row.container_id) ?? ''));
    }
    for (const [id, text] of this.deps.repo.publishedOf(ids)) {
      const entry = out.get(id);
      if (entry) entry.ports = JSON.parse(text) as PortBinding[];
    }
    return out;
  }

  // ------------------------------------------------------------------ the host's side

  /** The container's bridge endpoints, in connection order. */
  private bridged(member: Member): Endpoint[] {
    return this.of(member.id, member.name).filter((e) => e.network.driver === 'bridge');
  }

  /**
   * At start, before the runtime creates the container: its names on its user
   * networks. They need no namespace, and the DNS server's reload then runs
   * while the runtime works (attach is told `named`).
   */
  async announce(member: Member): Promise<void> {
    await Promise.all(this.bridged(member).map((ep) => this.deps.plumbing.addNames(member, ep)));
  }

  /** A start that failed: the names announce gave go (nothing when there are none). */
  async withdraw(member: Member): Promise<void> {
    await Promise.all(this.bridged(member).map((ep) => this.deps.plumbing.removeNames(member, ep)));
  }

  /**
   * At start, before the process runs: the container's interfaces, rules and
   * names on each bridge network (`named`: announce gave the names); its
   * published ports on the first.
   */
  async attach(member: Member, o: { named?: boolean } = {}): Promise<void> {
    const eps = this.bridged(member);
    let done = 0;
    try {
      for (const [i, ep] of eps.entries()) {
        await this.deps.plumbing.attach({
          member,
          endpoint: ep,
          ifName: `eth${i}`,
          first: i === 0,
          named: o.named ?? false,
          ...(i === 0 && member.ports?.length
            ? {
                publish: member.ports,
                published: (b) => this.deps.repo.setPublished(member.id, JSON.stringify(b)),
              }
            : {}),
        });
        done++;
      }
    } catch (e) {
      for (const ep of eps.slice(0, done)) await this.detachOne(member, ep);
      this.deps.repo.clearPublished(member.id);
      throw e;
    }
  }

  /** After a berthd restart, for a container that runs on: the same host ports, rules and names again. */
  async restore(member: Member): Promise<void> {
    const ports = this.published(member.id).map((b) => ({
      proto: b.proto,
      containerPort: b.containerPort,
      hostIp: b.hostIp,
      hostPort: b.hostPort,
      hostPortEnd: b.hostPort,
    }));
    await this.attach({ ...member, ports, restoring: true });
  }

  /**
   * What the container's /etc/hosts and /etc/resolv.conf say of its networks:
   * its first network's address, and the DNS server of its first user network
   * (aardvark-dns on the gateway) or, without one, the host's reachable servers.
   */
  async etcFiles(
    containerId: string,
    own: DnsOverrides,
  ): Promise<{ address: string | null; address6: string | null; resolvConf: string; linkHosts: string[] }> {
    const eps = this.of(containerId).filter((e) => e.network.driver === 'bridge');
    const d = this.deps.dnsDefaults;
    const overrides = {
      dns: own.dns?.length ? own.dns : d.dns,
      search: own.search?.length ? own.search : d.search,
      options: own.options?.length ? own.options : d.options,
    };
    const host = await readHostResolvConf();
    const named = eps.find((e) => !e.network.predefined);
    return {
      address: eps[0]?.row.ip || null,
      address6: eps[0]?.row.ip6 || null,
      resolvConf: named ? resolvConf(named.network.gateway, overrides, host) : bridgeResolvConf(overrides, host),
      linkHosts: eps.filter((e) => !e.network.predefined).flatMap((e) => this.linkHostsOn(e)),
    };
  }

  /**
   * A user network's links (EndpointSettings.Links, `--link` with --network):
   * dockerd makes each an alias only the linking container resolves; berth
   * writes it in that container's /etc/hosts, at the address the target has
   * on the network now. A target not on the network gets no line, as dockerd's
   * alias then resolves nothing.
   */
  private linkHostsOn(ep: Endpoint): string[] {
    const links = JSON.parse(ep.row.links) as string[];
    if (!links.length) return [];
    const peers = this.deps.repo
      .endpointsOfNetwork(ep.network.id)
      .filter((r) => r.ip && r.container_id !== ep.row.container_id)
      .map((r) => ({
        ip: r.ip,
        names: [this.deps.networks.nameOf(r.container_id), ...(JSON.parse(r.aliases) as string[])],
        id: r.container_id,
      }));
    return links.flatMap((spec) => {
      const { name, alias } = parseLink(spec);
      const peer = peers.find((p) => p.names.includes(name) || (name.length >= 12 && p.id.startsWith(name)));
      return peer ? [`${peer.ip}\t${alias}`] : [];
    });
  }

  /** Containers sharing a network with this one that have links there (their /etc/hosts may name it). */
  linkersNear(containerId: string): string[] {
    // One query: every start asks it, and reading each network's endpoints would cost one row per container.
    return this.deps.repo.linkersNear(containerId);
  }

  /** The container's address on the default bridge ('' until it has one); undefined when it is not on it. */
  bridgeAddress(containerId: string): string | undefined {
    const ep = this.of(containerId).find((e) => e.network.predefined && e.network.name === 'bridge');
    return ep ? ep.row.ip : undefined;
  }

  /** The host ports the container publishes now. */
  published(containerId: string): PortBinding[] {
    const text = this.deps.repo.published(containerId);
    return text ? (JSON.parse(text) as PortBinding[]) : [];
  }

  /** At exit: what attach made goes (the veth goes with the namespace; its host end is removed now). */
  async detach(member: Member): Promise<void> {
    for (const ep of this.bridged(member)) {
      await this.detachOne(member, ep);
    }
    this.deps.repo.clearPublished(member.id);
  }

  private async detachOne(member: Member, endpoint: Endpoint): Promise<void> {
    await this.deps.plumbing.detach({ member, endpoint, ifName: '', first: false }).catch((e) => {
      this.deps.logger.warn({ err: e, id: member.id, network: endpoint.network.name }, 'network detach failed');
    });
  }

  // ------------------------------------------------------------------ connect, disconnect

  /** `POST /networks/{id}/connect`: a created or running container joins one more network. */
  async connect(networkRef: string, member: Member & { mode: string }, raw: unknown): Promise<void> {
    const network = this.deps.networks.find(networkRef);
    if (
      network.driver !== 'bridge' ||
      member.mode === 'host' ||
      member.mode === 'none' ||
      isContainerMode(member.mode)
    ) {
      throw forbidden(`container cannot be disconnected from host network or connected to host network`);
    }
    const current = this.of(member.id, member.name);
    if (current.some((e) => e.network.id === network.id)) {
      throw forbidden(`endpoint with name ${member.name} already exists in network ${network.name}`);
    }
    this.insert(member.id, [[network, parseSettings(raw, network.name)]]);
    const ep = this.of(member.id, member.name).find((e) => e.network.id === network.id)!;
    if (member.nsPath) {
      try {
        await this.deps.plumbing.attach({
          member,
          endpoint: ep,
          ifName: `eth${current.length}`,
          first: current.length === 0,
        });
      } catch (e) {
        this.deps.repo.removeEndpoint(network.id, member.id);
        throw e;
      }
    }
    this.deps.events.publish('network', 'connect', network.id, {
      container: member.id,
      name: network.name,
      type: 'bridge',
    });
  }

  /** `POST /networks/{id}/disconnect`. */
  async disconnect(networkRef: string, member: Member): Promise<void> {
    const network = this.deps.networks.find(networkRef);
    const ep = this.of(member.id, member.name).find((e) => e.network.id === network.id);
    if (!ep) throw notFound(`container ${member.id} is not connected to network ${network.name}`);
    if (member.nsPath && network.driver === 'bridge') await this.detachOne(member, ep);
    this.deps.repo.removeEndpoint(network.id, member.id);
    this.deps.events.publish('network', 'disconnect', network.id, {
      container: member.id,
      name: network.name,
      type: network.driver,
    });
  }
}

/**
 * IPAMConfig.LinkLocalIPs, checked: IPv4 addresses (dockerd gives each a /16)
 * and IPv6 ones (a /64), the latter kept in their canonical form. Bridge
 * networks only, as dockerd's other drivers have no interface to put them on.
 */
function linkLocalIps(s: EndpointSettings): string[] {
  return (s.IPAMConfig?.LinkLocalIPs ?? []).map((ip) => {
    const v6 = ip.includes(':') ? canonicalIp6(ip) : null;
    if (v6 && v6 !== '::') return v6;
    if (parseIp(ip) === null || ip === '0.0.0.0') throw invalidParameter(`invalid link-local IP address: ${ip}`);
    return ip;
  });
}

/** The network's auxiliary addresses: never given to an endpoint. */
const auxAddresses = (network: Network): number[] =>
  Object.values(network.auxAddresses)
    .map(parseIp)
    .filter((n): n is number => n !== null);

function parseSettings(raw: unknown, network: string): EndpointSettings {
  const r = EndpointSettingsSchema.safeParse(raw ?? {});
  if (!r.success) throw invalidParameter(`invalid endpoint settings for network ${network}: ${r.error.message}`);
  return r.data;
}

const APPLIED_DRIVER_OPTS = ['com.docker.network.endpoint.ifname', 'com.docker.network.endpoint.sysctls'];

/** What berth does not apply yet is refused, not dropped. */
function checkSettings(network: Network, s: EndpointSettings): void {
  const refuse = (what: string) => {
    throw invalidParameter(`${what} (network ${network.name}) is not supported by berth yet`);
  };
  if (s.Links?.length && network.predefined) {
    throw invalidParameter(
      `links on network ${network.name} are HostConfig.Links (legacy links on the default bridge); an endpoint's links apply to user networks`,
    );
  }
  for (const l of s.Links ?? []) checkLinkAlias(parseLink(l).alias);
  // dockerd's bridge driver applies these two (API 1.47: the interface's name, its sysctls) and
  // passes any other endpoint option by, unread: taken and ignored here as there.
  for (const k of Object.keys(s.DriverOpts ?? {})) {
    if (APPLIED_DRIVER_OPTS.includes(k)) refuse(`endpoint driver option ${k}`);
  }
  if (s.GwPriority) refuse('a gateway priority');
  if (
    network.driver !== 'bridge' &&
    (s.Aliases?.length ||
      s.IPAMConfig?.IPv4Address ||
      s.IPAMConfig?.IPv6Address ||
      s.IPAMConfig?.LinkLocalIPs?.length ||
      s.MacAddress)
  ) {
    throw invalidParameter(`network-scoped aliases, addresses and MACs apply to bridge networks, not ${network.name}`);
  }
  if (s.Aliases?.length && network.predefined) {
    throw invalidParameter('network-scoped alias is supported only for containers in user defined networks');
  }
}
