// Networks as dockerd has them: the predefined bridge, host and none, and
// user-defined bridge networks; create, list, inspect, remove, prune, and a
// container's endpoints on them. berth is the IPAM (ipam.ts) and keeps every
// choice in SQLite; the host's side (bridges, veths, firewall, DNS) is done by
// the Plumbing it is given, told what to make.
import { readFileSync } from 'node:fs';
import { z } from 'zod';
import { lazySchema } from '../../lazy-schema.js';
import { conflict, forbidden, invalidParameter, notFound } from '../../errors.js';
import type { Logger } from '../../log.js';
import type { EventBus } from '../events.js';
import { boolFilter, checkFilters, type Filters, matchLabels, parseUntil } from '../filters.js';
import { isUniqueViolation } from '../store/containers.js';
import type { EndpointRow, NetworkRepository, NetworkRow } from '../store/networks.js';
import {
  type AddressPool,
  firstFreeSubnet,
  formatIp,
  formatSubnet,
  parseCidr,
  parseIp,
  parseRouteTable,
  type Subnet,
  subnetOf,
  userSubnet,
  contains,
  overlaps,
} from './ipam.js';
import { defaultBridgeIpv6, NO_IPV6, networkIpv6, splitConfigs, subnet6Of } from './ipam6.js';
import type { Subnet6 } from './ipv6.js';
import type { Plumbing } from './plumbing.js';
import { type Network, rowToNetwork } from './records.js';
import { randomHex } from '../os/random.js';

export type { Network } from './records.js';

export interface NetworkSettings {
  /** The default bridge's interface name; null: no default network (dockerd's `bridge: none`). */
  defaultBridge: string | null;
  /** dockerd's `bip`: the default bridge's address and prefix (172.17.0.1/16); absent: the first free pool's. */
  bip?: string;
  /** dockerd's `fixed-cidr`: where the default bridge gives addresses from. */
  fixedCidr?: string;
  /** dockerd's `ipv6` and `fixed-cidr-v6`: the default bridge dual stack, with this IPv6 subnet. */
  ipv6?: boolean;
  fixedCidrV6?: string;
  /** dockerd's `default-address-pools`: where networks without a subnet get one. */
  pools: readonly AddressPool[];
}

export interface NetworkDeps {
  repo: NetworkRepository;
  events: EventBus;
  logger: Logger;
  settings: NetworkSettings;
  plumbing: Plumbing;
}

/** A container on a network, as network inspect lists it. */
export interface NetworkEndpoint {
  containerId: string;
  containerName: string;
  row: EndpointRow;
}

/** `POST /networks/create`'s body. */
export const NetworkCreateSchema = lazySchema(() =>
  z.looseObject({
    Name: z.string(),
    CheckDuplicate: z.boolean().nullish(),
    Driver: z.string().nullish(),
    Scope: z.string().nullish(),
    Internal: z.boolean().nullish(),
    Attachable: z.boolean().nullish(),
    Ingress: z.boolean().nullish(),
    ConfigOnly: z.boolean().nullish(),
    ConfigFrom: z.looseObject({ Network: z.string().nullish() }).nullish(),
    EnableIPv6: z.boolean().nullish(),
    EnableIPv4: z.boolean().nullish(),
    IPAM: z
      .looseObject({
        Driver: z.string().nullish(),
        Config: z
          .array(
            z.looseObject({
              Subnet: z.string().nullish(),
              IPRange: z.string().nullish(),
              Gateway: z.string().nullish(),
              AuxiliaryAddresses: z.record(z.string(), z.string()).nullish(),
            }),
          )
          .nullish(),
        Options: z.record(z.string(), z.string()).nullish(),
      })
      .nullish(),
    Options: z.record(z.string(), z.string()).nullish(),
    Labels: z.record(z.string(), z.string()).nullish(),
  }),
);

export type CreateNetworkRequest = z.output<typeof NetworkCreateSchema>;

