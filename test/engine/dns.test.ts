// Names on user networks through the real aardvark-dns, all in network
// namespaces of the test's own: a "host" with two bridges (networks a and b),
// containers on veths asking with busybox nslookup or the C library, an
// upstream resolver on the host's 127.0.0.53 (as systemd-resolved's) named by
// the host's resolv.conf. Every namespace, file and process is removed even
// when a test fails.
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Dns, type DnsEntry, type DnsNetwork } from '../../src/engine/network/dns.js';
import { parseResolvConf, resolvConf } from '../../src/engine/network/resolvconf.js';
import { processEnded } from '../../src/engine/runtime/proc.js';
import { isEngineError } from '../../src/errors.js';
import { createLogger } from '../../src/log.js';
import { getaddrinfo, lookup, setNsResolvConf, startAsker, startUpstream, type Upstream } from '../harness/dns.js';
import { type Container, Topology } from '../harness/netns.js';

const AARDVARK = '/usr/lib/podman/aardvark-dns';
const GW_A = '10.89.1.1';
const GW_B = '10.89.2.1';
const OUTSIDE = '203.0.113.7';
const CUSTOM_UPSTREAM = '198.51.100.9';

let topo: Topology;
let c1: Container; // network a: the one asking
let c2: Container; // network a: web
let c3: Container; // network b: other
let c4: Container; // network a: a bystander
let root: string;
let configDir: string;
let upstream: Upstream;
const records: { msg?: string }[] = [];
const cleanups: (() => unknown)[] = [];

const logger = createLogger('debug', { write: (s: string) => void records.push(JSON.parse(s)) });
const newDns = () => new Dns({ configDir, binary: AARDVARK, logger, netns: topo.host });
let dns: Dns;

/** A container id as dockerd makes them: 64 hex digits. */
const id = (n: number) => createHash('sha256').update(String(n)).digest('hex');
const entry = (n: number, ipv4: string, ...names: string[]): DnsEntry => ({
  containerId: id(n),
  ipv4,
  names: [...names, id(n).slice(0, 12)],
});
const networkA = (): DnsNetwork => ({
  name: 'neta',
  gatewayIp: GW_A,
  entries: [entry(1, c1.ip, 'client'), entry(2, c2.ip, 'web', 'frontend')],
});
const networkB = (): DnsNetwork => ({ name: 'netb', gatewayIp: GW_B, entries: [entry(3, c3.ip, 'other')] });

/** Every live aardvark-dns on the test's directory. */
function aardvarks(): number[] {
  return readdirSync('/proc')
    .filter((p) => /^\d+$/.test(p))
    .filter((p) => {
      try {
        const argv = readFileSync(`/proc/${p}/cmdline`, 'utf8').split('\0');
        return argv[0]?.endsWith('aardvark-dns') && argv.includes(configDir);
      } catch {
        return false;
      }
    })
    .map(Number)
    .filter((pid) => !processEnded(pid));
}

beforeAll(async () => {
  topo = new Topology('dns');
  cleanups.push(() => topo.cleanUp());
  const a = topo.bridge('bra', `${GW_A}/24`);
  const b = topo.bridge('brb', `${GW_B}/24`);
  c1 = topo.container('c1', a, '10.89.1.2');
  c2 = topo.container('c2', a, '10.89.1.3');
  c3 = topo.container('c3', b, '10.89.2.2');
  c4 = topo.container('c4', a, '10.89.1.8');
  cleanups.push(setNsResolvConf(topo.host, 'search example.org\nnameserver 127.0.0.53\n'));
  upstream = await startUpstream(topo.host, '127.0.0.53', OUTSIDE);
  cleanups.push(() => upstream.stop());
  root = await mkdtemp(path.join(os.tmpdir(), 'berth-dns-'));
  cleanups.push(() => rm(root, { recursive: true, force: true }));
  configDir = path.join(root, 'run/dns');
  // Whatever a failed test left running on the directory goes first.
  cleanups.push(() => {
    for (const pid of aardvarks()) process.kill(pid, 'SIGKILL');
  });
  dns = newDns();
  await dns.setNetwork('neta', GW_A, networkA().entries);
});

