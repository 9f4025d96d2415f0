// The default bridge across daemons: berthd takes the address its bridge
// already has (as dockerd takes docker0's) instead of adding one at each start
// with a fresh data root, a second berthd on a bridge in use is refused at its
// start, and a berthd that stops leaves the host as it found it. What CI does:
// many daemons, one after another, each with a data root of its own.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { runProcess } from '../harness/clients.js';
import { BERTHD, type Daemon, startDaemon } from '../harness/daemon.js';
import { networkSetup, tearDownAfterAll } from '../harness/network.js';

const net = networkSetup();
tearDownAfterAll(net);
/** The test's bridge, chains and pool, but no --bip: the address is berthd's to choose, or to find. */
const args = (() => {
  const a = [...net.args];
  a.splice(a.indexOf('--bip'), 2);
  return a;
})();

const ip = (...a: string[]) => execFileSync('ip', a, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });

/** The bridge's IPv4 addresses with prefix ([] while there is no bridge). */
function bridgeAddresses(): string[] {
  try {
    const [link] = JSON.parse(ip('-j', '-4', 'addr', 'show', 'dev', net.bridge)) as {
      addr_info: { local: string; prefixlen: number }[];
    }[];
    return (link?.addr_info ?? []).map((a) => `${a.local}/${a.prefixlen}`);
  } catch {
    return [];
  }
}

/** What a berthd of this test holds on the host: the bridge's addresses and ports, its rules, its processes. */
function hostState() {
  const rules = ['filter', 'nat']
    .flatMap((t) => execFileSync('iptables-save', ['-t', t], { encoding: 'utf8' }).split('\n'))
    .filter((l) => l.includes(net.prefix) || l.includes(net.bridge))
    .map((l) => l.replace(/\[\d+:\d+\]/, ''));
  let ports = '';
  try {
    ports = ip('-o', 'link', 'show', 'master', net.bridge);
  } catch {
    // no bridge
  }
  return { addresses: bridgeAddresses(), ports: ports.trim(), rules: rules.sort() };
}

async function withDaemon<T>(fn: (d: Daemon) => Promise<T>): Promise<T> {
  const d = await startDaemon({ args });
  try {
    return await fn(d);
  } finally {
    await d.cleanup();
  }
}

describe('the default bridge across daemons with fresh data roots', () => {
  it('40 daemons one after another: the bridge keeps one address, networks are still made, each stop leaves the host as found', async () => {
    let first = '';
    let before = hostState();
    for (let round = 1; round <= 40; round++) {
      // A bridge that gathered several addresses (as earlier berthds left it) is brought back to one.
      if (round === 20) ip('addr', 'add', '10.254.254.1/24', 'dev', net.bridge);
      const seen = await withDaemon(async (d) => {
        const addresses = bridgeAddresses();
        const bridge = (await d.request('GET', '/networks/bridge')).json;
        const made = await d.request('POST', '/networks/create', { body: { Name: `n${round}` } });
        if (made.status === 201) await d.request('DELETE', `/networks/${made.json.Id}`);
        return { addresses, ipam: bridge.IPAM.Config[0], made: made.status, message: made.json?.message };
      });
      expect({ round, addresses: seen.addresses }).toEqual({ round, addresses: [first || seen.addresses[0]] });
      first ||= seen.addresses[0]!;
      const [gateway, prefix] = first.split('/');
      expect(seen.ipam.Gateway).toBe(gateway);
      expect(seen.ipam.Subnet.split('/')[1]).toBe(prefix);
      expect({ round, made: seen.made, message: seen.message }).toEqual({ round, made: 201, message: undefined });
      const after = hostState();
      // The first daemon made the bridge (and its rules), which stay as dockerd leaves docker0; from then on nothing changes.
      if (round > 1) expect({ round, ...after }).toEqual({ round, ...before, addresses: [first] });
      before = after;
    }
  }, 600_000);

  it('a second berthd on a bridge another one uses is refused at its start, saying which', async () => {
    await withDaemon(async (first) => {
      const dir = mkdtempSync(path.join(os.tmpdir(), 'berth-'));
      writeFileSync(path.join(dir, 'daemon.json'), '{}\n');
      const second = await runProcess(
        process.execPath,
        [
          BERTHD,
          '-H',
          `unix://${dir}/sock`,
          '--data-root',
          `${dir}/data`,
          '--exec-root',
          `${dir}/exec`,
          '--config-file',
          `${dir}/daemon.json`,
          ...args,
        ],
        { timeoutMs: 30_000 },
      ).finally(() => rmSync(dir, { recursive: true, force: true }));
      expect(second.code).toBe(1);
      expect(second.stderr).toContain(
        `another berthd (pid ${first.proc.pid}, data root ${first.dataRoot}) is already using bridge ${net.bridge}`,
      );
      // The first one still serves, on the bridge's one address.
      expect((await first.request('GET', '/_ping')).status).toBe(200);
      expect(bridgeAddresses()).toHaveLength(1);
    });
    // Once it stopped, the bridge is free again.
    await withDaemon(async (d) => expect((await d.request('GET', '/_ping')).status).toBe(200));
  }, 120_000);
});
