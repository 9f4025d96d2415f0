// berthd's configuration: command-line flags merged with daemon.json (dockerd's
// keys where they overlap) into one frozen Config. All defaults live here.
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { z } from 'zod';
import { lazySchema } from './lazy-schema.js';

export const VERSION = '0.1.0';

export interface RuntimeConfig {
  path: string;
  runtimeArgs: string[];
}

export interface Config {
  hosts: string[];
  dataRoot: string;
  execRoot: string;
  configFile: string;
  registryMirrors: string[];
  insecureRegistries: string[];
  logLevel: 'debug' | 'info' | 'warn' | 'error' | 'fatal';
  group: string;
  pidfile: string | null;
  defaultRuntime: string;
  runtimes: Record<string, RuntimeConfig>;
  maxConcurrentDownloads: number;
  /** A registry that sends nothing for this long (no answer, or a body that stops) fails the request. */
  registryStallTimeoutMs: number;
  conmonPath: string;
  certsDirs: string[];
  /**
   * The real-time budget (µs) written to the parent cgroup of all containers
   * before each start, as dockerd's --cpu-rt-period/--cpu-rt-runtime; 0 writes nothing.
   */
  cpuRtPeriod: number;
  cpuRtRuntime: number;
  /**
   * The parent cgroup of containers that name none (dockerd's --cgroup-parent); '' for berth's own.
   * Tools that find a container's cgroup as dockerd's (Nomad's cpuset management: /docker/<id>) need `/docker`.
   */
  cgroupParent: string;
  network: NetworkConfig;
}

/** dockerd's bridge-network options, and the chains berth keeps its firewall rules in. */
export interface NetworkConfig {
  /** The default bridge's interface name; null: no default network (`bridge: none`). */
  bridge: string | null;
  bip?: string;
  fixedCidr?: string;
  /** dockerd's ipv6: the default bridge is dual stack (with fixedCidrV6, its IPv6 subnet). */
  ipv6: boolean;
  fixedCidrV6?: string;
  defaultAddressPools: { base: string; size: number }[];
  /** false: berth leaves the firewall alone (no NAT, no published-port rules). */
  iptables: boolean;
  /** false: dual-stack networks get no ip6tables rules (dockerd's `ip6tables`, on by default since Docker 27). */
  ip6tables: boolean;
  /** Whether berthd turns on the host's IPv4 forwarding (needed for outbound traffic). */
  ipForward: boolean;
  /**
   * dockerd's userland-proxy: a connection to a published port that DNAT does
   * not take (the firewall left alone) is piped to the container by berthd.
   * false: the port is only held; DNAT alone publishes it.
   */
  userlandProxy: boolean;
  /** berth's own: the prefix of its iptables chains (BERTH-FORWARD…), so that daemons side by side keep apart. */
  iptablesChainPrefix: string;
  dns: string[];
  dnsSearch: string[];
  dnsOptions: string[];
}

const DEFAULTS = {
  hosts: ['unix:///run/berth/berth.sock'],
  dataRoot: '/var/lib/berth',
  execRoot: '/run/berth',
  configFile: '/etc/berth/daemon.json',
  logLevel: 'info' as const,
  group: 'docker',
  defaultRuntime: 'runc',
  maxConcurrentDownloads: 3,
  registryStallTimeoutSec: 60,
};

const LOG_LEVELS = ['debug', 'info', 'warn', 'error', 'fatal'] as const;
const LogLevel = lazySchema(() => z.enum(LOG_LEVELS));

// The subset of dockerd's daemon.json that berth understands; other keys are
// ignored, as dockerd ignores keys that do not apply to its platform.
const DaemonJson = lazySchema(() =>
  z.looseObject({
    hosts: z.array(z.string()).optional(),
    'data-root': z.string().optional(),
    'exec-root': z.string().optional(),
    'registry-mirrors': z.array(z.string()).optional(),
    'insecure-registries': z.array(z.string()).optional(),
    'log-level': LogLevel.optional(),
    'default-runtime': z.string().optional(),
    runtimes: z
      .record(z.string(), z.object({ path: z.string(), runtimeArgs: z.array(z.string()).optional() }))
      .optional(),
    group: z.string().optional(),
    pidfile: z.string().optional(),
    'max-concurrent-downloads': z.number().int().positive().optional(),
    // berth's own: dockerd waits for a stalled registry until the client gives up.
    'registry-stall-timeout': z.number().positive().optional(),
    'conmon-path': z.string().optional(),
    'cpu-rt-period': z.number().int().nonnegative().optional(),
    'cpu-rt-runtime': z.number().int().nonnegative().optional(),
    'cgroup-parent': z.string().optional(),
    bridge: z.string().optional(),
    bip: z.string().optional(),
    'fixed-cidr': z.string().optional(),
    'default-address-pools': z.array(z.object({ base: z.string(), size: z.number().int() })).optional(),
    iptables: z.boolean().optional(),
    ip6tables: z.boolean().optional(),
    ipv6: z.boolean().optional(),
    'fixed-cidr-v6': z.string().optional(),
    'ip-forward': z.boolean().optional(),
    'userland-proxy': z.boolean().optional(),
    'iptables-chain-prefix': z.string().optional(),
    'exec-opts': z.array(z.string()).optional(),
    dns: z.array(z.string()).optional(),
    'dns-search': z.array(z.string()).optional(),
    'dns-opts': z.array(z.string()).optional(),
  }),
);
type DaemonJson = z.infer<typeof DaemonJson>;

