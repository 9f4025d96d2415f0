// The /etc/resolv.conf a container gets, as dockerd writes it
// (daemon/libnetwork/internal/resolvconf): the host's file, the container's
// overrides (HostConfig.Dns, DnsSearch, DnsOptions), then one of two
// transforms:
// - user network: the only nameserver is the network's own DNS server. dockerd
//   puts 127.0.0.11 there (its resolver listens inside each container's network
//   namespace); berth's is aardvark-dns on the gateway, so the gateway it is.
//   The other nameservers become the resolver's upstreams; `ndots:0` is added
//   unless an ndots option is set, so a bare name is asked as it is first.
// - default bridge (no resolver of its own): the host's nameservers, less the
//   loopback ones (they answer only in the host's namespace) and, without
//   IPv6, the IPv6 ones; Google's public servers when none is left.
import { readFile } from 'node:fs/promises';
import { BlockList, isIP } from 'node:net';

export interface ResolvConf {
  /** Where it was read from (shown in the generated file's comments). */
  source: string;
  nameservers: string[];
  search: string[];
  options: string[];
  /** Directives other than nameserver, search, domain and options, kept as written. */
  other: string[];
  /** Nameserver values that are not addresses, dropped. */
  invalid: string[];
}

/** A container's own DNS settings (HostConfig.Dns, DnsSearch, DnsOptions); empty means the host's. */
export interface DnsOverrides {
  dns?: string[];
  search?: string[];
  options?: string[];
}

const DEFAULT_IPV4 = ['8.8.8.8', '8.8.4.4'];
const DEFAULT_IPV6 = ['2001:4860:4860::8888', '2001:4860:4860::8844'];
const HOST_PATH = '/etc/resolv.conf';
const SYSTEMD_RESOLVED_PATH = '/run/systemd/resolve/resolv.conf';

export function parseResolvConf(text: string, source = ''): ResolvConf {
  const rc: ResolvConf = { source, nameservers: [], search: [], options: [], other: [], invalid: [] };
  for (const line of text.split('\n')) {
    if (line === '' || line[0] === '#' || line[0] === ';') continue;
    const [directive, ...values] = line.trim().split(/\s+/);
    if (!directive) continue;
    if (directive === 'nameserver') {
      if (values[0] === undefined) continue;
      if (isIP(unzoned(values[0]))) rc.nameservers.push(values[0]);
      else rc.invalid.push(values[0]);
    } else if (directive === 'search' || directive === 'domain') {
      // The last one counts; `domain` is its obsolete name.
      if (values.length > 0) rc.search = values;
    } else if (directive === 'options') {
      rc.options.push(...values);
    } else {
      rc.other.push(line);
    }
  }
  return rc;
}

/**
 * The host's resolv.conf, from dockerd's choice of file: systemd-resolved's
 * own list when /etc/resolv.conf names only its stub (127.0.0.53). A missing
 * file is an empty one.
 */
export async function readHostResolvConf(file = HOST_PATH, resolvedFile = SYSTEMD_RESOLVED_PATH): Promise<ResolvConf> {
  const read = async (f: string) => parseResolvConf(await readFile(f, 'utf8').catch(() => ''), f);
  const rc = await read(file);
  const stubOnly = rc.nameservers.length === 1 && rc.nameservers[0] === '127.0.0.53';
  return stubOnly ? read(resolvedFile) : rc;
}

/** A user network's resolv.conf: the network's DNS server (aardvark-dns on `gatewayIp`) and nothing else. */
export function resolvConf(gatewayIp: string, overrides: DnsOverrides, host: ResolvConf): string {
  const rc = withOverrides(host, overrides);
  const upstreams = overrides.dns?.length ? rc.nameservers : rc.nameservers.map((ns) => `host(${ns})`);
  let ndotsFrom = ndotsSource(host, overrides);
  const options = rc.options.filter(validNdots);
  if (!options.some((o) => optionName(o) === 'ndots')) {
    options.push('ndots:0');
    ndotsFrom = 'internal';
  }
  const notes = [
    ...(upstreams.length ? [] : ['NO EXTERNAL NAMESERVERS DEFINED']),
    ...(upstreams.length ? [`ExtServers: [${upstreams.join(' ')}]`] : []),
  ];
  return generate({ ...rc, nameservers: [gatewayIp], options }, 'internal resolver', notes, overrides, ndotsFrom);
}