/** Docker's predefined networks: names no user network may take. */
export const PREDEFINED = ['bridge', 'host', 'none'] as const;
const BRIDGE_NAME_OPTION = 'com.docker.network.bridge.name';
/** Driver options berth applies (the bridge's name) or that ask for what berth does anyway. */
const KNOWN_OPTIONS: Record<string, readonly string[] | null> = {
  [BRIDGE_NAME_OPTION]: null,
  'com.docker.network.bridge.enable_ip_masquerade': ['true'],
  'com.docker.network.bridge.enable_icc': ['true'],
  'com.docker.network.bridge.host_binding_ipv4': ['0.0.0.0'],
  'com.docker.network.enable_ipv6': ['false', 'true'],
  'com.docker.network.enable_ipv4': ['true'],
  'com.docker.network.driver.mtu': ['1500'],
};
/**
 * The other options dockerd's bridge driver (27) reads: berth refuses a value
 * it would apply and berth cannot. A name outside both lists is taken and
 * ignored, as the driver ignores it (and inspect shows it, as dockerd's does).
 */
const HONOURED_BY_DOCKERD = new Set([
  'com.docker.network.bridge.gateway_mode_ipv4',
  'com.docker.network.bridge.gateway_mode_ipv6',
  'com.docker.network.bridge.inhibit_ipv4',
  'com.docker.network.bridge.default_bridge',
  'com.docker.network.container_iface_prefix',
  'com.docker.network.host_ipv4',
  'com.docker.network.host_ipv6',
]);
const LIST_FILTERS = ['dangling', 'driver', 'id', 'label', 'name', 'scope', 'type'];

const newId = () => randomHex(32);

export class NetworkService {
  private readonly log: Logger;

  constructor(private readonly deps: NetworkDeps) {
    this.log = deps.logger.child({ component: 'networks' });
  }

  /**
   * Makes the predefined networks (once: their ids are kept, as dockerd keeps
   * them) and brings every bridge network's host side up to what is recorded.
   */
  async init(): Promise<void> {
    const { repo, settings } = this.deps;
    if (!repo.findByName('host')) this.insert({ name: 'host', driver: 'host', predefined: true });
    if (!repo.findByName('none')) this.insert({ name: 'none', driver: 'null', predefined: true });
    const current = repo.findByName('bridge');
    if (settings.defaultBridge === null) {
      if (current && repo.endpointCount(current.id) === 0) repo.remove(current.id);
    } else if (!current || !this.defaultBridgeMatches(current)) {
      const adopted = await this.adoptedAddress(settings.defaultBridge, current);
      if (current) this.replaceDefaultBridge(current, adopted);
      else this.insertDefaultBridge(adopted);
    }
    await this.deps.plumbing.init(this.bridgeNetworks());
  }

  private bridgeNetworks(): Network[] {
    return this.deps.repo
      .list()
      .filter((r) => r.driver === 'bridge')
      .map(rowToNetwork);
  }

  private defaultBridgeMatches(r: NetworkRow): boolean {
    const { defaultBridge, bip, fixedCidr } = this.deps.settings;
    if (r.bridge !== defaultBridge) return false;
    if (bip && `${r.gateway}/${rowToNetwork(r).prefixLen}` !== bip) return false;
    const v6 = defaultBridgeIpv6(this.deps.settings);
    if (r.enable_ipv6 !== v6.enable_ipv6 || r.subnet6 !== v6.subnet6) return false;
    return !fixedCidr || r.ip_range === fixedCidr;
  }

  /**
   * The address the bridge already has on the host, when no bip is set: dockerd
   * takes docker0's (ElectInterfaceAddresses), so that a new data root, or
   * daemons started one after another, use the one the bridge has instead of
   * adding another. One that overlaps a user network of ours is not taken.
   */
  private async adoptedAddress(
    bridge: string,
    current: NetworkRow | undefined,
  ): Promise<{ ip: number; prefix: number } | undefined> {
    const { bip, fixedCidr } = this.deps.settings;
    if (bip) return undefined;
    const found = (await this.deps.plumbing.bridgeAddresses(bridge)).flatMap((c) => parseCidr(c) ?? []);
    const fixed = fixedCidr ? parseCidr(fixedCidr) : null;
    const chosen = (fixed && found.find((c) => contains(subnetOf(c), fixed.ip))) || found[0];
    if (!chosen || chosen.prefix > 30) return undefined;
    const others = this.deps.repo.list().filter((r) => r.subnet && r.id !== current?.id);
    if (others.some((r) => overlaps(subnetOf(parseCidr(r.subnet)!), subnetOf(chosen)))) return undefined;
    return chosen;
  }

