// Names on user networks, as dockerd's embedded DNS gives them: a container
// resolves the others on its networks by name, alias and short id, and any
// other name is forwarded to the host's resolvers. aardvark-dns answers
// (aardvark.ts runs it); this file keeps the records and writes its files.
//
// File format (aardvark-dns 1.4.0, src/config/mod.rs; netavark's
// src/dns/aardvark.rs writes the same), one file per network, named by it:
//   <gateway ip>[,<more>][ <network dns servers>]
//   <container id> <ipv4s,> <ipv6s,> <names,>[ <dns servers,>]
// Fields are split on single spaces and lists on commas; an empty field is
// an empty list. A line it cannot parse ends the daemon for every network,
// so everything written here is checked first.
//
// Every change goes through one queue: files are rewritten (a temporary file
// renamed over, so the daemon never reads half of one) and the daemon reloaded
// once for all the changes that arrived meanwhile. A change's promise resolves
// when the daemon answers with it.
import { isIP, isIPv4, isIPv6 } from 'node:net';
import { mkdir, readdir, rename, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { invalidParameter } from '../../errors.js';
import type { Logger } from '../../log.js';
import { Aardvark, PID_FILE } from './aardvark.js';

export interface DnsEntry {
  /** The container's full id. */
  containerId: string;
  /** Its address on this network. */
  ipv4: string;
  /** Its IPv6 address on a dual-stack network: aardvark-dns answers AAAA queries with it. */
  ipv6?: string;
  /** What resolves to it on this network: name, aliases, short id (dockerd's DNSNames). */
  names: string[];
  /** Upstream servers for this container's other names (HostConfig.Dns), instead of the host's. */
  dnsServers?: string[];
  /**
   * Its links on this network (EndpointSettings.Links): `alias` resolves, for
   * this container only, to the container on the network that answers to `target`.
   */
  links?: { target: string; alias: string }[];
}

export interface DnsNetwork {
  /** The file's name: the network's id is best (a name could be `aardvark.pid`). */
  name: string;
  /** The bridge's address, where aardvark-dns listens for this network. */
  gatewayIp: string;
  entries: DnsEntry[];
}

export interface DnsOptions {
  /** The network files' directory, under berthd's exec root (`/run/berth/dns`). */
  configDir: string;
  /** The aardvark-dns executable (Debian: /usr/lib/podman/aardvark-dns). */
  binary: string;
  logger: Logger;
  /** Run aardvark-dns in this named network namespace (tests). */
  netns?: string;
  /** Default 53. */
  port?: number;
  /** How long a start or reload may take to bind its sockets; default 5 s. */
  readyTimeoutMs?: number;
}

interface NetworkRecords {
  gatewayIp: string;
  entries: Map<string, DnsEntry>;
}

interface Waiter {
  resolve: () => void;
  reject: (e: unknown) => void;
}

export class Dns {
  private readonly networks = new Map<string, NetworkRecords>();
  private readonly dirty = new Set<string>();
  /** The gateway of each network file in the directory, as last written. */
  private readonly written = new Map<string, string>();
  private waiters: Waiter[] = [];
  private flushing = false;
  /** Apply even with no file to write: reconcile() has the daemon started, adopted or stopped. */
  private resync = false;
  private readonly configDir: string;
  private readonly stagingDir: string;
  private readonly aardvark: Aardvark;
  private readonly log: Logger;

  constructor(o: DnsOptions) {
    this.configDir = path.resolve(o.configDir);
    // Outside the directory: the daemon would read (and choke on) a file being written.
    this.stagingDir = `${this.configDir}.staging`;
    this.log = o.logger;
    this.aardvark = new Aardvark({
      configDir: this.configDir,
      binary: o.binary,
      logger: o.logger,
      port: o.port ?? 53,
      netns: o.netns,
      readyTimeoutMs: o.readyTimeoutMs ?? 5000,
    });
  }

  /** aardvark-dns's pid while it runs. */
  get pid(): number | null {
    return this.aardvark.running;
  }

  /** A network's records, all of them (replacing what it had). */
  async setNetwork(name: string, gatewayIp: string, entries: DnsEntry[]): Promise<void> {
    this.networks.set(name, checkedNetwork({ name, gatewayIp, entries }));
    return this.commit([name]);
  }

  /** One container's records on a network (replacing its former ones); the network's first makes it known. */
  async addEntry(network: string, gatewayIp: string, entry: DnsEntry): Promise<void> {
    checkedNetwork({ name: network, gatewayIp, entries: [entry] });
    const records = this.networks.get(network) ?? { gatewayIp, entries: new Map() };
    records.gatewayIp = gatewayIp;
    records.entries.set(entry.containerId, copied(entry));
    this.networks.set(network, records);
    return this.commit([network]);
  }

  /** Drops a container's records; nothing when it has none. */
  removeEntry(network: string, containerId: string): Promise<void> {
    const changed = this.networks.get(network)?.entries.delete(containerId) ?? false;
    return this.commit(changed ? [network] : []);
  }

  /** Drops a network's records. The daemon stops when no network has a container left. */
  removeNetwork(name: string): Promise<void> {
    return this.commit(this.networks.delete(name) ? [name] : []);
  }

  /**
   * All records, from berthd's state at its start: the files are rewritten,
   * others removed, and the daemon a former berthd left running is adopted
   * (or started, or stopped when there is no network).
   */
  async reconcile(networks: DnsNetwork[]): Promise<void> {
    const checked = networks.map((n) => [n.name, checkedNetwork(n)] as const);
    const onDisk = await readdir(this.configDir).catch(() => []);
    await rm(this.stagingDir, { recursive: true, force: true });
    this.networks.clear();
    for (const [name, records] of checked) this.networks.set(name, records);
    this.resync = true;
    return this.commit([...onDisk.filter((f) => f !== PID_FILE), ...this.networks.keys()]);
  }

  private commit(names: string[]): Promise<void> {
    for (const n of names) this.dirty.add(n);
    return new Promise((resolve, reject) => {
      this.waiters.push({ resolve, reject });
      if (!this.flushing) void this.drain();
    });
  }

  /** Applies the changes in batches: each batch waits for the one before it. */
  private async drain(): Promise<void> {
    this.flushing = true;
    while (this.waiters.length > 0) {
      const batch = this.waiters;
      this.waiters = [];
      const names = [...this.dirty];
      const resync = this.resync;
      this.dirty.clear();
      this.resync = false;
      try {
        if (names.length > 0 || resync) await this.apply(names);
        for (const w of batch) w.resolve();
      } catch (e) {
        this.log.warn({ err: e, networks: names }, 'DNS records not applied');
        for (const w of batch) w.reject(e);
      }
    }
    this.flushing = false;
  }

  private async apply(names: string[]): Promise<void> {
    const started = performance.now();
    await this.writeFiles(names);
    // What the files say, not the records: a change that came in meanwhile is in
    // the records but not yet on disk, and the daemon cannot listen for a network
    // before its file is written (the next batch writes it).
    const all = [...new Set(this.written.values())];
    if (all.length === 0) {
      await this.aardvark.stop();
    } else {
      const changed = names.flatMap((n) => this.written.get(n) ?? []);
      await this.aardvark.refresh(all, changed);
    }
    this.log.debug({ networks: names, ms: Math.round(performance.now() - started) }, 'DNS records applied');
  }

  /** A network's records when it has a file: one with no container has none (as netavark leaves it). */
  private served(name: string): NetworkRecords | undefined {
    const records = this.networks.get(name);
    return records && hasEntries(records) ? records : undefined;
  }

  /** Each named network's file (and its links files) as the records say, or none. One that fails is retried at the next change. */
  private async writeFiles(names: string[]): Promise<void> {
    await mkdir(this.configDir, { recursive: true });
    await mkdir(this.stagingDir, { recursive: true });
    const onDisk = await readdir(this.configDir);
    for (const name of names) {
      // A links file goes with its network's: written, kept or removed with it.
      const owner = linksOwner(name);
      if (owner !== null && this.served(owner)) continue;
      const records = this.served(name);
      try {
        const links = records ? linksFiles(name, records) : [];
        const keep = new Set([...(records ? [name] : []), ...links.map(([f]) => f)]);
        for (const f of onDisk.filter((f) => (f === name || linksOwner(f) === name) && !keep.has(f))) {
          await rm(path.join(this.configDir, f), { recursive: true, force: true });
          this.written.delete(f);
        }
        if (!records) {
          this.written.delete(name);
          continue;
        }
        for (const [f, text] of links) await this.place(f, text);
        // The network's own file last: the daemon is waited for on its gateway only.
        await this.place(name, networkFile(records));
        this.written.set(name, records.gatewayIp);
      } catch (e) {
        this.dirty.add(name);
        throw e;
      }
    }
  }

  /** A file written whole: staged, then renamed over (the daemon never reads half of one). */
  private async place(file: string, text: string): Promise<void> {
    const staged = path.join(this.stagingDir, file);
    await writeFile(staged, text);
    await rename(staged, path.join(this.configDir, file));
  }
}

/**
 * Link aliases, for the linking container alone (dockerd's embedded DNS gives a
 * link's alias to the linker only). aardvark-dns 1.4 has no per-requester name;
 * it answers a requester from the files whose entries list its address
 * (membership is by address, whatever the entry's id). So each link of a
 * linker to a container of the network gets a file
 * `<network>.links.<linker id>.<linked id>`: the linker under its names, the
 * linked container under the alias. Their ids are made up, so no real
 * container's other addresses join. The linked container's address is listed,
 * so it resolves its own alias (dockerd's would not); one file per link keeps
 * it from the linker's other aliases. Every entry repeats its container's
 * upstream servers: the daemon keeps one list per address, the last file
 * read's.
 *
 * The file's first line, where aardvark-dns would listen, is an address no
 * host holds (TEST-NET-1, RFC 5737): its listener fails to bind and is skipped,
 * so the file never serves. A listener serving it would answer any container's
 * failed lookup from the file's names (aardvark's fallback to the listener's
 * network), and if it took the network's gateway it would race the network's
 * own listener for it.
 */
const LINKS = '.links.';
const LINKS_BIND = '192.0.2.1';
const linksOwner = (file: string): string | null => (file.includes(LINKS) ? file.slice(0, file.indexOf(LINKS)) : null);

function linksFiles(network: string, records: NetworkRecords): [string, string][] {
  const out: [string, string][] = [];
  const entries = [...records.entries.values()];
  for (const e of entries) {
    const aliases = new Map<DnsEntry, string[]>();
    for (const { target, alias } of e.links ?? []) {
      const peer = entries.find(
        (p) => p !== e && (p.names.includes(target) || (target.length >= 12 && p.containerId.startsWith(target))),
      );
      if (peer) aliases.set(peer, [...(aliases.get(peer) ?? []), alias]);
    }
    for (const [peer, names] of aliases) {
      const lines = [
        LINKS_BIND,
        entryLine({ ...e, containerId: `${e.containerId}-linker` }),
        entryLine({ ...peer, containerId: `${e.containerId}-${peer.containerId}`, names }),
      ];
      out.push([`${network}${LINKS}${e.containerId}.${peer.containerId}`, `${lines.join('\n')}\n`]);
    }
  }
  return out;
}

const hasEntries = (r: NetworkRecords) => r.entries.size > 0;

/** A network's file: its gateway, then a line per container. */
function networkFile(records: NetworkRecords): string {
  const lines = [records.gatewayIp];
  for (const e of records.entries.values()) lines.push(entryLine(e));
  return `${lines.join('\n')}\n`;
}

/** A container's line: its id, addresses and names, and its own upstream servers. */
function entryLine(e: DnsEntry): string {
  const servers = e.dnsServers?.length ? ` ${e.dnsServers.join(',')}` : '';
  return `${e.containerId} ${e.ipv4} ${e.ipv6 ?? ''} ${[...new Set(e.names)].join(',')}${servers}`;
}

/** One field of a line: neither the field separator (a space), the list one (a comma) nor a line end. */
const FIELD = /^[^\s,]+$/;

/** What may name a file in the directory (dockerd's network names are a subset). */
const FILE_NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]*$/;