/** The default bridge's resolv.conf: the host's nameservers that a container can reach. */
export function bridgeResolvConf(overrides: DnsOverrides & { ipv6?: boolean }, host: ResolvConf): string {
  const rc = withOverrides(host, overrides);
  const notes: string[] = [];
  if (!overrides.dns?.length) {
    rc.nameservers = rc.nameservers.filter((ns) => !isLoopback(ns) && (overrides.ipv6 || isIP(unzoned(ns)) === 4));
    if (rc.nameservers.length === 0) {
      rc.nameservers = overrides.ipv6 ? [...DEFAULT_IPV4, ...DEFAULT_IPV6] : [...DEFAULT_IPV4];
      notes.push('Used default nameservers.');
    }
  }
  return generate(rc, 'legacy', notes, overrides, ndotsSource(host, overrides));
}

function withOverrides(host: ResolvConf, o: DnsOverrides): ResolvConf {
  return {
    ...host,
    nameservers: o.dns?.length ? [...o.dns] : [...host.nameservers],
    // `--dns-search .` asks for no search domain at all.
    search: o.search?.length ? o.search.filter((s) => s !== '.') : [...host.search],
    options: o.options?.length ? [...o.options] : [...host.options],
  };
}

function ndotsSource(host: ResolvConf, o: DnsOverrides): string {
  if (o.options?.length) return o.options.some((x) => optionName(x) === 'ndots') ? 'override' : '';
  return host.options.some((x) => optionName(x) === 'ndots') ? 'host' : '';
}

const optionName = (option: string) => option.split(':')[0];

/** An ndots option the resolver would take (a number, zero or more); other options pass. */
function validNdots(option: string): boolean {
  if (optionName(option) !== 'ndots') return true;
  return /^ndots:\d+$/.test(option);
}

const unzoned = (ip: string) => ip.split('%')[0]!;

/** 127.0.0.0/8 and ::1, IPv4-mapped forms included (Go's netip.Addr.IsLoopback). */
const LOOPBACK = new BlockList();
LOOPBACK.addSubnet('127.0.0.0', 8, 'ipv4');
LOOPBACK.addAddress('::1', 'ipv6');

function isLoopback(ip: string): boolean {
  const a = unzoned(ip);
  return LOOPBACK.check(a, isIP(a) === 4 ? 'ipv4' : 'ipv6');
}

/** The file's text, with dockerd's trailing comments saying where it came from. */
function generate(rc: ResolvConf, transform: string, notes: string[], o: DnsOverrides, ndotsFrom: string): string {
  const lines = ['# Generated by berth.', ''];
  for (const ns of rc.nameservers) lines.push(`nameserver ${ns}`);
  if (rc.search.length > 0) lines.push(`search ${rc.search.join(' ')}`);
  if (rc.options.length > 0) lines.push(`options ${rc.options.join(' ')}`);
  lines.push(...rc.other, '');
  lines.push(`# Based on host file: '${rc.source}' (${transform})`);
  lines.push(...notes.map((n) => `# ${n}`));
  if (rc.invalid.length > 0) lines.push(`# Invalid nameservers: [${rc.invalid.join(' ')}]`);
  const overridden = [
    ...(o.dns?.length ? ['nameservers'] : []),
    ...(o.search?.length ? ['search'] : []),
    ...(o.options?.length ? ['options'] : []),
  ];
  lines.push(`# Overrides: [${overridden.join(' ')}]`);
  if (ndotsFrom) lines.push(`# Option ndots from: ${ndotsFrom}`);
  return `${lines.join('\n')}\n`;
}
