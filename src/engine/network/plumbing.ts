// The host's side of networks, as the network service tells it: bridges and
// their firewall rules for each network; a veth, an address, routes, published
// ports and DNS names for each running container's endpoint. It keeps no
// state of its own that the database does not: init() is given everything.
import type { PortBinding, PortRequest } from './ports.js';
import type { Endpoint, Member, Network } from './records.js';

export interface Attachment {
  member: Member;
  endpoint: Endpoint;
  /** The interface's name inside the container (eth0 for its first network). */
  ifName: string;
  /** The container's first network: its gateway is the default route. */
  first: boolean;
  /** The host ports to publish through this endpoint (the container's first bridge network). */
  publish?: PortRequest[];
  /** Told the host ports chosen, once held. */
  published?: (bindings: PortBinding[]) => void;
  /** The endpoint's names were given already (addNames): attach makes the links and ports only. */
  named?: boolean;
}

export interface Plumbing {
  /** At daemon start: every bridge network's bridge and rules made to match the records. */
  init(networks: Network[]): Promise<void>;
  /** The IPv4 addresses (CIDRs) the bridge `name` has on the host now; none when there is no such bridge. */
  bridgeAddresses(name: string): Promise<string[]>;
  addNetwork(n: Network): Promise<void>;
  removeNetwork(n: Network): Promise<void>;
  attach(a: Attachment): Promise<void>;
  /**
   * The endpoint's names on its network's DNS (none on a network without
   * names), before its links exist: a start asks for them first, so that the
   * DNS server's reload overlaps the runtime's work.
   */
  addNames(member: Member, endpoint: Endpoint): Promise<void>;
  /** Takes them back (detach does too); nothing when there are none. */
  removeNames(member: Member, endpoint: Endpoint): Promise<void>;
  detach(a: Attachment): Promise<void>;
  /** berthd stops: the ports it holds are let go (the firewall's rules stay for the next start). */
  close(): Promise<void>;
}
