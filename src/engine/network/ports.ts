// Published ports, as dockerd has them: HostConfig.PortBindings as the API
// gives them (`{"80/tcp":[{"HostIp":"","HostPort":"8080"}]}`; an empty
// HostPort is an ephemeral port, "8000-8010" the first free one of a range),
// PublishAllPorts for the exposed ports that have no binding, and the host
// ports reserved by holding a socket on each (proxy.ts) for as long as the
// container has them. An empty HostIp is 0.0.0.0, and :: too for a container
// with an IPv6 address (dual-stack network); an IPv6 HostIp is bound as given,
// and reaches the container's IPv6 address, or through the userland proxy its
// IPv4 one when it has none (dockerd 27 does the same).
import net from 'node:net';
import { invalidParameter, systemError } from '../../errors.js';
import { ANY, ANY6, type PortRange, PortTable } from './allocator.js';
import { canonicalIp6 } from './ipv6.js';
import { type Held, hold } from './proxy.js';
import { PROTOS, type PortMapping, type Proto } from './rules.js';

/** One binding asked for: a container port and where on the host. */
export interface PortRequest {
  proto: Proto;
  containerPort: number;
  /** 0.0.0.0 or one IPv4 address. */
  hostIp: string;
  /** A port, the first of a range, or 0 (with hostPortEnd 0) for an ephemeral one. */
  hostPort: number;
  hostPortEnd: number;
}

/** A binding made: the host port chosen and held. */
export interface PortBinding {
  proto: Proto;
  containerPort: number;
  hostIp: string;
  hostPort: number;
}

/** HostConfig.PortBindings as the API has it. */
export type PortBindingsInput = Record<string, { HostIp?: string | null; HostPort?: string | null }[] | null> | null;

const invalidSpec = (text: string) => invalidParameter(`invalid port specification: ${JSON.stringify(text)}`);

const number = (text: string): number | null => (/^\d{1,5}$/.test(text) && Number(text) <= 65535 ? Number(text) : null);

/** `80/tcp`, `80` (tcp), `53/UDP` → port and protocol. */
function parseContainerPort(key: string): { proto: Proto; port: number } {
  const [portText = '', protoText = ''] = key.split('/', 2);
  const port = number(portText);
  if (!port) throw invalidSpec(portText);
  const proto = (protoText || 'tcp').toLowerCase() as Proto;
  if (!PROTOS.includes(proto)) {
    throw invalidParameter(`invalid port specification: ${JSON.stringify(key)}: the protocol must be tcp, udp or sctp`);
  }
  return { proto, port };
}

/** `""` → ephemeral; `8080`; `8000-8010` (start ≤ end). */
function parseHostPort(text: string): [number, number] {
  if (text === '') return [0, 0];
  const [a = '', b] = text.split('-', 2);
  const start = number(a);
  const end = b === undefined ? start : number(b);
  if (start === null || end === null || end < start || (start === 0 && end !== 0)) throw invalidSpec(text);
  return [start, end];
}

function parseHostIp(text: string): string {
  if (text === '') return ANY;
  const unmapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(text)?.[1] ?? text;
  if (net.isIPv4(unmapped)) return unmapped;
  const v6 = canonicalIp6(text.replace(/^\[(.*)\]$/, '$1'));
  if (v6) return v6;
  throw invalidParameter(`invalid IP address in port binding: ${JSON.stringify(text)}`);
}

const requestId = (r: PortRequest) => `${r.proto}/${r.containerPort} ${r.hostIp}:${r.hostPort}-${r.hostPortEnd}`;

/** Bindings that differ only in host address get the same host port (dockerd's needSamePort). */
const groupId = (r: PortRequest) => `${r.proto}/${r.containerPort} ${r.hostPort}-${r.hostPortEnd}`;

function compareRequests(a: PortRequest, b: PortRequest): number {
  return (
    PROTOS.indexOf(a.proto) - PROTOS.indexOf(b.proto) ||
    a.containerPort - b.containerPort ||
    a.hostPort - b.hostPort ||
    a.hostPortEnd - b.hostPortEnd ||
    (a.hostIp < b.hostIp ? -1 : a.hostIp > b.hostIp ? 1 : 0)
  );
}

