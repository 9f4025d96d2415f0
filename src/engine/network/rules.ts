// berth's iptables rules as text: what the desired state (networks and
// published ports) becomes, and how berth's own chains and jumps are found in
// iptables-save's output. Pure functions; firewall.ts runs them.
//
// The rules are dockerd's (bridge driver, userland proxy off, so that DNAT
// applies to the host itself, 127.0.0.1 and hairpin included), in chains named
// from a prefix so that several daemons share a host without touching each
// other's rules:
//
//   filter FORWARD     → P-FORWARD      internal networks closed, published
//                                       ports open, replies back, isolation,
//                                       outbound open, the rest dropped
//            P-ISOLATION-1/-2           nothing routed from one berth bridge
//                                       to another
//   nat PREROUTING, OUTPUT (local destinations) → P-DNAT   published ports
//   nat POSTROUTING    → P-POSTROUTING  outbound NAT, 127.0.0.1 and hairpin
//                                       sources masqueraded towards a bridge
//   raw PREROUTING     → P-PREROUTING   nothing to 127.0.0.0/8 from a bridge,
//                                       a port published on 127.0.0.1 dropped
//                                       from anywhere but lo (dockerd's rule)
//
// Rules are written in the form iptables-save prints them, so that what is
// read back compares equal to what was written.
//
// The same rules, for IPv6, are ip6tables' (dockerd's `ip6tables`, on by
// default from Docker 27): a family-6 ruleset has host addresses as /128,
// DNAT targets as [address]:port, and nothing for loopback, since IPv6 never
// routes ::1 off lo: the OUTPUT jump leaves ::1 to the userland proxy, as
// dockerd's does.
import { isLoopback, ipv4Number } from './ipv4.js';
import { parseIp6 } from './ipv6.js';

export type Proto = 'tcp' | 'udp' | 'sctp';
export const PROTOS: readonly Proto[] = ['tcp', 'udp', 'sctp'];

export interface FirewallNetwork {
  /** The bridge's interface name. */
  bridge: string;
  /** The network's IPv4 subnet, CIDR. */
  subnet: string;
  /** No traffic is routed in or out of the bridge (Docker's --internal). */
  internal: boolean;
  /** Outbound NAT for the subnet (Docker's enable_ip_masquerade). */
  masquerade: boolean;
}

export interface PortMapping {
  /** Whose mapping this is (a container's id): removePorts(key) takes them all. */
  key: string;
  proto: Proto;
  /** '' or 0.0.0.0 for every local address, else one IPv4 address of the host. */
  hostIp: string;
  hostPort: number;
  containerIp: string;
  containerPort: number;
}

/** A subnet as the rules need it: the text iptables-save prints, and membership. */
export interface RuleSubnet {
  cidr: string;
  has(addr: string): boolean;
}

/** A network as the rules need it, its subnet parsed. */
export interface RuleNetwork extends FirewallNetwork {
  net: RuleSubnet;
}

export type Family = 4 | 6;

export type Table = 'filter' | 'nat' | 'raw';
export const TABLES: readonly Table[] = ['filter', 'nat', 'raw'];

export interface Chains {
  /** iptables (4) or ip6tables (6): the same chain names in each. */
  family: Family;
  forward: string;
  isolation1: string;
  isolation2: string;
  dnat: string;
  postrouting: string;
  prerouting: string;
}

/** Longest prefix that keeps every chain name within iptables' 28 characters. */
export const MAX_PREFIX = 28 - '-POSTROUTING'.length;

export const chainsOf = (prefix: string, family: Family = 4): Chains => ({
  family,
  forward: `${prefix}-FORWARD`,
  isolation1: `${prefix}-ISOLATION-1`,
  isolation2: `${prefix}-ISOLATION-2`,
  dnat: `${prefix}-DNAT`,
  postrouting: `${prefix}-POSTROUTING`,
  prerouting: `${prefix}-PREROUTING`,
});

const tableChains = (c: Chains): Record<Table, string[]> => ({
  filter: [c.forward, c.isolation1, c.isolation2],
  nat: [c.dnat, c.postrouting],
  raw: [c.prerouting],
});

interface Jump {
  table: Table;
  chain: string;
  /** The rule after `-A CHAIN `, as iptables-save prints it. */
  spec: string;
  /** Put first in its chain (FORWARD: ahead of rules that would drop berth's traffic), else appended. */
  first: boolean;
}

/** The rules in the built-in chains that lead into berth's. */
export const jumpsOf = (c: Chains): Jump[] => [
  { table: 'filter', chain: 'FORWARD', spec: `-j ${c.forward}`, first: true },
  { table: 'nat', chain: 'PREROUTING', spec: `-m addrtype --dst-type LOCAL -j ${c.dnat}`, first: false },
  {
    table: 'nat',
    chain: 'OUTPUT',
    spec: `${c.family === 6 ? '! -d ::1/128 ' : ''}-m addrtype --dst-type LOCAL -j ${c.dnat}`,
    first: false,
  },
  { table: 'nat', chain: 'POSTROUTING', spec: `-j ${c.postrouting}`, first: false },
  { table: 'raw', chain: 'PREROUTING', spec: `-j ${c.prerouting}`, first: false },
];

