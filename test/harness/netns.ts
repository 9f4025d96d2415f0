// Network namespaces for networking tests, so the host's interfaces and
// iptables are never touched: a "host" namespace with bridges, "containers"
// (namespaces on veths into a bridge) and an "outside" namespace on an uplink.
// Every namespace and server made here is removed by cleanUp(), and namespaces
// left by a test process that died are removed by the next one.
import { type ChildProcess, execFileSync, spawn, spawnSync } from 'node:child_process';
import { mkdirSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const BUSYBOX = '/bin/busybox';
const PREFIX = 'berthtest-';

export const nsPath = (ns: string) => `/run/netns/${ns}`;

/** Runs a command in the namespace (or on the real host when ns is null); throws with its stderr on failure. */
export function inNs(ns: string | null, cmd: string[], input?: string): string {
  const [file, args] = ns ? ['nsenter', [`--net=${nsPath(ns)}`, '--', ...cmd]] : [cmd[0]!, cmd.slice(1)];
  return execFileSync(file, args, { input, encoding: 'utf8', stdio: ['pipe', 'pipe', 'pipe'] });
}

/** `ip` commands, one a line, run as one batch in the namespace. */
export function ipBatch(ns: string, lines: string[]): void {
  execFileSync('ip', ['-n', ns, '-batch', '-'], { input: `${lines.join('\n')}\n`, stdio: ['pipe', 'pipe', 'pipe'] });
}

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

/** Namespaces of test processes that are gone (killed before their clean-up ran). */
function removeStale(): void {
  let names: string[] = [];
  try {
    names = readdirSync('/run/netns');
  } catch {
    return;
  }
  for (const n of names.filter((n) => n.startsWith(PREFIX))) {
    const pid = Number(n.slice(PREFIX.length).split('-')[0]);
    if (pid && !alive(pid)) spawnSync('ip', ['netns', 'del', n]);
  }
}

export interface Bridge {
  name: string;
  /** The bridge's own address and prefix length: `10.231.1.1/24`. */
  gateway: string;
}

export interface Container {
  ns: string;
  ip: string;
}

/**
 * A test topology. Namespace names carry the test process's pid (stale ones
 * are found by it); interface names only need to be unique in their namespace.
 */
export class Topology {
  readonly host: string;
  private readonly namespaces: string[] = [];
  private readonly servers: ChildProcess[] = [];
  private readonly dirs: string[] = [];
  private veths = 0;

  constructor(readonly tag: string) {
    removeStale();
    this.host = this.namespace('host');
    // Forwarding is the host's job in production (berth's links set it); here the test does.
    inNs(this.host, ['sysctl', '-qw', 'net.ipv4.ip_forward=1']);
  }

  namespace(role: string): string {
    const ns = `${PREFIX}${process.pid}-${this.tag}-${role}`;
    spawnSync('ip', ['netns', 'del', ns]);
    execFileSync('ip', ['netns', 'add', ns]);
    this.namespaces.push(ns);
    ipBatch(ns, ['link set lo up']);
    return ns;
  }

  /** A bridge in the host namespace, with route_localnet on as berth's links set it (127.0.0.1 DNAT needs it). */
  bridge(name: string, gateway: string): Bridge {
    ipBatch(this.host, [`link add ${name} type bridge`, `addr add ${gateway} dev ${name}`, `link set ${name} up`]);
    inNs(this.host, ['sysctl', '-qw', `net.ipv4.conf.${name}.route_localnet=1`]);
    return { name, gateway };
  }

  /** A "container": its own namespace on a veth into the bridge, hairpin on (a container reaching its own published port). */
  container(role: string, bridge: Bridge, ip: string): Container {
    const ns = this.namespace(role);
    const [gw, len] = bridge.gateway.split('/');
    const veth = `veth${this.veths++}`;
    ipBatch(this.host, [
      `link add ${veth} type veth peer name eth0 netns ${ns}`,
      `link set ${veth} master ${bridge.name}`,
      `link set ${veth} type bridge_slave hairpin on`,
      `link set ${veth} up`,
    ]);
    ipBatch(ns, [`addr add ${ip}/${len} dev eth0`, 'link set eth0 up', `route add default via ${gw}`]);
    return { ns, ip };
  }

  /** An "outside" namespace on an uplink from the host: `hostAddr` and `outsideAddr` are CIDRs of one subnet. */
  outside(role: string, hostAddr: string, outsideAddr: string): string {
    const ns = this.namespace(role);
    ipBatch(this.host, [
      `link add up0 type veth peer name eth0 netns ${ns}`,
      `addr add ${hostAddr} dev up0`,
      'link set up0 up',
    ]);
    ipBatch(ns, [`addr add ${outsideAddr} dev eth0`, 'link set eth0 up']);
    return ns;
  }

  /** busybox httpd answering GET /cgi-bin/who in the namespace (see serveWho). */
  async serveWho(ns: string, name: string): Promise<void> {
    const { server, dir } = await serveWho(ns, name);
    this.servers.push(server);
    this.dirs.push(dir);
  }

  /** A UDP server on `port` in the namespace, answering each datagram with `<name> <sender address>`. */
  async serveWhoUdp(ns: string, name: string, port: number): Promise<void> {
    const code = `const s=require('node:dgram').createSocket('udp4');s.on('message',(m,r)=>s.send(process.argv[1]+' '+r.address,r.port,r.address));s.bind(${port},()=>console.log('up'))`;
    const server = spawn('nsenter', [`--net=${nsPath(ns)}`, '--', process.execPath, '-e', code, name], {
      stdio: ['ignore', 'pipe', 'ignore'],
    });
    this.servers.push(server);
    await new Promise<void>((resolve, reject) => {
      server.stdout!.once('data', () => resolve());
      server.once('exit', () => reject(new Error(`UDP server in ${ns} ended`)));
    });
  }

  cleanUp(): void {
    for (const s of this.servers.splice(0)) s.kill('SIGKILL');
    for (const ns of this.namespaces.splice(0)) spawnSync('ip', ['netns', 'del', ns]);
    for (const d of this.dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  }
}

/**
 * busybox httpd on port 80 in the namespace, answering GET /cgi-bin/who with
 * `<name> <client address>`: who answered, and whom it saw. The caller kills
 * the server and removes its directory.
 */
export async function serveWho(ns: string, name: string): Promise<{ server: ChildProcess; dir: string }> {
  const dir = path.join(os.tmpdir(), `${ns}-www`);
  mkdirSync(path.join(dir, 'cgi-bin'), { recursive: true });
  const script = '#!/bin/sh\nprintf "Content-Type: text/plain\\n\\n%s %s\\n" "$NAME" "$REMOTE_ADDR"\n';
  writeFileSync(path.join(dir, 'cgi-bin/who'), script, { mode: 0o755 });
  const server = spawn('nsenter', [`--net=${nsPath(ns)}`, '--', BUSYBOX, 'httpd', '-f', '-p', '80', '-h', dir], {
    env: { ...process.env, NAME: name },
    stdio: 'ignore',
  });
  for (let i = 0; i < 100; i++) {
    if (who(ns, '127.0.0.1', 80)?.startsWith(name)) return { server, dir };
    await new Promise((r) => setTimeout(r, 50));
  }
  server.kill('SIGKILL');
  rmSync(dir, { recursive: true, force: true });
  throw new Error(`httpd in ${ns} did not answer`);
}

/**
 * A machine "outside" the real host, for a real berthd's outbound traffic: a
 * namespace on a veth from the host (host side `ifname`), `hostAddr` and
 * `outsideAddr` CIDRs of one private subnet, and the who server on port 80.
 * The host's own interfaces and routes are not touched (the veth and its
 * connected route go with the namespace).
 */
export class HostUplink {
  readonly ns: string;
  readonly ifname: string;
  private server?: ChildProcess;
  private dir?: string;

  constructor(tag: string, hostAddr: string, outsideAddr: string) {
    removeStale();
    this.ns = `${PREFIX}${process.pid}-${tag}-outside`;
    this.ifname = `bu${tag}`.slice(0, 15);
    spawnSync('ip', ['netns', 'del', this.ns]);
    execFileSync('ip', ['netns', 'add', this.ns]);
    ipBatch(this.ns, ['link set lo up']);
    execFileSync('ip', ['-batch', '-'], {
      input: [
        `link add ${this.ifname} type veth peer name eth0 netns ${this.ns}`,
        `addr add ${hostAddr} dev ${this.ifname}`,
        `link set ${this.ifname} up`,
        '',
      ].join('\n'),
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    ipBatch(this.ns, [`addr add ${outsideAddr} dev eth0`, 'link set eth0 up']);
  }

  async serveWho(name: string): Promise<void> {
    ({ server: this.server, dir: this.dir } = await serveWho(this.ns, name));
  }

  cleanUp(): void {
    this.server?.kill('SIGKILL');
    spawnSync('ip', ['netns', 'del', this.ns]);
    spawnSync('ip', ['link', 'del', this.ifname]);
    if (this.dir) rmSync(this.dir, { recursive: true, force: true });
  }
}

/** The who server's answer as written: httpd listens on IPv6 too, so IPv4 clients show as [::ffff:a.b.c.d]. */
export const whoAnswer = (body: string) => body.trim().replace(/\[::ffff:([\d.]+)\]/, '$1');

/**
 * GET /cgi-bin/who from inside `ns` (null: the real host) to addr:port with
 * busybox nc: `<server name> <client address as the server saw it>`, or null
 * when no connection was made (refused, dropped, unreachable).
 */
export function who(ns: string | null, addr: string, port: number, waitSeconds = 2): string | null {
  try {
    const out = inNs(
      ns,
      ['timeout', String(waitSeconds + 2), BUSYBOX, 'nc', '-w', String(waitSeconds), addr, String(port)],
      'GET /cgi-bin/who HTTP/1.0\r\n\r\n',
    );
    const body = out.trim().split('\n').pop()?.trim() ?? '';
    return whoAnswer(body) || null;
  } catch {
    return null;
  }
}

/** One datagram from inside `ns` to addr:port: the answer, or null when none came within a second. */
export function whoUdp(ns: string, addr: string, port: number): string | null {
  const code = `const s=require('node:dgram').createSocket('udp4');s.on('message',(m)=>{console.log(String(m));process.exit(0)});setTimeout(()=>process.exit(1),1000);s.send('who',${port},'${addr}')`;
  try {
    return inNs(ns, [process.execPath, '-e', code]).trim();
  } catch {
    return null;
  }
}