export class ConfigError extends Error {}

export const USAGE = `Usage: berthd [OPTIONS]

A container engine that speaks the Docker Engine API.

Options:
  -H, --host list                  Daemon socket(s) to listen on (default unix:///run/berth/berth.sock)
      --data-root string           Root directory of persistent state (default "/var/lib/berth")
      --exec-root string           Root directory for execution state files (default "/run/berth")
      --config-file string         Daemon configuration file (default "/etc/berth/daemon.json")
      --registry-mirror list       Preferred registry mirror for docker.io
      --insecure-registry list     Registries reached over plain HTTP (loopback always is)
  -l, --log-level string           Set the logging level ("debug"|"info"|"warn"|"error"|"fatal")
  -D, --debug                      Same as --log-level debug
  -G, --group string               Group for the unix socket (default "docker")
  -p, --pidfile string             Path to use for daemon PID file
      --default-runtime string     Default OCI runtime for containers (default "runc")
      --max-concurrent-downloads int  Max concurrent layer downloads per pull (default 3)
      --registry-stall-timeout seconds  Fail a registry request that sends nothing for this long (default 60)
      --cpu-rt-period int          Limit the CPU real-time period in microseconds for the parent cgroup for all containers
      --cpu-rt-runtime int         Limit the CPU real-time runtime in microseconds for the parent cgroup for all containers
      --cgroup-parent string       Set parent cgroup for all containers (default "/berth")
  -b, --bridge string              The default network's bridge interface; "none" for no default network (default "berth0")
      --bip string                 The default bridge's address and prefix (default: the first free pool's)
      --fixed-cidr string          Where the default bridge gives addresses from
      --ipv6                       The default bridge is dual stack (needs --fixed-cidr-v6)
      --fixed-cidr-v6 string       The default bridge's IPv6 subnet
      --default-address-pool list  A pool networks get subnets from: base=10.10.0.0/16,size=24
      --iptables=false             Leave the firewall alone (no NAT, no published-port rules)
      --ip6tables=false            No ip6tables rules for IPv6 networks (with --iptables=false, none either)
      --ip-forward=false           Leave the host's IPv4 forwarding as it is
      --userland-proxy=false       Publish ports by DNAT alone: no proxy behind a held host port
      --iptables-chain-prefix string  Prefix of berth's iptables chains (default "BERTH")
      --exec-opt list              Runtime execution options (native.cgroupdriver=cgroupfs, berth's only driver)
      --dns list                   DNS servers for containers
      --dns-search list            DNS search domains for containers
      --dns-opt list               DNS options for containers
  -v, --version                    Print version information and quit
`;

/** dockerd's boolean flags that take `=false`; given bare, they mean true. */
const BOOLEAN_VALUE_FLAGS = ['--ipv6', '--iptables', '--ip6tables', '--ip-forward', '--userland-proxy'];

function boolFlag(name: string, v: string | undefined): boolean | undefined {
  if (v === undefined) return undefined;
  if (v === 'true' || v === '1') return true;
  if (v === 'false' || v === '0') return false;
  throw new ConfigError(`invalid value for --${name}: ${v}`);
}

/** `base=10.10.0.0/16,size=24`, dockerd's --default-address-pool. */
function parsePool(text: string): { base: string; size: number } {
  const kv = Object.fromEntries(text.split(',').map((p) => p.split('=') as [string, string]));
  if (!kv.base || !/^\d+$/.test(kv.size ?? '')) {
    throw new ConfigError(`invalid --default-address-pool ${text}: want base=<CIDR>,size=<prefix length>`);
  }
  return { base: kv.base, size: Number(kv.size) };
}