  /** The settings changed (another bip, another bridge): the network keeps its id, its containers their places. */
  private replaceDefaultBridge(old: NetworkRow, adopted?: { ip: number; prefix: number }): void {
    const fresh = this.defaultBridgeRow(old.id, adopted);
    this.deps.repo.remove(old.id);
    this.deps.repo.insert({ ...fresh, created: old.created });
  }

  private insertDefaultBridge(adopted?: { ip: number; prefix: number }): void {
    this.deps.repo.insert(this.defaultBridgeRow(newId(), adopted));
  }

  private defaultBridgeRow(id: string, adopted?: { ip: number; prefix: number }): NetworkRow {
    const { defaultBridge, bip, fixedCidr } = this.deps.settings;
    let subnet: Subnet;
    let gateway: number;
    const given = bip ? parseCidr(bip) : adopted;
    if (bip && !given) throw invalidParameter(`invalid bip ${bip}: it is not an IPv4 address with a prefix`);
    if (given) {
      subnet = subnetOf(given);
      gateway = given.ip;
    } else {
      subnet = this.freeSubnet('the default bridge');
      gateway = subnet.base + 1;
    }
    if (fixedCidr && !contains(subnet, userSubnet(fixedCidr, 'fixed-cidr').base)) {
      throw invalidParameter(`fixed-cidr ${fixedCidr} is not in the bridge's subnet ${formatSubnet(subnet)}`);
    }
    return {
      ...this.rowDefaults(id, 'bridge', 'bridge', true),
      bridge: defaultBridge!,
      subnet: formatSubnet(subnet),
      gateway: formatIp(gateway),
      ip_range: fixedCidr ?? '',
      options: JSON.stringify({
        'com.docker.network.bridge.default_bridge': 'true',
        'com.docker.network.bridge.enable_icc': 'true',
        'com.docker.network.bridge.enable_ip_masquerade': 'true',
        'com.docker.network.bridge.host_binding_ipv4': '0.0.0.0',
        [BRIDGE_NAME_OPTION]: defaultBridge!,
        'com.docker.network.driver.mtu': '1500',
      }),
      ...defaultBridgeIpv6(this.deps.settings),
    };
  }

  private rowDefaults(id: string, name: string, driver: string, predefined: boolean): NetworkRow {
    return {
      id,
      name,
      driver,
      predefined: predefined ? 1 : 0,
      bridge: '',
      subnet: '',
      gateway: '',
      ip_range: '',
      ipam_given: 0,
      internal: 0,
      attachable: 0,
      labels: '{}',
      options: '{}',
      ipam_options: '{}',
      aux_addresses: '{}',
      created: Date.now(),
      ...NO_IPV6,
    };
  }

  private insert(o: { name: string; driver: string; predefined: boolean }): void {
    this.deps.repo.insert(this.rowDefaults(newId(), o.name, o.driver, o.predefined));
  }

  /** A subnet from the pools that no network of berth's and no route of the host's overlaps. */
  private freeSubnet(what: string): Subnet {
    const used = [...this.usedSubnets(), ...hostRoutes()];
    const s = firstFreeSubnet(this.deps.settings.pools, used);
    if (!s) {
      throw forbidden(
        `could not find an available, non-overlapping IPv4 address pool among the defaults to assign to ${what}`,
      );
    }
    return s;
  }

  private usedSubnets(): Subnet[] {
    return this.deps.repo
      .list()
      .filter((r) => r.subnet)
      .map((r) => subnetOf(parseCidr(r.subnet)!));
  }

