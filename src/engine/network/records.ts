// What the network parts hand one another: a network as inspect shows it (made
// from its row), a container as its networks know it, and its endpoint on one.
// The service, the endpoints and the host's side (plumbing) all sit above it.
import type { EndpointRow, NetworkRow } from '../store/networks.js';
import { macFor, parseIp } from './ipam.js';
import type { PortRequest } from './ports.js';

/** A network with what inspect shows of it. */
export interface Network {
  id: string;
  name: string;
  driver: string;
  predefined: boolean;
  bridge: string;
  subnet: string;
  gateway: string;
  ipRange: string;
  /** The subnet's prefix length (0 on host and none). */
  prefixLen: number;
  /** Whether IPAM.Config came from the user (dockerd shows a predefined network's too). */
  ipamGiven: boolean;
  internal: boolean;
  attachable: boolean;
  labels: Record<string, string>;
  options: Record<string, string>;
  /** IPAM.Options as given: null when none came. */
  ipamOptions: Record<string, string> | null;
  /** IPAM AuxiliaryAddresses: addresses of the subnet never given to a container. */
  auxAddresses: Record<string, string>;
  created: number;
  /** EnableIPv6: the network is dual stack (its IPv6 subnet, gateway and range below). */
  enableIPv6: boolean;
  /** The IPv6 IPAM config ('' when none; kept but unused while IPv6 is off). */
  subnet6: string;
  gateway6: string;
  ipRange6: string;
  /** The IPv6 subnet's prefix length (0 without one). */
  prefixLen6: number;
}

export const rowToNetwork = (r: NetworkRow): Network => ({
  id: r.id,
  name: r.name,
  driver: r.driver,
  predefined: r.predefined === 1,
  bridge: r.bridge,
  subnet: r.subnet,
  gateway: r.gateway,
  ipRange: r.ip_range,
  prefixLen: r.subnet ? Number(r.subnet.split('/')[1]) : 0,
  ipamGiven: r.ipam_given === 1,
  internal: r.internal === 1,
  attachable: r.attachable === 1,
  labels: JSON.parse(r.labels),
  options: JSON.parse(r.options),
  ipamOptions: JSON.parse(r.ipam_options),
  auxAddresses: JSON.parse(r.aux_addresses),
  created: r.created,
  enableIPv6: r.enable_ipv6 === 1,
  subnet6: r.subnet6,
  gateway6: r.gateway6,
  ipRange6: r.ip_range6,
  prefixLen6: r.subnet6 ? Number(r.subnet6.split('/')[1]) : 0,
});

/** What a container tells its networks about itself. */
export interface Member {
  id: string;
  name: string;
  /** Config.Hostname: on a user network it resolves to the container too, as dockerd adds it to the names. */
  hostname?: string;
  /** The container's network namespace while it runs (/proc/<pid>/ns/net). */
  nsPath?: string;
  /** The host ports it publishes (HostConfig.PortBindings, PublishAllPorts). */
  ports?: PortRequest[];
  /** After a berthd restart: its interfaces exist; its ports, rules and names are held again. */
  restoring?: boolean;
}

/** An endpoint with its network, as inspect shows it. */
export interface Endpoint {
  network: Network;
  row: EndpointRow;
  aliases: string[];
  /** A user network's links (EndpointSettings.Links), as given. */
  links: string[];
  /** The names the endpoint answers to on a user network: the container's name, its aliases, its short id. */
  dnsNames: string[];
  /** The MAC was given (EndpointSettings.MacAddress), not derived from the address: inspect shows it before a start. */
  macGiven: boolean;
}

/** The endpoint of a row, on its network, for the container called `name`. */
export function endpointOf(row: EndpointRow, network: Network, name: string): Endpoint {
  const aliases = JSON.parse(row.aliases) as string[];
  return {
    network,
    row,
    aliases,
    links: JSON.parse(row.links) as string[],
    dnsNames: [...(name ? [name] : []), ...aliases, row.container_id.slice(0, 12)],
    macGiven: row.mac !== '' && (row.ip === '' || row.mac !== macFor(parseIp(row.ip)!)),
  };
}
