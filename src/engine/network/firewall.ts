// berth's firewall: the iptables rules that give bridge networks outbound
// NAT, isolation and published ports, as dockerd's bridge driver makes them
// (rules.ts has the rules and why). One Firewall per family: iptables for
// IPv4, ip6tables for the IPv6 side of dual-stack networks.
//
// The state is given, not asked: the caller says which networks and port
// mappings exist, and every change rewrites all of berth's chains in one
// iptables-restore. Reconciling after a restart is the same operation as any
// change, and rules left by a crashed daemon are replaced, not added to.
// Changes that arrive while a write is under way are coalesced into the next
// write; each caller's promise settles once a write that holds its change is
// in (or has failed: the state stays as asked, and the next change writes it
// again). An invalid change is refused before it changes anything.
//
// Only berth's chains (named from the prefix, one per daemon) and the jumps
// into them are ever touched; rules of other programs stay as they are.
import { invalidParameter } from '../../errors.js';
import type { Logger } from '../../log.js';
import { type Iptables, iptables } from './iptables.js';
import { inSubnet, isUnspecified, ipv4Number, parseSubnet } from './ipv4.js';
import { canonicalIp6, contains6, formatSubnet6, parseIp6, userSubnet6 } from './ipv6.js';
import {
  type Chains,
  chainsOf,
  type Family,
  type FirewallNetwork,
  initText,
  MAX_PREFIX,
  networkOf,
  parseSave,
  PROTOS,
  type PortMapping,
  type RuleNetwork,
  type RuleSubnet,
  renderState,
  savedLines,
  teardownText,
} from './rules.js';

export type { FirewallNetwork, PortMapping, Proto } from './rules.js';

export interface FirewallOptions {
  /** Names the chains: `BERTH` → BERTH-FORWARD, BERTH-DNAT, … (letters, digits, `_`, `-`). */
  prefix: string;
  /** false: touch nothing (dockerd's `iptables: false`); every call succeeds at once. */
  enabled?: boolean;
  /** Run iptables in this network namespace (a name under /run/netns, or a path): tests. */
  netns?: string;
  /** 4 (iptables, the default) or 6 (ip6tables): the family of every subnet and address given. */
  family?: Family;
  log?: Logger;
}

export interface FirewallState {
  networks: FirewallNetwork[];
  ports: PortMapping[];
}

interface Waiter {
  resolve: () => void;
  reject: (e: unknown) => void;
}

const BRIDGE = /^[A-Za-z0-9_.-]{1,15}$/;
const PREFIX = new RegExp(`^[A-Za-z][A-Za-z0-9_-]{0,${MAX_PREFIX - 1}}$`);

const mappingId = (m: PortMapping) => `${m.proto} ${m.hostIp}:${m.hostPort} ${m.containerIp}:${m.containerPort}`;

const FAMILY_NAME = { 4: 'IPv4', 6: 'IPv6' } as const;

function ruleSubnet(text: string, family: Family): RuleSubnet | null {
  if (family === 4) {
    const net = parseSubnet(text);
    return net && { cidr: net.cidr, has: (a) => inSubnet(a, net) };
  }
  try {
    const net = userSubnet6(text);
    return { cidr: formatSubnet6(net), has: (a) => contains6(net, parseIp6(a) ?? -1n) };
  } catch {
    return null;
  }
}

/** The address in the family's printed form; null when it is not one of the family. */
const familyAddress = (addr: string, family: Family): string | null =>
  family === 4 ? (ipv4Number(addr) === null ? null : addr) : canonicalIp6(addr);

function checkNetwork(n: FirewallNetwork, family: Family): RuleNetwork {
  if (!BRIDGE.test(n.bridge)) throw invalidParameter(`invalid bridge name: ${JSON.stringify(n.bridge)}`);
  const net = ruleSubnet(n.subnet, family);
  if (!net) {
    throw invalidParameter(
      `invalid subnet ${JSON.stringify(n.subnet)}: this firewall takes ${FAMILY_NAME[family]} CIDRs only`,
    );
  }
  return { bridge: n.bridge, subnet: net.cidr, internal: n.internal, masquerade: n.masquerade, net };
}

const validPort = (p: number) => Number.isInteger(p) && p >= 1 && p <= 65535;

function checkMapping(m: PortMapping, networks: RuleNetwork[], family: Family): PortMapping {
  const text = JSON.stringify(m);
  if (!PROTOS.includes(m.proto)) throw invalidParameter(`invalid protocol in port mapping ${text}`);
  if (!validPort(m.hostPort) || !validPort(m.containerPort))
    throw invalidParameter(`invalid port in port mapping ${text}`);
  const unspecified = isUnspecified(m.hostIp) || (family === 6 && canonicalIp6(m.hostIp) === '::');
  const hostIp = unspecified ? '' : familyAddress(m.hostIp, family);
  const containerIp = familyAddress(m.containerIp, family);
  if (hostIp === null || containerIp === null) {
    throw invalidParameter(
      `invalid address in port mapping ${text}: this firewall takes ${FAMILY_NAME[family]} addresses only`,
    );
  }
  const mapping = { ...m, hostIp, containerIp };
  const net = networkOf(networks, mapping);
  if (!net) throw invalidParameter(`port mapping ${text}: ${m.containerIp} is on none of the firewall's networks`);
  if (net.internal)
    throw invalidParameter(`port mapping ${text}: network ${net.bridge} is internal, no port of it is published`);
  return mapping;
}