afterAll(async () => {
  await dns?.reconcile([]).catch((e) => console.error('dns clean-up:', e));
  for (const fn of cleanups.splice(0).reverse()) {
    try {
      await fn();
    } catch (e) {
      console.error('clean-up:', e);
    }
  }
});

describe('names on a network', () => {
  it('resolves a container by name, alias and short id, in any case, from another container', async () => {
    for (const name of ['web', 'frontend', id(2).slice(0, 12), 'WEB']) {
      expect(await lookup(c1.ns, name, GW_A), name).toEqual([c2.ip]);
    }
    expect(await lookup(c2.ns, 'client', GW_A)).toEqual([c1.ip]);
  });

  it('answers for an entry once addEntry resolves, and no more once removeEntry does', async () => {
    await dns.addEntry('neta', GW_A, entry(4, '10.89.1.4', 'db'));
    expect(await lookup(c1.ns, 'db', GW_A)).toEqual(['10.89.1.4']);
    await dns.removeEntry('neta', id(4));
    expect(await lookup(c1.ns, 'db', GW_A)).toEqual([]);
    expect(await lookup(c1.ns, 'web', GW_A)).toEqual([c2.ip]);
  });

  it('answers with a change the moment its promise resolves (a question sent right then, asked once)', async () => {
    const asker = await startAsker(c1.ns);
    cleanups.push(() => asker.stop());
    for (let i = 0; i < 10; i++) {
      await dns.addEntry('neta', GW_A, entry(10 + i, `10.89.1.${10 + i}`, `quick${i}`));
      expect(await asker.ask(`quick${i}`, GW_A)).toEqual({
        name: `quick${i}`,
        rcode: 0,
        answers: [`10.89.1.${10 + i}`],
      });
      await dns.removeEntry('neta', id(10 + i));
      expect(await asker.ask(`quick${i}`, GW_A)).toEqual({ name: `quick${i}`, rcode: 3, answers: [] });
    }
  });

  it('gives every address of a name shared by several containers', async () => {
    await dns.addEntry('neta', GW_A, entry(5, '10.89.1.5', 'pool'));
    await dns.addEntry('neta', GW_A, entry(6, '10.89.1.6', 'pool'));
    expect((await lookup(c1.ns, 'pool', GW_A)).sort()).toEqual(['10.89.1.5', '10.89.1.6']);
    await Promise.all([dns.removeEntry('neta', id(5)), dns.removeEntry('neta', id(6))]);
  });

  it('keeps two networks apart: neither resolves the names of the other', async () => {
    const b = networkB();
    await dns.setNetwork(b.name, b.gatewayIp, b.entries);
    expect(await lookup(c3.ns, 'other', GW_B)).toEqual([c3.ip]);
    expect(await lookup(c3.ns, 'web', GW_B)).toEqual([]);
    expect(await lookup(c1.ns, 'other', GW_A)).toEqual([]);
    expect(await lookup(c1.ns, 'web', GW_A)).toEqual([c2.ip]);
  });

  it('takes 20 entries added at once in one or two reloads, all answered when their promises resolve', async () => {
    const applied = () => records.filter((r) => r.msg === 'DNS records applied').length;
    const before = applied();
    const batch = Array.from({ length: 20 }, (_, i) => entry(100 + i, `10.89.1.${100 + i}`, `burst${i}`));
    await Promise.all(batch.map((e) => dns.addEntry('neta', GW_A, e)));
    expect(applied() - before).toBeLessThanOrEqual(2);
    for (const i of [0, 7, 19]) expect(await lookup(c1.ns, `burst${i}`, GW_A)).toEqual([`10.89.1.${100 + i}`]);
    await Promise.all(batch.map((e) => dns.removeEntry('neta', e.containerId)));
    expect(await lookup(c1.ns, 'burst7', GW_A)).toEqual([]);
  });

  it('refuses what would break the file, and keeps answering', async () => {
    const pid = dns.pid;
    for (const bad of [
      () => dns.addEntry('neta', GW_A, entry(7, '10.89.1.7', 'two words')),
      () => dns.addEntry('neta', GW_A, entry(7, '10.89.1.7', 'a,b')),
      () => dns.addEntry('neta', GW_A, entry(7, 'not-an-ip', 'x')),
      () => dns.addEntry('aardvark.pid', GW_A, entry(7, '10.89.1.7', 'x')),
      () => dns.setNetwork('../escape', GW_A, []),
    ]) {
      const err = await bad().catch((e: unknown) => e);
      expect(isEngineError(err, 'invalid'), String(err)).toBe(true);
    }
    expect(dns.pid).toBe(pid);
    expect(await lookup(c1.ns, 'web', GW_A)).toEqual([c2.ip]);
  });
});