const match = (proto: Proto, port: number) => `-p ${proto} -m ${proto} --dport ${port}`;

/** The network a mapping's container is on, when it is one whose ports are published. */
export const networkOf = (networks: RuleNetwork[], m: PortMapping): RuleNetwork | undefined =>
  networks.find((n) => n.net.has(m.containerIp));

/** An address as a number of its family, for ordering ('' is the unspecified one). */
const addrOrder = (ip: string): bigint =>
  ip.includes(':') ? (parseIp6(ip) ?? 0n) : BigInt(ipv4Number(ip || '0.0.0.0') ?? 0);
const cmp = (a: bigint, b: bigint) => (a < b ? -1 : a > b ? 1 : 0);
/** A host's own address in a rule: /32, or /128 in IPv6. */
const host = (c: Chains, ip: string) => `${ip}/${c.family === 6 ? 128 : 32}`;
const dnatTo = (c: Chains, ip: string, port: number) => (c.family === 6 ? `[${ip}]:${port}` : `${ip}:${port}`);

const byBridge = (a: RuleNetwork, b: RuleNetwork) => (a.bridge < b.bridge ? -1 : a.bridge > b.bridge ? 1 : 0);

function byMapping(a: PortMapping, b: PortMapping): number {
  return (
    cmp(addrOrder(a.containerIp), addrOrder(b.containerIp)) ||
    PROTOS.indexOf(a.proto) - PROTOS.indexOf(b.proto) ||
    a.containerPort - b.containerPort ||
    cmp(addrOrder(a.hostIp), addrOrder(b.hostIp)) ||
    a.hostPort - b.hostPort
  );
}

function filterRules(c: Chains, nets: RuleNetwork[], published: [PortMapping, RuleNetwork][]): string[] {
  const open = nets.filter((n) => !n.internal);
  return [
    ...nets
      .filter((n) => n.internal)
      .flatMap((n) => [
        `-A ${c.forward} -i ${n.bridge} ! -o ${n.bridge} -j DROP`,
        `-A ${c.forward} ! -i ${n.bridge} -o ${n.bridge} -j DROP`,
      ]),
    ...published.map(
      ([m, n]) =>
        `-A ${c.forward} -d ${host(c, m.containerIp)} -o ${n.bridge} ${match(m.proto, m.containerPort)} -m conntrack --ctstate DNAT -j ACCEPT`,
    ),
    ...open.map((n) => `-A ${c.forward} -o ${n.bridge} -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT`),
    `-A ${c.forward} -j ${c.isolation1}`,
    ...nets.map((n) =>
      n.internal
        ? `-A ${c.forward} -i ${n.bridge} -o ${n.bridge} -j ACCEPT`
        : `-A ${c.forward} -i ${n.bridge} -j ACCEPT`,
    ),
    ...open.map((n) => `-A ${c.forward} -o ${n.bridge} -j DROP`),
    ...open.map((n) => `-A ${c.isolation1} -i ${n.bridge} ! -o ${n.bridge} -j ${c.isolation2}`),
    ...open.map((n) => `-A ${c.isolation2} -o ${n.bridge} -j DROP`),
  ];
}

function natRules(c: Chains, nets: RuleNetwork[], published: [PortMapping, RuleNetwork][]): string[] {
  const open = nets.filter((n) => !n.internal);
  return [
    ...published.map(
      ([m]) =>
        `-A ${c.dnat} ${m.hostIp ? `-d ${host(c, m.hostIp)} ` : ''}${match(m.proto, m.hostPort)} -j DNAT --to-destination ${dnatTo(c, m.containerIp, m.containerPort)}`,
    ),
    ...open
      .filter((n) => n.masquerade)
      .map((n) => `-A ${c.postrouting} -s ${n.net.cidr} ! -o ${n.bridge} -j MASQUERADE`),
    // The host reaching a port published on 127.0.0.1 (route_localnet lets the packet out).
    ...(c.family === 6 ? [] : open).map((n) => `-A ${c.postrouting} -s 127.0.0.0/8 -o ${n.bridge} -j MASQUERADE`),
    // Hairpin: a container reaching a published port of its own bridge answers through the host.
    ...open.map((n) => `-A ${c.postrouting} -s ${n.net.cidr} -o ${n.bridge} -m conntrack --ctstate DNAT -j MASQUERADE`),
  ];
}

function rawRules(c: Chains, nets: RuleNetwork[], published: [PortMapping, RuleNetwork][]): string[] {
  if (c.family === 6) return [];
  return [
    ...nets.map((n) => `-A ${c.prerouting} -d 127.0.0.0/8 -i ${n.bridge} -j DROP`),
    ...published
      .filter(([m]) => isLoopback(m.hostIp))
      .map(([m]) => `-A ${c.prerouting} -d ${m.hostIp}/32 ! -i lo ${match(m.proto, m.hostPort)} -j DROP`),
  ];
}

