// One berthd per default bridge. Two daemons with other data roots on one
// bridge would each take the bridge's address as theirs, hand out the same
// container addresses on it and rewrite its firewall rules under each other,
// so the second is refused at its start. The claim is an abstract unix socket
// named after the bridge: it lives in the network namespace the bridge lives
// in, leaves no file behind, and goes with the process however it ends. It
// answers who holds it, for the refusal's words.
import net from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';

const addressOf = (bridge: string) => `\0berth-bridge/${bridge}`;

export type Claim = { server: net.Server } | { holder: string };

/** The bridge claimed for this process (its server; close it to let go), or who holds it. */
export function claimBridge(bridge: string, dataRoot: string): Promise<Claim> {
  const server = net.createServer((sock) => {
    sock.on('error', () => {});
    sock.end(`pid ${process.pid}, data root ${dataRoot}`);
  });
  return new Promise((resolve, reject) => {
    server.once('error', (e: NodeJS.ErrnoException) => {
      if (e.code !== 'EADDRINUSE') reject(e);
      else void holderOf(bridge).then((holder) => resolve({ holder }));
    });
    server.listen(addressOf(bridge), () => {
      server.unref();
      resolve({ server });
    });
  });
}

/** What the holder says of itself; "unknown" when it does not answer in a second. */
async function holderOf(bridge: string): Promise<string> {
  const said = new Promise<string>((resolve) => {
    const sock = net.connect(addressOf(bridge));
    let text = '';
    sock.setEncoding('utf8');
    sock.on('data', (d) => {
      text += d;
    });
    sock.on('end', () => resolve(text.trim() || 'unknown'));
    sock.on('error', () => resolve('unknown'));
  });
  return Promise.race([said, sleep(1000, 'unknown')]);
}