/**
 * The bindings a container asks for: PortBindings, plus with PublishAllPorts an
 * ephemeral port on 0.0.0.0 for each exposed port (ExposedPorts' keys) that has
 * no binding. Throws dockerd's "invalid port specification" for a bad key or HostPort.
 */
export function parsePortBindings(
  bindings: PortBindingsInput | undefined,
  exposed?: Record<string, unknown> | null,
  publishAll = false,
): PortRequest[] {
  const requests = new Map<string, PortRequest>();
  const add = (r: PortRequest) => requests.set(requestId(r), r);
  const bound = new Set<string>();
  for (const [key, list] of Object.entries(bindings ?? {})) {
    const { proto, port } = parseContainerPort(key);
    for (const b of list ?? []) {
      const [hostPort, hostPortEnd] = parseHostPort(b.HostPort ?? '');
      add({ proto, containerPort: port, hostIp: parseHostIp(b.HostIp ?? ''), hostPort, hostPortEnd });
      bound.add(`${proto}/${port}`);
    }
  }
  if (publishAll) {
    for (const key of Object.keys(exposed ?? {})) {
      const { proto, port } = parseContainerPort(key);
      if (!bound.has(`${proto}/${port}`)) add({ proto, containerPort: port, hostIp: ANY, hostPort: 0, hostPortEnd: 0 });
    }
  }
  return [...requests.values()].sort(compareRequests);
}

/** Go's words for the errors a bind meets (dockerd's messages end with them). */
const SYSCALL_TEXT: Record<string, string> = {
  EADDRINUSE: 'address already in use',
  EADDRNOTAVAIL: 'cannot assign requested address',
  EACCES: 'permission denied',
};

const bindFailed = (proto: Proto, addr: string, port: number, e: unknown) => {
  const code = (e as { code?: string }).code ?? '';
  return systemError(
    `failed to bind host port ${addr}:${port}/${proto}: ${SYSCALL_TEXT[code] ?? (e as Error).message}`,
    e,
  );
};

const alreadyAllocated = (addr: string, port: number) =>
  systemError(`Bind for ${addr}:${port} failed: port is already allocated`);

/** dockerd tries this many ports of a range before giving up on ports other processes hold. */
const MAX_ATTEMPTS = 10;

interface Reservation {
  binding: PortBinding;
  held: Held;
}

export interface HostPortsOptions {
  /** The ephemeral range (default: the kernel's ip_local_port_range). */
  ephemeral?: PortRange;
  /** Ports the ephemeral search skips (default: the kernel's ip_local_reserved_ports). */
  reserved?: Set<number>;
  /** dockerd's userland-proxy (default true): a held TCP port pipes what reaches it to the container. */
  proxy?: boolean;
}

/** The host ports berthd holds, by key (a container's id). */
export class HostPorts {
  private readonly table: PortTable;
  private readonly byKey = new Map<string, Reservation[]>();
  private readonly proxy: boolean;

  constructor(o: HostPortsOptions = {}) {
    this.table = new PortTable(o.ephemeral, o.reserved);
    this.proxy = o.proxy ?? true;
  }

  /**
   * Chooses and holds the host ports of `requests` for `key`, each TCP one
   * proxying to `containerIp` (unless the proxy is off). All or nothing: on an error, what this call
   * held is released. Throws dockerd's "Bind for 0.0.0.0:8080 failed: port is
   * already allocated" for a port berth has handed out, and "failed to bind
   * host port 0.0.0.0:8080/tcp: address already in use" for one another
   * process holds.
   */
  async reserve(key: string, to: string | ContainerAddresses, requests: PortRequest[]): Promise<PortBinding[]> {
    const container = typeof to === 'string' ? { ipv4: to } : to;
    const groups = new Map<string, PortRequest[]>();
    for (const r of [...requests].sort(compareRequests)) {
      groups.set(groupId(r), [...(groups.get(groupId(r)) ?? []), r]);
    }
    const made: Reservation[] = [];
    try {
      for (const group of groups.values()) made.push(...(await this.reserveGroup(group, container)));
    } catch (e) {
      await this.releaseAll(made);
      throw e;
    }
    this.byKey.set(key, [...(this.byKey.get(key) ?? []), ...made]);
    return made.map((r) => r.binding);
  }

  /** The bindings held for a key. */
  bindings(key: string): PortBinding[] {
    return (this.byKey.get(key) ?? []).map((r) => r.binding);
  }