export class Firewall {
  readonly enabled: boolean;
  readonly chains: Chains;
  readonly family: Family;
  private readonly ipt: Iptables;
  private readonly log?: Logger;
  private networks = new Map<string, RuleNetwork>();
  /** By key, then by mapping. */
  private ports = new Map<string, Map<string, PortMapping>>();
  private ready: Promise<void> | null = null;
  private waiters: Waiter[] = [];
  private draining = false;
  /** Writes and teardowns one at a time, in order. */
  private serial: Promise<unknown> = Promise.resolve();

  constructor(o: FirewallOptions) {
    if (!PREFIX.test(o.prefix)) {
      throw invalidParameter(
        `invalid firewall chain prefix ${JSON.stringify(o.prefix)}: a letter, then up to ${MAX_PREFIX - 1} letters, digits, _ or -`,
      );
    }
    this.enabled = o.enabled ?? true;
    this.family = o.family ?? 4;
    this.chains = chainsOf(o.prefix, this.family);
    this.ipt = iptables(o.netns, this.family);
    this.log = o.log;
  }

  /**
   * Creates the chains and the jumps into them that are missing. Chains that
   * exist keep their rules until the first write, so a restarted daemon's
   * published ports keep working until it has said what its state is.
   * Called by the first write if not before.
   */
  init(): Promise<void> {
    if (!this.enabled) return Promise.resolve();
    this.ready ??= this.createMissing().catch((e: unknown) => {
      this.ready = null;
      throw e;
    });
    return this.ready;
  }

  /** Adds or changes a network (by its bridge). */
  setNetwork(n: FirewallNetwork): Promise<void> {
    return this.change(() => {
      const net = checkNetwork(n, this.family);
      this.networks.set(net.bridge, net);
    });
  }

  /** Removes a network; mappings of its containers stop publishing anything. */
  removeNetwork(bridge: string): Promise<void> {
    return this.change(() => this.networks.delete(bridge));
  }

  /** Adds port mappings (each to its key's set; one given twice is there once). */
  addPorts(mappings: PortMapping[]): Promise<void> {
    return this.change(() => {
      const checked = mappings.map((m) => checkMapping(m, [...this.networks.values()], this.family));
      for (const m of checked) {
        const own = this.ports.get(m.key) ?? new Map<string, PortMapping>();
        own.set(mappingId(m), m);
        this.ports.set(m.key, own);
      }
    });
  }

  /**
   * Removes every mapping of a key. A key with none changes nothing, and
   * nothing is written: every container's exit asks this, most publish no port,
   * and each write is an iptables-restore of all of berth's chains.
   */
  removePorts(key: string): Promise<void> {
    if (!this.ports.has(key)) return Promise.resolve();
    return this.change(() => this.ports.delete(key));
  }

  /** Replaces the whole state: what a daemon says once it knows what it has (after a restart). */
  replace(state: FirewallState): Promise<void> {
    return this.change(() => {
      const networks = new Map(state.networks.map((n) => [n.bridge, checkNetwork(n, this.family)]));
      const ports = new Map<string, Map<string, PortMapping>>();
      for (const m of state.ports.map((p) => checkMapping(p, [...networks.values()], this.family))) {
        ports.set(m.key, (ports.get(m.key) ?? new Map()).set(mappingId(m), m));
      }
      this.networks = networks;
      this.ports = ports;
    });
  }

  /** The state as last given. */
  state(): FirewallState {
    return {
      networks: [...this.networks.values()].map(({ net: _, ...n }) => n),
      ports: [...this.ports.values()].flatMap((own) => [...own.values()]),
    };
  }

  /** The iptables-restore text the current state is written as. */
  restoreText(): string {
    const s = this.state();
    return renderState(this.chains, [...this.networks.values()], s.ports);
  }

  /** berth's lines (this prefix's) in the live ruleset, as `table rule`: for tests and diagnosis. */
  async liveRules(): Promise<string[]> {
    return savedLines(this.chains, parseSave(await this.ipt.save()));
  }

  /**
   * Deletes this prefix's chains and the jumps into them, and forgets the
   * state (as of this call; writes asked before run first). A later change
   * starts over (init again).
   */
  async teardown(): Promise<void> {
    this.networks.clear();
    this.ports.clear();
    if (!this.enabled) return;
    await this.exclusive(async () => {
      this.ready = null;
      const text = teardownText(this.chains, parseSave(await this.ipt.save()));
      if (text) await this.ipt.restore(text);
    });
  }

  private async createMissing(): Promise<void> {
    const text = initText(this.chains, parseSave(await this.ipt.save()));
    if (text) await this.ipt.restore(text);
  }

  /** Applies a change to the state (throwing before anything changes if it is invalid) and waits for it to be written. */
  private async change(apply: () => void): Promise<void> {
    apply();
    if (!this.enabled) return;
    await new Promise<void>((resolve, reject) => {
      this.waiters.push({ resolve, reject });
      if (!this.draining) {
        this.draining = true;
        // In line now (a teardown asked later runs after it); the other changes of this turn
        // of the loop join the first write.
        void this.exclusive(async () => {
          await new Promise((r) => setImmediate(r));
          await this.drain();
        });
      }
    });
  }

  /** Writes until no change waits: each write takes every change made before it started. */
  private async drain(): Promise<void> {
    try {
      while (this.waiters.length > 0) {
        let batch: Waiter[] = [];
        try {
          await this.init();
          batch = this.waiters.splice(0);
          const started = performance.now();
          await this.ipt.restore(this.restoreText());
          this.log?.debug({ changes: batch.length, ms: Math.round(performance.now() - started) }, 'firewall written');
          for (const w of batch) w.resolve();
        } catch (e) {
          for (const w of [...batch, ...this.waiters.splice(0)]) w.reject(e);
        }
      }
    } finally {
      this.draining = false;
    }
  }

  private exclusive<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.serial.then(fn);
    this.serial = run.catch(() => undefined);
    return run;
  }
}