  private usedSubnets6(): Subnet6[] {
    return this.deps.repo
      .list()
      .map(rowToNetwork)
      .map(subnet6Of)
      .filter((s): s is Subnet6 => s !== null);
  }

  // ------------------------------------------------------------------ lookup

  /** By full id, then exact name, then unique id prefix: dockerd's order. */
  find(ref: string): Network {
    const { repo } = this.deps;
    const r =
      repo.find(ref) ??
      repo.findByName(ref) ??
      (() => {
        const hits = /^[0-9a-f]+$/.test(ref) ? repo.findByPrefix(ref) : [];
        if (hits.length > 1) throw invalidParameter(`network ${ref} is ambiguous (${hits.length} matches found)`);
        return hits[0];
      })();
    if (!r) throw notFound(`network ${ref} not found`);
    return rowToNetwork(r);
  }

  list(filters: Filters = {}): Network[] {
    checkFilters(filters, LIST_FILTERS);
    const dangling = boolFilter(filters, 'dangling');
    for (const t of filters.type ?? []) {
      if (t !== 'custom' && t !== 'builtin') throw invalidParameter(`invalid filter: 'type'='${t}'`);
    }
    return this.deps.repo
      .list()
      .map(rowToNetwork)
      .filter((n) => {
        if (filters.driver && !filters.driver.includes(n.driver)) return false;
        if (filters.id && !filters.id.some((v) => n.id.startsWith(v))) return false;
        if (filters.name && !filters.name.some((v) => n.name.includes(v))) return false;
        if (filters.scope && !filters.scope.includes('local')) return false;
        if (filters.type && !filters.type.includes(n.predefined ? 'builtin' : 'custom')) return false;
        if (!matchLabels(filters, n.labels)) return false;
        if (dangling !== undefined && !n.predefined && (this.deps.repo.endpointCount(n.id) === 0) !== dangling) {
          return false;
        }
        return !(dangling === true && n.predefined);
      });
  }

  /** Who the containers on networks are called (the container service tells, once built). */
  private containerName: (id: string) => string = (id) => id.slice(0, 12);

  knowContainers(nameOf: (id: string) => string): void {
    this.containerName = nameOf;
  }

  /** The name of a container on a network (its short id until the container service told). */
  nameOf(containerId: string): string {
    return this.containerName(containerId);
  }

  inspect(ref: string): { network: Network; endpoints: NetworkEndpoint[] } {
    const network = this.find(ref);
    const endpoints = this.deps.repo.endpointsOfNetwork(network.id).map((row) => ({
      containerId: row.container_id,
      containerName: this.containerName(row.container_id),
      row,
    }));
    return { network, endpoints };
  }

  // ------------------------------------------------------------------ create, remove

  async create(req: CreateNetworkRequest): Promise<{ Id: string; Warning: string }> {
    const row = this.newNetworkRow(req);
    try {
      this.deps.repo.insert(row);
    } catch (e) {
      if (isUniqueViolation(e)) throw conflict(`network with name ${req.Name} already exists`);
      throw e;
    }
    try {
      await this.deps.plumbing.addNetwork(rowToNetwork(row));
    } catch (e) {
      this.deps.repo.remove(row.id);
      throw e;
    }
    this.deps.events.publish('network', 'create', row.id, { name: row.name, type: row.driver });
    return { Id: row.id, Warning: '' };
  }