  /** Frees a key's ports (their sockets closed, proxied connections dropped). */
  async release(key: string): Promise<void> {
    const held = this.byKey.get(key) ?? [];
    this.byKey.delete(key);
    await this.releaseAll(held);
  }

  /** Frees every port berthd holds (shutdown). */
  async close(): Promise<void> {
    await Promise.all([...this.byKey.keys()].map((k) => this.release(k)));
  }

  /** Bindings that share a container port and host port spec: one port, held on each address. */
  private async reserveGroup(group: PortRequest[], container: ContainerAddresses): Promise<Reservation[]> {
    const { proto, hostPort, hostPortEnd } = group[0]!;
    const addrs = group.map((r) => r.hostIp);
    const fixed = hostPort !== 0 && hostPort === hostPortEnd;
    const range = hostPort === 0 ? null : { start: hostPort, end: hostPortEnd };
    let lastError: unknown;
    for (let attempt = 0; attempt < (fixed ? 1 : MAX_ATTEMPTS); attempt++) {
      const port = fixed ? hostPort : this.table.next(proto, addrs, range);
      if (port === null) throw systemError('all ports are allocated');
      if (fixed) {
        const holder = addrs.map((a) => this.table.holder(proto, a, port)).find((h) => h !== null);
        if (holder) throw alreadyAllocated(holder, port);
      }
      this.table.take(proto, addrs, port);
      try {
        return await this.holdAll(group, port, container);
      } catch (e) {
        this.table.free(proto, addrs, port);
        lastError = e;
      }
    }
    throw lastError;
  }

  /** Holds `port` on each address of the group, all or none. */
  private async holdAll(group: PortRequest[], port: number, container: ContainerAddresses): Promise<Reservation[]> {
    const made: Reservation[] = [];
    try {
      for (const r of group) {
        const target = this.proxy ? { host: targetOf(r.hostIp, container), port: r.containerPort } : null;
        const held = await hold(r.proto, r.hostIp, port, target).catch((e: unknown) => {
          throw bindFailed(r.proto, r.hostIp, port, e);
        });
        made.push({
          held,
          binding: { proto: r.proto, containerPort: r.containerPort, hostIp: r.hostIp, hostPort: port },
        });
      }
      return made;
    } catch (e) {
      await Promise.all(made.map((m) => m.held.close()));
      throw e;
    }
  }

  private async releaseAll(reservations: Reservation[]): Promise<void> {
    await Promise.all(reservations.map((r) => r.held.close()));
    for (const { binding: b } of reservations) this.table.free(b.proto, [b.hostIp], b.hostPort);
  }
}

/** A container's addresses on the network it publishes through: IPv4, and IPv6 on a dual-stack one. */
export interface ContainerAddresses {
  ipv4: string;
  ipv6?: string;
}

/** The address a host address's traffic goes to: the container's of the same family, else its IPv4 one. */
export const targetOf = (hostIp: string, c: ContainerAddresses): string =>
  hostIp.includes(':') && c.ipv6 ? c.ipv6 : c.ipv4;

/** With an IPv6 address, each binding on 0.0.0.0 is on :: too, as dockerd binds both. */
export function dualStack(requests: PortRequest[], c: ContainerAddresses): PortRequest[] {
  if (!c.ipv6) return requests;
  const out = new Map(requests.map((r) => [requestId(r), r]));
  for (const r of requests.filter((x) => x.hostIp === ANY)) {
    const v6 = { ...r, hostIp: ANY6 };
    out.set(requestId(v6), v6);
  }
  return [...out.values()].sort(compareRequests);
}

/** The (iptables) port mappings of a container's bindings on IPv4 host addresses, to its IPv4 address. */
export const mappingsOf = (key: string, containerIp: string, bindings: PortBinding[]): PortMapping[] =>
  bindings.filter((b) => !b.hostIp.includes(':')).map((b) => ({ key, containerIp, ...b }));

/**
 * The ip6tables port mappings of its bindings on IPv6 host addresses, to its
 * IPv6 address; none without one (the userland proxy alone then carries them
 * to its IPv4 address).
 */
export const mappings6Of = (key: string, containerIp6: string, bindings: PortBinding[]): PortMapping[] =>
  containerIp6
    ? bindings.filter((b) => b.hostIp.includes(':')).map((b) => ({ key, containerIp: containerIp6, ...b }))
    : [];
