// A berthd with networking, kept apart from every other on the host: its own
// default bridge name and subnet, its own pool for user networks, its own
// iptables chains. What it made on the host goes when the test file ends.
import { execFileSync } from 'node:child_process';
import { randomBytes, randomInt } from 'node:crypto';
import { afterAll } from 'vitest';
import { Firewall } from '../../src/engine/network/firewall.js';

export interface NetworkSetup {
  /** berthd's flags for it. */
  args: string[];
  /** The default bridge's interface. */
  bridge: string;
  /** Its gateway address, e.g. 10.201.7.1 */
  gateway: string;
  prefix: string;
  /** Removes the bridges, the chains and the jumps this daemon made (after it stopped). */
  teardown(): Promise<void>;
}

export function networkSetup(): NetworkSetup {
  const tag = randomBytes(3).toString('hex');
  const bridge = `bt${tag}`;
  const prefix = `T${tag}`.toUpperCase();
  const gateway = `10.${randomInt(200, 250)}.${randomInt(0, 250)}.1`;
  const poolOctet = randomInt(150, 199);
  const pool = `base=10.${poolOctet}.0.0/16,size=24`;
  return {
    args: [
      '--bridge',
      bridge,
      '--bip',
      `${gateway}/24`,
      '--default-address-pool',
      pool,
      '--iptables-chain-prefix',
      prefix,
    ],
    bridge,
    gateway,
    prefix,
    async teardown() {
      // The default bridge, and the user networks' bridges: those with an address from this daemon's pool.
      const addrs = JSON.parse(execFileSync('ip', ['-j', '-4', 'addr', 'show'], { encoding: 'utf8' })) as {
        ifname: string;
        addr_info: { local: string }[];
      }[];
      const users = addrs.filter((l) => l.addr_info.some((a) => a.local.startsWith(`10.${poolOctet}.`)));
      for (const b of [bridge, ...users.map((l) => l.ifname)]) {
        try {
          execFileSync('ip', ['link', 'del', b], { stdio: 'ignore' });
        } catch {
          // not there
        }
      }
      await new Firewall({ prefix }).teardown();
      await new Firewall({ prefix, family: 6 }).teardown();
    },
  };
}

/**
 * Tears the daemon's host side down once the file's tests end. Call before
 * useEnv: hooks after tests run last-registered first, so this runs once the
 * daemon has stopped.
 */
export function tearDownAfterAll(setup: NetworkSetup): void {
  afterAll(() => setup.teardown());
}
