// SQL for networks and their endpoints, for the network service.
import type { Db } from './db.js';
import { preparedOnUse } from './statements.js';

export interface NetworkRow {
  id: string;
  name: string;
  driver: string;
  predefined: number;
  bridge: string;
  subnet: string;
  gateway: string;
  ip_range: string;
  ipam_given: number;
  internal: number;
  attachable: number;
  labels: string;
  options: string;
  ipam_options: string;
  aux_addresses: string;
  created: number;
  enable_ipv6: number;
  /** The IPv6 subnet, gateway and range ('' when none). */
  subnet6: string;
  gateway6: string;
  ip_range6: string;
}

export interface EndpointRow {
  id: string;
  network_id: string;
  container_id: string;
  ip: string;
  mac: string;
  static_ip: number;
  aliases: string;
  links: string;
  /** IPAMConfig.LinkLocalIPs, a JSON list. */
  link_local_ips: string;
  seq: number;
  /** The IPv6 address ('' on a network without IPv6). */
  ip6: string;
  static_ip6: number;
}

// `column = +?`: see db.ts ("A value bound for a column").
const statements = (db: Db) =>
  preparedOnUse(db, {
    all: 'SELECT * FROM networks ORDER BY created',
    byId: 'SELECT * FROM networks WHERE id = ?',
    byName: 'SELECT * FROM networks WHERE name = ?',
    byPrefix: "SELECT * FROM networks WHERE id >= ? AND id < ? || 'g' LIMIT 2",
    insert: `INSERT INTO networks (id, name, driver, predefined, bridge, subnet, gateway, ip_range, ipam_given, internal,
       attachable, labels, options, ipam_options, aux_addresses, created, enable_ipv6, subnet6, gateway6, ip_range6)
     VALUES (@id, @name, @driver, @predefined, @bridge, @subnet, @gateway, @ip_range, @ipam_given, @internal,
       @attachable, @labels, @options, @ipam_options, @aux_addresses, @created, @enable_ipv6, @subnet6, @gateway6,
       @ip_range6)`,
    remove: 'DELETE FROM networks WHERE id = ?',
    endpointsOfNetwork: 'SELECT * FROM endpoints WHERE network_id = +? ORDER BY seq',
    endpointsOfContainer: 'SELECT * FROM endpoints WHERE container_id = +? ORDER BY seq',
    endpointsOfContainers:
      'SELECT * FROM endpoints WHERE container_id IN (SELECT value FROM json_each(?)) ORDER BY seq',
    linkersNear: `SELECT DISTINCT other.container_id FROM endpoints mine JOIN endpoints other ON other.network_id = mine.network_id
     WHERE mine.container_id = +? AND other.container_id != mine.container_id AND other.links != '[]'`,
    allEndpoints: 'SELECT * FROM endpoints ORDER BY seq',
    endpointCount: 'SELECT count(*) AS n FROM endpoints WHERE network_id = +?',
    nextSeq: 'SELECT coalesce(max(seq), 0) + 1 AS n FROM endpoints',
    insertEndpoint: `INSERT INTO endpoints (id, network_id, container_id, ip, mac, static_ip, aliases, links, link_local_ips, seq,
       ip6, static_ip6)
     VALUES (@id, @network_id, @container_id, @ip, @mac, @static_ip, @aliases, @links, @link_local_ips, @seq,
       @ip6, @static_ip6)`,
    removeEndpoint: 'DELETE FROM endpoints WHERE network_id = ? AND container_id = ?',
    published: 'SELECT bindings FROM published_ports WHERE container_id = ?',
    publishedOf:
      'SELECT container_id, bindings FROM published_ports WHERE container_id IN (SELECT value FROM json_each(?))',
    setPublished: 'INSERT OR REPLACE INTO published_ports (container_id, bindings) VALUES (?, ?)',
    clearPublished: 'DELETE FROM published_ports WHERE container_id = ?',
  });

export class NetworkRepository {
  private readonly q: ReturnType<typeof statements>;
  /**
   * Network rows by id, as read. A row is only ever inserted or deleted, never changed, so a
   * container's inspect or a list does not read its networks again. A row read inside a
   * transaction is not kept: the transaction may yet roll back what it inserted.
   */
  private readonly rows = new Map<string, NetworkRow>();

  constructor(private readonly db: Db) {
    this.q = statements(db);
  }

  list(): NetworkRow[] {
    return this.q.all.all() as NetworkRow[];
  }

  find(id: string): NetworkRow | undefined {
    const kept = this.rows.get(id);
    if (kept) return kept;
    const row = this.q.byId.get(id) as NetworkRow | undefined;
    if (row && !this.db.inTransaction) this.rows.set(id, row);
    return row;
  }

  findByName(name: string): NetworkRow | undefined {
    return this.q.byName.get(name) as NetworkRow | undefined;
  }

  findByPrefix(prefix: string): NetworkRow[] {
    return this.q.byPrefix.all(prefix, prefix) as NetworkRow[];
  }

  /** Inserts a network; a taken name surfaces as SQLite's UNIQUE error. */
  insert(row: NetworkRow): void {
    this.q.insert.run(row);
  }

  remove(id: string): void {
    this.rows.delete(id);
    this.q.remove.run(id);
  }

  endpointsOfNetwork(networkId: string): EndpointRow[] {
    return this.q.endpointsOfNetwork.all(networkId) as EndpointRow[];
  }

  /** The other containers with links on a network this one is on. */
  linkersNear(containerId: string): string[] {
    return (this.q.linkersNear.all(containerId) as { container_id: string }[]).map((r) => r.container_id);
  }

  endpointsOfContainer(containerId: string): EndpointRow[] {
    return this.q.endpointsOfContainer.all(containerId) as EndpointRow[];
  }

  /** The endpoints of these containers, each one's in connection order (a list's one query for all). */
  endpointsOfContainers(containerIds: string[]): EndpointRow[] {
    return this.q.endpointsOfContainers.all(JSON.stringify(containerIds)) as EndpointRow[];
  }

  allEndpoints(): EndpointRow[] {
    return this.q.allEndpoints.all() as EndpointRow[];
  }

  endpointCount(networkId: string): number {
    return (this.q.endpointCount.get(networkId) as { n: number }).n;
  }

  /**
   * Inserts endpoints in one transaction, each given its connection order; an
   * address already taken on the network surfaces as SQLite's UNIQUE error.
   */
  insertEndpoints(rows: Omit<EndpointRow, 'seq'>[]): void {
    this.db.transaction(() => {
      for (const row of rows) {
        const seq = (this.q.nextSeq.get() as { n: number }).n;
        this.q.insertEndpoint.run({ ...row, seq });
      }
    })();
  }

  removeEndpoint(networkId: string, containerId: string): void {
    this.q.removeEndpoint.run(networkId, containerId);
  }

  /** The host ports the container publishes (JSON as stored), null when none. */
  published(containerId: string): string | null {
    return (this.q.published.get(containerId) as { bindings: string } | undefined)?.bindings ?? null;
  }
  /** The published bindings (JSON) of those of these containers that have some. */
  publishedOf(containerIds: string[]): Map<string, string> {
    const rows = this.q.publishedOf.all(JSON.stringify(containerIds)) as { container_id: string; bindings: string }[];
    return new Map(rows.map((r) => [r.container_id, r.bindings]));
  }

  setPublished(containerId: string, bindings: string): void {
    this.q.setPublished.run(containerId, bindings);
  }

  clearPublished(containerId: string): void {
    this.q.clearPublished.run(containerId);
  }
}
