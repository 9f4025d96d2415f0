// Published ports, as dockerd has them: HostConfig.PortBindings as the API
// gives them (`{"80/tcp":[{"HostIp":"","HostPort":"8080"}]}`; an empty
// HostPort is an ephemeral port, "8000-8010" the first free one of a range),
// PublishAllPorts for the exposed ports that have no binding, and the host
// ports reserved by holding a socket on each (proxy.ts) for as long as the
// container has them. IPv4 only: an empty HostIp is 0.0.0.0 (dockerd would
// add [::] too), an IPv6 one is refused.
import net from 'node:net';
import { invalidParameter, systemError } from '../../errors.js';
import { ANY, type PortRange, PortTable } from './allocator.js';
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
  if (net.isIPv6(text)) {
    throw invalidParameter(`publishing on an IPv6 host address (${text}) is not supported by berth yet: IPv4 only`);
  }
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
  async reserve(key: string, containerIp: string, requests: PortRequest[]): Promise<PortBinding[]> {
    const groups = new Map<string, PortRequest[]>();
    for (const r of [...requests].sort(compareRequests)) {
      groups.set(groupId(r), [...(groups.get(groupId(r)) ?? []), r]);
    }
    const made: Reservation[] = [];
    try {
      for (const group of groups.values()) made.push(...(await this.reserveGroup(group, containerIp)));
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
  private async reserveGroup(group: PortRequest[], containerIp: string): Promise<Reservation[]> {
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
        return await this.holdAll(group, port, containerIp);
      } catch (e) {
        this.table.free(proto, addrs, port);
        lastError = e;
      }
    }
    throw lastError;
  }

  /** Holds `port` on each address of the group, all or none. */
  private async holdAll(group: PortRequest[], port: number, containerIp: string): Promise<Reservation[]> {
    const made: Reservation[] = [];
    try {
      for (const r of group) {
        const target = this.proxy ? { host: containerIp, port: r.containerPort } : null;
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

/** The firewall's port mappings for bindings made for a container at `containerIp`. */
export const mappingsOf = (key: string, containerIp: string, bindings: PortBinding[]): PortMapping[] =>
  bindings.map((b) => ({ key, containerIp, ...b }));
