// Debian's CNI plugins (containernetworking-plugins, /usr/lib/cni) run as
// cri-dockerd runs them for a pod: the network's plugin list in order on ADD
// (each given the previous one's result), in reverse on DEL, through the CNI
// protocol — CNI_* variables and the network config on stdin, the result or
// an error as JSON on stdout — plus the loopback plugin on `lo`.
import { spawnSync } from 'node:child_process';

export const CNI_BIN = '/usr/lib/cni';

export interface CniNetwork {
  /** The network's name (the iptables comments and host-local's directory carry it). */
  name: string;
  /** The bridge the plugin makes on the host (at most 15 characters). */
  bridge: string;
  subnet: string;
  /** host-local's allocations: never the machine's /var/lib/cni. */
  dataDir: string;
}

export interface PortMapping {
  hostPort: number;
  containerPort: number;
  protocol: 'tcp' | 'udp';
  hostIP?: string;
}

export interface CniResult {
  cniVersion: string;
  interfaces?: { name: string; mac?: string; sandbox?: string }[];
  ips?: { address: string; gateway?: string; interface?: number }[];
  [key: string]: unknown;
}

const VERSION = '0.4.0';

/** The plugin list cri-dockerd would find in its --cni-conf-dir for this network. */
export function confList(net: CniNetwork) {
  return {
    cniVersion: VERSION,
    name: net.name,
    plugins: [
      {
        type: 'bridge',
        bridge: net.bridge,
        isGateway: true,
        ipMasq: true,
        hairpinMode: true,
        ipam: {
          type: 'host-local',
          dataDir: net.dataDir,
          ranges: [[{ subnet: net.subnet }]],
          routes: [{ dst: '0.0.0.0/0' }],
        },
      },
      { type: 'portmap', capabilities: { portMappings: true } },
    ],
  };
}

const LOOPBACK = { cniVersion: VERSION, name: 'cni-loopback', type: 'loopback' };

function runPlugin(
  command: 'ADD' | 'DEL',
  conf: Record<string, unknown>,
  containerId: string,
  netns: string,
  ifname: string,
): CniResult | undefined {
  const r = spawnSync(`${CNI_BIN}/${conf.type as string}`, {
    input: JSON.stringify(conf),
    encoding: 'utf8',
    env: {
      PATH: process.env.PATH ?? '/usr/sbin:/usr/bin:/sbin:/bin',
      CNI_COMMAND: command,
      CNI_CONTAINERID: containerId,
      CNI_NETNS: netns,
      CNI_IFNAME: ifname,
      CNI_PATH: CNI_BIN,
    },
  });
  if (r.status !== 0) throw new Error(`CNI ${command} ${conf.type as string}: ${r.status} ${r.stdout}${r.stderr}`);
  return r.stdout.trim() ? (JSON.parse(r.stdout) as CniResult) : undefined;
}

/**
 * What one pod's network is: ADD it into `netns` (a path such as /proc/<pid>/ns/net), DEL it again.
 * DEL hands each plugin the result ADD cached, as libcni does for CNI 0.4.0.
 */
export class PodNetwork {
  private result: CniResult | undefined;

  constructor(
    readonly net: CniNetwork,
    readonly containerId: string,
    readonly netns: string,
    readonly portMappings: PortMapping[] = [],
  ) {}

  private pluginConf(plugin: Record<string, unknown>, prevResult?: CniResult) {
    const conf: Record<string, unknown> = { ...plugin, cniVersion: VERSION, name: this.net.name };
    if (prevResult) conf.prevResult = prevResult;
    if ((plugin.capabilities as Record<string, boolean> | undefined)?.portMappings) {
      conf.runtimeConfig = { portMappings: this.portMappings };
    }
    return conf;
  }

  add(): CniResult {
    runPlugin('ADD', LOOPBACK, this.containerId, this.netns, 'lo');
    let prev: CniResult | undefined;
    for (const plugin of confList(this.net).plugins) {
      prev = runPlugin('ADD', this.pluginConf(plugin, prev), this.containerId, this.netns, 'eth0') ?? prev;
    }
    this.result = prev;
    return prev!;
  }

  del(): void {
    for (const plugin of confList(this.net).plugins.reverse()) {
      runPlugin('DEL', this.pluginConf(plugin, this.result), this.containerId, this.netns, 'eth0');
    }
    runPlugin('DEL', LOOPBACK, this.containerId, this.netns, 'lo');
  }

  /** The pod's IPv4 address, as kubelet reports it (from the result, without the prefix length). */
  get ip(): string | undefined {
    return this.result?.ips?.find((i) => !i.address.includes(':'))?.address.split('/')[0];
  }
}

/** portmap's nat chains shared by every pod: made at its first ADD and never removed by it. */
const PORTMAP_CHAINS = ['CNI-HOSTPORT-DNAT', 'CNI-HOSTPORT-MASQ', 'CNI-HOSTPORT-SETMARK'];

const natRules = (): string[] => spawnSync('iptables', ['-t', 'nat', '-S'], { encoding: 'utf8' }).stdout.split('\n');

/** Which of portmap's shared chains the host has now (before a test runs it). */
export function portmapChains(): Set<string> {
  const rules = natRules();
  return new Set(PORTMAP_CHAINS.filter((c) => rules.includes(`-N ${c}`)));
}

/**
 * Takes away the shared chains portmap made since `before`, and the rules that jump to them: a node
 * keeps them for its next pod, a test leaves the host as it found it. Each pod's own chains went
 * with its DEL.
 */
export function removePortmapChains(before: Set<string>): void {
  const made = PORTMAP_CHAINS.filter((c) => !before.has(c));
  if (made.length === 0) return;
  for (const rule of natRules()) {
    if (!rule.startsWith('-A ') || !made.some((c) => rule.endsWith(`-j ${c}`))) continue;
    // -S quotes a comment with spaces: split on blanks outside double quotes.
    const args = [...rule.slice(3).matchAll(/"([^"]*)"|(\S+)/g)].map((m) => m[1] ?? m[2]!);
    spawnSync('iptables', ['-t', 'nat', '-D', ...args]);
  }
  for (const c of made) spawnSync('iptables', ['-t', 'nat', '-F', c]);
  for (const c of made) spawnSync('iptables', ['-t', 'nat', '-X', c]);
}