describe("a link's alias (EndpointSettings.Links)", () => {
  it('resolves for the linking container alone, through reloads, which keeps its own servers', async () => {
    const custom = await startUpstream(topo.host, '127.0.0.55', CUSTOM_UPSTREAM);
    cleanups.push(() => custom.stop());
    await dns.addEntry('neta', GW_A, entry(8, c4.ip, 'bystander'));
    await dns.addEntry('neta', GW_A, {
      ...entry(1, c1.ip, 'client'),
      dnsServers: ['127.0.0.55'],
      links: [{ target: 'web', alias: 'backend' }],
    });
    for (let round = 0; round < 5; round++) {
      expect({ round, linker: await lookup(c1.ns, 'backend', GW_A) }).toEqual({ round, linker: [c2.ip] });
      // Whichever file the daemon read last: neither the gateway's listener nor the address's servers change.
      expect({ round, bystander: await lookup(c4.ns, 'backend', GW_A) }).toEqual({ round, bystander: [] });
      expect({ round, upstream: await lookup(c1.ns, 'outside.example.com', GW_A) }).toEqual({
        round,
        upstream: [CUSTOM_UPSTREAM],
      });
      await dns.addEntry('neta', GW_A, entry(9, '10.89.1.9', `reload${round}`));
    }
    await dns.addEntry('neta', GW_A, entry(1, c1.ip, 'client'));
    expect(await lookup(c1.ns, 'backend', GW_A)).toEqual([]);
    expect(readdirSync(configDir).filter((f) => f.includes('.links.'))).toEqual([]);
    await Promise.all([dns.removeEntry('neta', id(8)), dns.removeEntry('neta', id(9))]);
  });
});

describe('names elsewhere', () => {
  it("forwards other names to the servers of the host's resolv.conf (a loopback one included)", async () => {
    expect(await lookup(c1.ns, 'outside.example.com', GW_A)).toEqual([OUTSIDE]);
    expect(upstream.queries).toContain('outside.example.com 1');
  });

  it("forwards a container's names to its own servers when it has some (HostConfig.Dns)", async () => {
    const custom = await startUpstream(topo.host, '127.0.0.54', CUSTOM_UPSTREAM);
    cleanups.push(() => custom.stop());
    await dns.addEntry('neta', GW_A, { ...entry(2, c2.ip, 'web', 'frontend'), dnsServers: ['127.0.0.54'] });
    expect(await lookup(c2.ns, 'outside.example.com', GW_A)).toEqual([CUSTOM_UPSTREAM]);
    expect(await lookup(c1.ns, 'outside.example.com', GW_A)).toEqual([OUTSIDE]);
    await dns.addEntry('neta', GW_A, entry(2, c2.ip, 'web', 'frontend'));
  });

  it("makes a container's resolver (through the resolv.conf it gets) find its network's names and others", async () => {
    const host = parseResolvConf('search example.org\nnameserver 127.0.0.53\n', '/etc/resolv.conf');
    const text = resolvConf(GW_A, {}, host);
    expect(text).toMatch(/^nameserver 10\.89\.1\.1\nsearch example\.org\noptions ndots:0$/m);
    cleanups.push(setNsResolvConf(c1.ns, text));
    expect(await getaddrinfo(c1.ns, 'web')).toEqual([c2.ip]);
    expect(await getaddrinfo(c1.ns, 'outside.example.com')).toEqual([OUTSIDE]);
  });
});

