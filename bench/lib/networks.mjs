// Daemons with their networking on: berthd with a bridge of its own, dockerd in a network namespace.
import { execFileSync, spawnSync } from 'node:child_process';
import crypto from 'node:crypto';
import { onCleanup } from './core.mjs';
import { startBerthd, startDockerd } from './daemons.mjs';
import { cmdline, pidsByComm } from './processes.mjs';

/**
 * berthd with networking on a default bridge, a pool and iptables chains of its
 * own (names from `id`); all removed at the end, aardvark-dns included.
 */
export async function berthdWithNetworks(id) {
  const { Firewall } = await import('../../dist/engine/network/firewall.js');
  const bridge = `bn${id}`;
  const prefix = `N${id}`.toUpperCase();
  const poolOctet = crypto.randomInt(150, 199);
  const made = new Set([bridge]);
  // Registered before the daemon starts, so it runs after the daemon has stopped.
  onCleanup(async () => {
    for (const b of made) spawnSync('ip', ['link', 'del', b], { stdio: 'ignore' });
    await new Firewall({ prefix }).teardown();
    await new Firewall({ prefix, family: 6 }).teardown();
  });
  const d = await startBerthd({
    args: [
      '--bridge',
      bridge,
      '--bip',
      `10.${crypto.randomInt(200, 250)}.${crypto.randomInt(0, 250)}.1/24`,
      '--default-address-pool',
      `base=10.${poolOctet}.0.0/16,size=24`,
      '--iptables-chain-prefix',
      prefix,
    ],
  });
  // aardvark-dns outlives berthd by design (a restarted berthd adopts it): ours goes at the end.
  onCleanup(() => {
    for (const pid of pidsByComm('aardvark-dns')) {
      if (!cmdline(pid).some((a) => a.includes(d.dir))) continue;
      try {
        process.kill(pid, 'SIGTERM');
      } catch {}
    }
  });
  d.bridges = made;
  return d;
}

/** dockerd with its default bridge and iptables, in a network namespace of its own (deleted at the end). */
export async function dockerdWithNetworks(id) {
  const ns = `berth-bench-dockerd-${id}`;
  execFileSync('ip', ['netns', 'add', ns]);
  onCleanup(() => execFileSync('ip', ['netns', 'del', ns]));
  execFileSync('ip', ['-n', ns, 'link', 'set', 'lo', 'up']);
  return startDockerd({
    netns: ns,
    args: [
      '--bip',
      `10.${crypto.randomInt(200, 250)}.${crypto.randomInt(0, 250)}.1/24`,
      '--default-address-pool',
      `base=10.${crypto.randomInt(150, 199)}.0.0/16,size=24`,
    ],
  });
}