function checkedNetwork(n: DnsNetwork): NetworkRecords {
  if (!FILE_NAME.test(n.name) || n.name === PID_FILE) {
    throw invalidParameter(`invalid network name for DNS records: "${n.name}"`);
  }
  if (!isIP(n.gatewayIp)) throw invalidParameter(`invalid gateway address for DNS: "${n.gatewayIp}"`);
  for (const e of n.entries) checkEntry(e);
  return { gatewayIp: n.gatewayIp, entries: new Map(n.entries.map((e) => [e.containerId, copied(e)])) };
}

/** The caller's entry as it is now: a later change to its arrays is not a change of the records. */
const copied = (e: DnsEntry): DnsEntry => ({
  ...e,
  names: [...e.names],
  dnsServers: e.dnsServers && [...e.dnsServers],
  links: e.links?.map((l) => ({ ...l })),
});

function checkEntry(e: DnsEntry): void {
  if (!FIELD.test(e.containerId)) throw invalidParameter(`invalid container id for DNS: "${e.containerId}"`);
  if (!isIPv4(e.ipv4)) throw invalidParameter(`invalid IPv4 address for DNS: "${e.ipv4}"`);
  if (e.ipv6 !== undefined && !isIPv6(e.ipv6)) throw invalidParameter(`invalid IPv6 address for DNS: "${e.ipv6}"`);
  if (e.names.length === 0) throw invalidParameter(`no DNS name for container ${e.containerId}`);
  for (const name of e.names) {
    if (!FIELD.test(name)) throw invalidParameter(`invalid DNS name "${name}": no spaces or commas`);
  }
  for (const { target, alias } of e.links ?? []) {
    if (!FIELD.test(target) || !FIELD.test(alias)) throw invalidParameter(`invalid link for DNS: "${target}:${alias}"`);
  }
  for (const s of e.dnsServers ?? []) {
    if (!isIP(s)) throw invalidParameter(`invalid DNS server address: "${s}"`);
  }
}