describe('the daemon', () => {
  it('is adopted, not started twice, by a new Dns after a restart, which rewrites the files from its state', async () => {
    const pid = dns.pid;
    expect(pid).not.toBeNull();
    // While "berthd" was away: web left network a, and a file of a network that is gone stayed.
    await writeFile(path.join(configDir, 'gone'), `10.89.9.1\n${id(9)} 10.89.9.2  ghost\n`);
    dns = newDns();
    const a = networkA();
    await dns.reconcile([{ ...a, entries: a.entries.filter((e) => e.containerId !== id(2)) }, networkB()]);
    expect(dns.pid).toBe(pid);
    expect(aardvarks()).toEqual([pid]);
    expect(readdirSync(configDir).sort()).toEqual(['aardvark.pid', 'neta', 'netb']);
    expect(await lookup(c1.ns, 'web', GW_A)).toEqual([]);
    expect(await lookup(c2.ns, 'client', GW_A)).toEqual([c1.ip]);
    expect(await lookup(c3.ns, 'other', GW_B)).toEqual([c3.ip]);
    await dns.addEntry('neta', GW_A, entry(2, c2.ip, 'web', 'frontend'));
    expect(await lookup(c1.ns, 'web', GW_A)).toEqual([c2.ip]);
  });

  it('is started again at the next change after it died', async () => {
    const pid = dns.pid!;
    process.kill(pid, 'SIGKILL');
    while (!processEnded(pid)) await new Promise((r) => setTimeout(r, 5));
    await dns.addEntry('neta', GW_A, entry(8, '10.89.1.8', 'late'));
    expect(dns.pid).not.toBe(pid);
    expect(aardvarks()).toEqual([dns.pid]);
    expect(await lookup(c1.ns, 'late', GW_A)).toEqual(['10.89.1.8']);
    await dns.removeEntry('neta', id(8));
  });

  it('stops with the last container of the last network, and starts with the next one', async () => {
    const pid = dns.pid!;
    await dns.removeNetwork('netb');
    expect(dns.pid).toBe(pid);
    for (const e of networkA().entries) await dns.removeEntry('neta', e.containerId);
    expect(dns.pid).toBeNull();
    expect(processEnded(pid)).toBe(true);
    expect(readdirSync(configDir)).toEqual([]);
    await dns.setNetwork('neta', GW_A, networkA().entries);
    expect(dns.pid).not.toBeNull();
    expect(await lookup(c1.ns, 'web', GW_A)).toEqual([c2.ip]);
  });

  it('replaces a daemon a former berthd ran on the directory with other arguments (another port)', async () => {
    await dns.reconcile([]);
    const other = new Dns({ configDir, binary: AARDVARK, logger, netns: topo.host, port: 5353 });
    await other.reconcile([networkA()]);
    const old = other.pid!;
    dns = newDns();
    await dns.reconcile([networkA()]);
    expect(processEnded(old)).toBe(true);
    expect(aardvarks()).toEqual([dns.pid]);
    expect(await lookup(c1.ns, 'web', GW_A)).toEqual([c2.ip]);
  });

  it('does not take a pid file naming another process for its daemon', async () => {
    await dns.reconcile([]);
    expect(aardvarks()).toEqual([]);
    await writeFile(path.join(configDir, 'aardvark.pid'), String(process.pid));
    dns = newDns();
    await dns.reconcile([networkA()]);
    expect(dns.pid).not.toBe(process.pid);
    expect(aardvarks()).toEqual([dns.pid]);
    expect(await lookup(c1.ns, 'web', GW_A)).toEqual([c2.ip]);
  });
});