function networkConfig(
  values: Record<string, string | string[] | boolean | undefined>,
  file: DaemonJson,
): NetworkConfig {
  const str = (k: string) => values[k] as string | undefined;
  const list = (k: string) => values[k] as string[] | undefined;
  const bridge = str('bridge') ?? file.bridge ?? 'berth0';
  const pools = list('default-address-pool')?.map(parsePool) ?? file['default-address-pools'];
  const prefix = str('iptables-chain-prefix') ?? file['iptables-chain-prefix'] ?? 'BERTH';
  if (!/^[A-Za-z0-9_-]{1,12}$/.test(prefix)) {
    throw new ConfigError(`invalid iptables chain prefix ${prefix}: 1 to 12 letters, digits, '_' or '-'`);
  }
  const ipv6 = boolFlag('ipv6', str('ipv6')) ?? file.ipv6 ?? false;
  const fixedCidrV6 = str('fixed-cidr-v6') ?? file['fixed-cidr-v6'];
  if (ipv6 && !fixedCidrV6) {
    // dockerd 27's words: it has no default IPv6 pool either.
    throw new ConfigError(
      'IPv6 is enabled for the default bridge, but no subnet is configured. Specify an IPv6 subnet using --fixed-cidr-v6',
    );
  }
  const bip = str('bip') ?? file.bip;
  const fixedCidr = str('fixed-cidr') ?? file['fixed-cidr'];
  return {
    bridge: bridge === 'none' ? null : bridge,
    ...(bip ? { bip } : {}),
    ...(fixedCidr ? { fixedCidr } : {}),
    ipv6,
    ...(fixedCidrV6 ? { fixedCidrV6 } : {}),
    defaultAddressPools: pools ?? [
      { base: '172.17.0.0/12', size: 16 },
      { base: '192.168.0.0/16', size: 20 },
    ],
    iptables: boolFlag('iptables', str('iptables')) ?? file.iptables ?? true,
    ip6tables: boolFlag('ip6tables', str('ip6tables')) ?? file.ip6tables ?? true,
    ipForward: boolFlag('ip-forward', str('ip-forward')) ?? file['ip-forward'] ?? true,
    userlandProxy: boolFlag('userland-proxy', str('userland-proxy')) ?? file['userland-proxy'] ?? true,
    iptablesChainPrefix: prefix,
    dns: list('dns') ?? file.dns ?? [],
    dnsSearch: list('dns-search') ?? file['dns-search'] ?? [],
    dnsOptions: list('dns-opt') ?? file['dns-opts'] ?? [],
  };
}

export type ParsedArgs = { help: boolean; version: boolean; config: Config };