  private newNetworkRow(req: CreateNetworkRequest): NetworkRow {
    const name = req.Name?.trim();
    if (!name) throw invalidParameter('network name must not be empty');
    if ((PREDEFINED as readonly string[]).includes(name) || name === 'default') {
      throw forbidden(`operation is not permitted on predefined ${name} network `);
    }
    if (this.deps.repo.findByName(name)) throw conflict(`network with name ${name} already exists`);
    checkDriver(req.Driver || 'bridge');
    if (req.Scope && req.Scope !== 'local') throw invalidParameter(`scope ${req.Scope} is not supported by berth`);
    if (req.Ingress) throw forbidden('ingress networks are swarm networks, which berth does not have');
    if (req.ConfigOnly || req.ConfigFrom?.Network) {
      throw invalidParameter('config-only networks (ConfigOnly, ConfigFrom) are not supported by berth yet');
    }
    if (req.EnableIPv4 === false) throw invalidParameter('a network without IPv4 is not supported by berth yet');
    const options = req.Options ?? {};
    for (const [k, v] of Object.entries(options)) {
      const allowed = KNOWN_OPTIONS[k];
      if (allowed === undefined ? HONOURED_BY_DOCKERD.has(k) : allowed !== null && !allowed.includes(v)) {
        throw invalidParameter(`network option ${k}=${v} is not supported by berth yet`);
      }
    }
    const id = newId();
    const ipam = this.ipamOf(req, name);
    const bridge = options[BRIDGE_NAME_OPTION] || `br-${id.slice(0, 12)}`;
    checkInterfaceName(bridge);
    if (this.deps.repo.list().some((r) => r.bridge === bridge)) {
      throw conflict(`bridge ${bridge} is already used by another network`);
    }
    // dockerd reads the driver option when EnableIPv6 is not given.
    const enableIPv6 = req.EnableIPv6 ?? options['com.docker.network.enable_ipv6'] === 'true';
    const ipv6 = networkIpv6(enableIPv6, splitConfigs(req.IPAM?.Config ?? []).v6, this.usedSubnets6());
    return {
      ...this.rowDefaults(id, name, 'bridge', false),
      bridge,
      ...ipam,
      ...ipv6,
      internal: req.Internal ? 1 : 0,
      attachable: req.Attachable ? 1 : 0,
      labels: JSON.stringify(req.Labels ?? {}),
      options: JSON.stringify(options),
      ipam_options: JSON.stringify(req.IPAM?.Options ?? null),
    };
  }

  /** The subnet, gateway and range: as given (checked as dockerd checks them), or the first free pool's. */
  private ipamOf(
    req: CreateNetworkRequest,
    name: string,
  ): Pick<NetworkRow, 'subnet' | 'gateway' | 'ip_range' | 'ipam_given' | 'aux_addresses'> {
    const driver = req.IPAM?.Driver || 'default';
    if (driver !== 'default') throw invalidParameter(`IPAM driver ${driver} is not supported by berth`);
    if (req.IPAM?.Options && Object.keys(req.IPAM.Options).length) {
      throw invalidParameter('IPAM options are not supported by berth yet');
    }
    const configs = splitConfigs(req.IPAM?.Config ?? []).v4;
    if (configs.length > 1) throw invalidParameter('berth networks have one IPv4 subnet; several were given');
    const cfg = configs[0];
    if (!cfg?.Subnet) {
      if (cfg && (cfg.Gateway || cfg.IPRange)) throw invalidParameter('a gateway or IP range needs a subnet');
      const s = this.freeSubnet(`network ${name}`);
      if (cfg?.AuxiliaryAddresses && Object.keys(cfg.AuxiliaryAddresses).length) {
        throw invalidParameter('auxiliary addresses need a subnet');
      }
      return {
        subnet: formatSubnet(s),
        gateway: formatIp(s.base + 1),
        ip_range: '',
        ipam_given: 0,
        aux_addresses: '{}',
      };
    }
    const subnet = userSubnet(cfg.Subnet);
    checkAuxAddresses(cfg.AuxiliaryAddresses ?? {}, subnet, cfg.Subnet);
    const taken = this.usedSubnets().find((u) => overlaps(u, subnet));
    if (taken) throw forbidden(`Pool overlaps with other one on this address space`);
    let gateway = subnet.base + 1;
    if (cfg.Gateway) {
      const g = parseIp(cfg.Gateway);
      if (g === null) throw invalidParameter(`invalid gateway ${cfg.Gateway}`);
      if (!contains(subnet, g)) {
        throw invalidParameter(`no matching subnet for gateway ${cfg.Gateway}`);
      }
      gateway = g;
    }
    if (cfg.IPRange) {
      const range = userSubnet(cfg.IPRange, 'ip-range');
      if (!contains(subnet, range.base) || range.prefix < subnet.prefix) {
        throw invalidParameter(`no matching subnet for range ${cfg.IPRange}`);
      }
    }
    return {
      subnet: formatSubnet(subnet),
      gateway: formatIp(gateway),
      ip_range: cfg.IPRange ?? '',
      ipam_given: 1,
      aux_addresses: JSON.stringify(cfg.AuxiliaryAddresses ?? {}),
    };
  }