const unique = (lines: string[]): string[] => [...new Set(lines)];

/**
 * The iptables-restore --noflush text that makes berth's chains hold exactly
 * this state: each chain is declared (so emptied) and refilled, in one
 * transaction per table. Mappings of containers on no known network, or on an
 * internal one, publish nothing (dockerd publishes no port of an internal network).
 */
export function renderState(c: Chains, networks: RuleNetwork[], mappings: PortMapping[]): string {
  const nets = [...networks].sort(byBridge);
  const published = [...mappings]
    .sort(byMapping)
    .map((m) => [m, networkOf(nets, m)] as const)
    .filter((p): p is [PortMapping, RuleNetwork] => p[1] !== undefined && !p[1].internal);
  const chains = tableChains(c);
  const rules: Record<Table, string[]> = {
    filter: filterRules(c, nets, published),
    nat: natRules(c, nets, published),
    raw: rawRules(c, nets, published),
  };
  return TABLES.map((t) =>
    [`*${t}`, ...chains[t].map((name) => `:${name} - [0:0]`), ...unique(rules[t]), 'COMMIT', ''].join('\n'),
  ).join('');
}

export type Saved = Record<Table, { chains: Set<string>; rules: string[] }>;

/** iptables-save's text as chain names and `-A` lines per table (tables berth does not use left out). */
export function parseSave(text: string): Saved {
  const saved: Saved = {
    filter: { chains: new Set(), rules: [] },
    nat: { chains: new Set(), rules: [] },
    raw: { chains: new Set(), rules: [] },
  };
  let table: (typeof saved)[Table] | undefined;
  for (const line of text.split('\n')) {
    if (line.startsWith('*')) table = saved[line.slice(1).trim() as Table];
    else if (!table) continue;
    else if (line.startsWith(':')) table.chains.add(line.slice(1).split(' ')[0]!);
    else if (line.startsWith('-A ')) table.rules.push(line.trimEnd());
  }
  return saved;
}

/** The chain a saved `-A CHAIN …` line belongs to, and the rule's target. */
const chainOf = (rule: string) => rule.split(' ')[1]!;
const targetOf = (rule: string) => / -[jg] (\S+)/.exec(rule)?.[1];

/**
 * What init needs to write: the chains and jumps that are missing (existing
 * chains are not declared, so their rules stay until the first write), or
 * null when everything is there.
 */
export function initText(c: Chains, saved: Saved): string | null {
  const chains = tableChains(c);
  const jumps = jumpsOf(c);
  const parts = TABLES.flatMap((t) => {
    const missing = chains[t].filter((name) => !saved[t].chains.has(name)).map((name) => `:${name} - [0:0]`);
    const links = jumps
      .filter((j) => j.table === t && !saved[t].rules.includes(`-A ${j.chain} ${j.spec}`))
      .map((j) => `${j.first ? `-I ${j.chain} 1` : `-A ${j.chain}`} ${j.spec}`);
    return missing.length + links.length === 0 ? [] : [`*${t}`, ...missing, ...links, 'COMMIT', ''];
  });
  return parts.length === 0 ? null : parts.join('\n');
}

/**
 * What removes every chain of this prefix and the rules of the built-in chains
 * that jump to one; null when there is nothing of it. A rule of another chain
 * that jumps to one is not berth's to delete: iptables-restore then refuses to
 * delete that chain, and the teardown fails saying so.
 */
export function teardownText(c: Chains, saved: Saved): string | null {
  const chains = tableChains(c);
  const parts = TABLES.flatMap((t) => {
    const ours = chains[t].filter((name) => saved[t].chains.has(name));
    const from = new Set(
      jumpsOf(c)
        .filter((j) => j.table === t)
        .map((j) => j.chain),
    );
    const jumps = saved[t].rules.filter((r) => from.has(chainOf(r)) && chains[t].includes(targetOf(r) ?? ''));
    if (ours.length + jumps.length === 0) return [];
    return [
      `*${t}`,
      ...ours.map((name) => `:${name} - [0:0]`),
      ...jumps.map((r) => `-D${r.slice(2)}`),
      ...ours.map((name) => `-X ${name}`),
      'COMMIT',
      '',
    ];
  });
  return parts.length === 0 ? null : parts.join('\n');
}

/** The lines of a saved ruleset that are berth's for this prefix: its chains, their rules, the jumps to them. */
export function savedLines(c: Chains, saved: Saved): string[] {
  const chains = tableChains(c);
  return TABLES.flatMap((t) => {
    const mine = chains[t];
    return [
      ...mine.filter((name) => saved[t].chains.has(name)).map((name) => `${t} :${name}`),
      ...saved[t].rules
        .filter((r) => mine.includes(chainOf(r)) || mine.includes(targetOf(r) ?? ''))
        .map((r) => `${t} ${r}`),
    ];
  });
}