/** Parses argv (without node and script) and the daemon.json it names. */
export function loadConfig(argv: string[], env: NodeJS.ProcessEnv = process.env): ParsedArgs {
  const { values } = parseArgs({
    args: argv.map((a) => (BOOLEAN_VALUE_FLAGS.includes(a) ? `${a}=true` : a)),
    strict: true,
    allowPositionals: false,
    options: {
      host: { type: 'string', short: 'H', multiple: true },
      'data-root': { type: 'string' },
      'exec-root': { type: 'string' },
      'config-file': { type: 'string' },
      'registry-mirror': { type: 'string', multiple: true },
      'insecure-registry': { type: 'string', multiple: true },
      'log-level': { type: 'string', short: 'l' },
      debug: { type: 'boolean', short: 'D' },
      group: { type: 'string', short: 'G' },
      pidfile: { type: 'string', short: 'p' },
      'default-runtime': { type: 'string' },
      'max-concurrent-downloads': { type: 'string' },
      'registry-stall-timeout': { type: 'string' },
      'cpu-rt-period': { type: 'string' },
      'cpu-rt-runtime': { type: 'string' },
      'cgroup-parent': { type: 'string' },
      bridge: { type: 'string', short: 'b' },
      bip: { type: 'string' },
      ipv6: { type: 'string' },
      'fixed-cidr-v6': { type: 'string' },
      'fixed-cidr': { type: 'string' },
      'default-address-pool': { type: 'string', multiple: true },
      iptables: { type: 'string' },
      ip6tables: { type: 'string' },
      'ip-forward': { type: 'string' },
      'userland-proxy': { type: 'string' },
      'iptables-chain-prefix': { type: 'string' },
      'exec-opt': { type: 'string', multiple: true },
      dns: { type: 'string', multiple: true },
      'dns-search': { type: 'string', multiple: true },
      'dns-opt': { type: 'string', multiple: true },
      help: { type: 'boolean', short: 'h' },
      version: { type: 'boolean', short: 'v' },
    },
  });
  const configFile = values['config-file'] ?? DEFAULTS.configFile;
  const file = readDaemonJson(configFile, values['config-file'] !== undefined);
  refuseConflicts(values as Record<string, unknown>, file);
  checkExecOpts(values['exec-opt'] ?? file['exec-opts'] ?? []);
  // Checked without zod, which a start then need not load (~10 ms; scripts/bundle.mjs loads it at first use).
  if (values['log-level'] !== undefined && !(LOG_LEVELS as readonly string[]).includes(values['log-level'])) {
    throw new ConfigError(`invalid log level: ${values['log-level']}`);
  }
  const maxDownloads = values['max-concurrent-downloads'];
  if (maxDownloads !== undefined && !/^[1-9][0-9]*$/.test(maxDownloads)) {
    throw new ConfigError(`invalid value for --max-concurrent-downloads: ${maxDownloads}`);
  }
  const stall = values['registry-stall-timeout'];
  if (stall !== undefined && !(/^\d+(\.\d+)?$/.test(stall) && Number(stall) > 0)) {
    throw new ConfigError(`invalid value for --registry-stall-timeout: ${stall}`);
  }
  const rtPeriod = microseconds(values, 'cpu-rt-period');
  const rtRuntime = microseconds(values, 'cpu-rt-runtime');
  const runtimes: Record<string, RuntimeConfig> = { runc: { path: 'runc', runtimeArgs: [] } };
  for (const [name, r] of Object.entries(file.runtimes ?? {}))
    runtimes[name] = { path: r.path, runtimeArgs: r.runtimeArgs ?? [] };
  const defaultRuntime = values['default-runtime'] ?? file['default-runtime'] ?? DEFAULTS.defaultRuntime;
  if (!runtimes[defaultRuntime]) throw new ConfigError(`default runtime ${defaultRuntime} is not defined in runtimes`);
  const hosts = values.host ?? file.hosts ?? (env.BERTH_HOST ? [env.BERTH_HOST] : DEFAULTS.hosts);
  hosts.forEach(parseHost);
  const config: Config = {
    hosts,
    dataRoot: values['data-root'] ?? file['data-root'] ?? DEFAULTS.dataRoot,
    execRoot: values['exec-root'] ?? file['exec-root'] ?? DEFAULTS.execRoot,
    configFile,
    registryMirrors: values['registry-mirror'] ?? file['registry-mirrors'] ?? [],
    insecureRegistries: values['insecure-registry'] ?? file['insecure-registries'] ?? [],
    logLevel: values.debug
      ? 'debug'
      : ((values['log-level'] as Config['logLevel']) ?? file['log-level'] ?? DEFAULTS.logLevel),
    group: values.group ?? file.group ?? DEFAULTS.group,
    pidfile: values.pidfile ?? file.pidfile ?? null,
    defaultRuntime,
    runtimes,
    maxConcurrentDownloads: maxDownloads
      ? Number(maxDownloads)
      : (file['max-concurrent-downloads'] ?? DEFAULTS.maxConcurrentDownloads),
    registryStallTimeoutMs:
      1000 * (stall ? Number(stall) : (file['registry-stall-timeout'] ?? DEFAULTS.registryStallTimeoutSec)),
    conmonPath: file['conmon-path'] ?? 'conmon',
    certsDirs: ['/etc/berth/certs.d', '/etc/docker/certs.d'],
    cpuRtPeriod: rtPeriod ?? file['cpu-rt-period'] ?? 0,
    cpuRtRuntime: rtRuntime ?? file['cpu-rt-runtime'] ?? 0,
    cgroupParent: values['cgroup-parent'] ?? file['cgroup-parent'] ?? '',
    network: networkConfig(values, file),
  };
  return { help: values.help ?? false, version: values.version ?? false, config: Object.freeze(config) };
}

/**
 * dockerd's exec options. It reads one, `native.cgroupdriver`, and passes the
 * rest by (Windows' isolation among them, and what is no key=value at all). berth drives cgroups itself through
 * cgroupfs: a daemon.json from a node set up for the systemd driver is refused
 * rather than run with another driver than kubelet was told, which would put
 * pods' cgroups where kubelet never looks.
 */