  async remove(ref: string): Promise<void> {
    const n = this.find(ref);
    if (n.predefined) throw forbidden(`${n.name} is a pre-defined network and cannot be removed`);
    const eps = this.deps.repo.endpointsOfNetwork(n.id);
    if (eps.length) {
      throw forbidden(
        `error while removing network: network ${n.name} has active endpoints (${eps.map((e) => e.container_id.slice(0, 12)).join(', ')})`,
      );
    }
    // The host's side first: a crash in between leaves a record whose bridge is made again at start.
    await this.deps.plumbing.removeNetwork(n);
    this.deps.repo.remove(n.id);
    this.deps.events.publish('network', 'destroy', n.id, { name: n.name, type: n.driver });
  }

  async prune(filters: Filters = {}): Promise<{ NetworksDeleted: string[] | null }> {
    checkFilters(filters, ['label', 'label!', 'until']);
    const until = filters.until?.[0] ? parseUntil(filters.until[0]) : undefined;
    const deleted: string[] = [];
    for (const n of this.deps.repo.list().map(rowToNetwork)) {
      if (n.predefined || this.deps.repo.endpointCount(n.id) > 0) continue;
      if (!matchLabels(filters, n.labels)) continue;
      if ((filters['label!'] ?? []).length && matchAnyLabel(filters['label!']!, n.labels)) continue;
      if (until !== undefined && n.created / 1000 > until) continue;
      try {
        await this.remove(n.id);
        deleted.push(n.name);
      } catch (e) {
        this.log.warn({ err: e, network: n.name }, 'prune could not remove a network');
      }
    }
    return { NetworksDeleted: deleted.length ? deleted : null };
  }
}

function matchAnyLabel(wanted: string[], labels: Record<string, string>): boolean {
  return wanted.some((w) => matchLabels({ label: [w] }, labels));
}

function checkDriver(driver: string): void {
  if (driver === 'bridge') return;
  if (driver === 'host' || driver === 'null') {
    throw forbidden(`only one instance of "${driver}" network is allowed`);
  }
  if (['macvlan', 'ipvlan', 'overlay'].includes(driver)) {
    throw invalidParameter(`the ${driver} network driver is not supported by berth yet`);
  }
  throw notFound(`plugin "${driver}" not found`);
}

/** A Linux interface name: 1-15 bytes, no '/', ':' or whitespace. */
function checkInterfaceName(name: string): void {
  if (!/^[A-Za-z0-9_.-]{1,15}$/.test(name)) {
    throw invalidParameter(`invalid bridge name ${name}: an interface name is 1 to 15 letters, digits, '_', '.', '-'`);
  }
}

function hostRoutes(): Subnet[] {
  try {
    return parseRouteTable(readFileSync('/proc/net/route', 'utf8'));
  } catch {
    return [];
  }
}

/** dockerd's check of AuxiliaryAddresses: each an IPv4 address of the subnet (the gateway's may be among them). */
function checkAuxAddresses(aux: Record<string, string>, subnet: Subnet, subnetText: string): void {
  for (const [name, text] of Object.entries(aux)) {
    const ip = parseIp(text);
    if (ip === null)
      throw invalidParameter(`invalid network config:\ninvalid auxiliary address ${name}: invalid address ${text}`);
    if (!contains(subnet, ip)) {
      throw invalidParameter(
        `invalid network config:\ninvalid auxiliary address ${name}: parent subnet ${subnetText} doesn't contain this address`,
      );
    }
  }
}
