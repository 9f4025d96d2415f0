// The sockets berthd holds on published host ports. Holding one reserves the
// port (another process, or another berthd, gets EADDRINUSE), as dockerd's
// port allocator does. The TCP one is also dockerd's userland proxy: a
// connection that reaches it (DNAT did not apply: the firewall is disabled, or
// an address DNAT does not see) is piped to the container's address and port.
// With the proxy off (`userland-proxy: false`) it only holds the port, as
// dockerd's dummy proxy does: a connection that reaches it is closed at once.
// A UDP port is held by a bound socket whose datagrams are dropped. SCTP has no
// socket in Node: its ports are reserved among berth's own mappings only.
import dgram from 'node:dgram';
import net from 'node:net';
import type { Proto } from './rules.js';

export interface Held {
  /** Stops listening and drops the connections it proxies; resolves once the port is free. */
  close(): Promise<void>;
}

export interface Target {
  host: string;
  port: number;
}

/** Pipes each connection to the target, both ways, half-closes passed on; an error on either side ends both. */
function proxyServer(target: Target): { server: net.Server; open: Set<net.Socket> } {
  const open = new Set<net.Socket>();
  const server = net.createServer({ allowHalfOpen: true, pauseOnConnect: true }, (client) => {
    const upstream = net.connect({ host: target.host, port: target.port, allowHalfOpen: true });
    const end = () => {
      client.destroy();
      upstream.destroy();
      open.delete(client);
      open.delete(upstream);
    };
    open.add(client).add(upstream);
    client.on('error', end).on('close', end);
    upstream.on('error', end).on('close', end);
    upstream.once('connect', () => {
      client.pipe(upstream);
      upstream.pipe(client);
      client.resume();
    });
  });
  return { server, open };
}

/** Holds the port and nothing more: each connection that reaches it is reset. */
function holdingServer(): { server: net.Server; open: Set<net.Socket> } {
  return { server: net.createServer((client) => client.resetAndDestroy()), open: new Set() };
}

function holdTcp(host: string, port: number, target: Target | null): Promise<Held> {
  const { server, open } = target ? proxyServer(target) : holdingServer();
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    // :: is IPv6's own (IPV6_V6ONLY), as dockerd binds it: 0.0.0.0 is held apart.
    server.listen({ host, port, exclusive: true, ipv6Only: host.includes(':') }, () => {
      server.off('error', reject);
      // Errors after listening are a client's (ECONNRESET on accept…): never fatal to berthd.
      server.on('error', () => undefined);
      resolve({
        close: () =>
          new Promise<void>((done) => {
            server.close(() => done());
            for (const s of open) s.destroy();
          }),
      });
    });
  });
}

function holdUdp(host: string, port: number): Promise<Held> {
  const v6 = host.includes(':');
  const socket = dgram.createSocket({ type: v6 ? 'udp6' : 'udp4', reuseAddr: false, ipv6Only: v6 });
  return new Promise((resolve, reject) => {
    socket.once('error', reject);
    socket.bind({ address: host, port, exclusive: true }, () => {
      socket.off('error', reject);
      socket.on('error', () => undefined);
      resolve({ close: () => new Promise<void>((done) => socket.close(() => done())) });
    });
  });
}

const NOTHING: Held = { close: async () => undefined };

/**
 * Binds the host port (rejects with the system error, e.g. EADDRINUSE, when it
 * cannot); a TCP one proxies to `target`, or to nothing when it is null.
 */
export function hold(proto: Proto, host: string, port: number, target: Target | null): Promise<Held> {
  if (proto === 'tcp') return holdTcp(host, port, target);
  if (proto === 'udp') return holdUdp(host, port);
  return Promise.resolve(NOTHING);
}