function checkExecOpts(opts: string[]): void {
  for (const opt of opts) {
    const eq = opt.indexOf('=');
    if (eq < 1 || opt.slice(0, eq).trim().toLowerCase() !== 'native.cgroupdriver') continue;
    const driver = opt.slice(eq + 1).trim();
    if (driver === '' || driver === 'cgroupfs') continue;
    if (driver === 'systemd') {
      throw new ConfigError(
        'native.cgroupdriver option systemd is not supported by berth: its cgroup driver is cgroupfs (run kubelet and cri-dockerd with --cgroup-driver=cgroupfs)',
      );
    }
    if (driver === 'none') {
      throw new ConfigError(`native.cgroupdriver option ${driver} is internally used and cannot be specified manually`);
    }
    throw new ConfigError(`native.cgroupdriver option ${driver} not supported`);
  }
}

/** A flag of whole microseconds, or undefined when not given. */
function microseconds(values: Record<string, unknown>, flag: 'cpu-rt-period' | 'cpu-rt-runtime'): number | undefined {
  const v = values[flag] as string | undefined;
  if (v === undefined) return undefined;
  if (!/^\d+$/.test(v)) throw new ConfigError(`invalid value for --${flag}: ${v}`);
  return Number(v);
}

function readDaemonJson(file: string, explicit: boolean): DaemonJson {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (e) {
    // dockerd tolerates a missing default config file but not a missing named one.
    if ((e as NodeJS.ErrnoException).code === 'ENOENT' && !explicit) return {};
    throw new ConfigError(`unable to read configuration file ${file}: ${(e as Error).message}`);
  }
  if (text.trim() === '') return {}; // an empty file configures nothing
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (e) {
    throw new ConfigError(`unable to configure the daemon with file ${file}: ${(e as Error).message}`);
  }
  // An empty object configures nothing, and needs no schema (nor zod loaded) to say so.
  if (json !== null && typeof json === 'object' && !Array.isArray(json) && Object.keys(json).length === 0) return {};
  const parsed = DaemonJson.safeParse(json);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    throw new ConfigError(
      `unable to configure the daemon with file ${file}: ${issue.path.join('.')}: ${issue.message}`,
    );
  }
  return parsed.data;
}

// dockerd refuses a directive given both as a flag and in the file.
const FLAG_TO_KEY: Record<string, string> = {
  host: 'hosts',
  'data-root': 'data-root',
  'exec-root': 'exec-root',
  'registry-mirror': 'registry-mirrors',
  'insecure-registry': 'insecure-registries',
  'log-level': 'log-level',
  group: 'group',
  pidfile: 'pidfile',
  'default-runtime': 'default-runtime',
  'max-concurrent-downloads': 'max-concurrent-downloads',
  'registry-stall-timeout': 'registry-stall-timeout',
  'cpu-rt-period': 'cpu-rt-period',
  'cpu-rt-runtime': 'cpu-rt-runtime',
  'exec-opt': 'exec-opts',
  'cgroup-parent': 'cgroup-parent',
};

function refuseConflicts(flags: Record<string, unknown>, file: DaemonJson): void {
  const both = Object.entries(FLAG_TO_KEY)
    .filter(([flag, key]) => flags[flag] !== undefined && (file as Record<string, unknown>)[key] !== undefined)
    .map(
      ([flag, key]) =>
        `${key}: (from flag: ${String(flags[flag])}, from file: ${String((file as Record<string, unknown>)[key])})`,
    );
  if (both.length > 0) {
    throw new ConfigError(
      `unable to configure the daemon with file: the following directives are specified both as a flag and in the configuration file: ${both.join(', ')}`,
    );
  }
}

export type Listen = { kind: 'unix'; path: string } | { kind: 'tcp'; host: string; port: number };

/** The longest path a unix socket can be bound at (sun_path holds 108 bytes with the NUL). */
const MAX_SOCKET_PATH = 107;

/** Parses one -H value: unix:///path, /path, tcp://host:port. */
export function parseHost(h: string): Listen {
  const unix = h.startsWith('unix://')
    ? h.slice('unix://'.length) || '/run/berth/berth.sock'
    : h.startsWith('/')
      ? h
      : null;
  if (unix !== null) {
    const bytes = Buffer.byteLength(unix);
    if (bytes > MAX_SOCKET_PATH) {
      throw new ConfigError(
        `unix socket path ${unix} is ${bytes} bytes long; the limit is ${MAX_SOCKET_PATH}: choose a shorter -H`,
      );
    }
    return { kind: 'unix', path: unix };
  }
  const m = /^tcp:\/\/(\[[^\]]+\]|[^:]*)(?::(\d+))?$/.exec(h);
  if (m) return { kind: 'tcp', host: (m[1] || '127.0.0.1').replace(/^\[|\]$/g, ''), port: Number(m[2] ?? 2375) };
  throw new ConfigError(`invalid daemon host: ${h} (use unix:///path or tcp://host:port)`);
}
