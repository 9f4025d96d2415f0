// Published ports: PortBindings as the API gives them, and the host ports
// berthd reserves by holding sockets on them (on 127.0.0.1 of the machine
// running the test, in ports found free), with dockerd's errors when a port is
// taken, and the userland proxy a held TCP port doubles as.
import dgram from 'node:dgram';
import net from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { HostPorts, mappingsOf, parsePortBindings } from '../../src/engine/network/ports.js';
import { isEngineError } from '../../src/errors.js';
import { refusal } from '../harness/errors.js';

const LO = '127.0.0.1';

describe('parsePortBindings', () => {
  it('reads the API shape: a port, an ephemeral one, a range, protocols, host addresses', () => {
    expect(
      parsePortBindings({
        '80/tcp': [{ HostIp: '', HostPort: '8080' }],
        '53/UDP': [{ HostIp: '127.0.0.1', HostPort: '' }],
        '443': [{ HostPort: '8000-8010' }],
        '9/sctp': [{ HostIp: '::ffff:10.0.0.1', HostPort: '0' }],
      }),
    ).toEqual([
      { proto: 'tcp', containerPort: 80, hostIp: '0.0.0.0', hostPort: 8080, hostPortEnd: 8080 },
      { proto: 'tcp', containerPort: 443, hostIp: '0.0.0.0', hostPort: 8000, hostPortEnd: 8010 },
      { proto: 'udp', containerPort: 53, hostIp: LO, hostPort: 0, hostPortEnd: 0 },
      { proto: 'sctp', containerPort: 9, hostIp: '10.0.0.1', hostPort: 0, hostPortEnd: 0 },
    ]);
  });

  it('PublishAllPorts adds an ephemeral port for each exposed port that has no binding', () => {
    const exposed = { '80/tcp': {}, '53/udp': {}, '8080/tcp': {} };
    expect(parsePortBindings({ '80/tcp': [{ HostPort: '80' }], '8080/tcp': [] }, exposed, true)).toEqual([
      { proto: 'tcp', containerPort: 80, hostIp: '0.0.0.0', hostPort: 80, hostPortEnd: 80 },
      { proto: 'tcp', containerPort: 8080, hostIp: '0.0.0.0', hostPort: 0, hostPortEnd: 0 },
      { proto: 'udp', containerPort: 53, hostIp: '0.0.0.0', hostPort: 0, hostPortEnd: 0 },
    ]);
    expect(parsePortBindings(null, exposed, false)).toEqual([]);
  });

  it('refuses what dockerd refuses, in its words', () => {
    expect(refusal(() => parsePortBindings({ '80/tcp': [{ HostPort: 'http' }] }))).toBe(
      'invalid port specification: "http"',
    );
    expect(refusal(() => parsePortBindings({ '80/tcp': [{ HostPort: '8010-8000' }] }))).toBe(
      'invalid port specification: "8010-8000"',
    );
    expect(refusal(() => parsePortBindings({ '70000/tcp': [] }))).toBe('invalid port specification: "70000"');
    expect(refusal(() => parsePortBindings({ '0/tcp': [] }))).toBe('invalid port specification: "0"');
    expect(refusal(() => parsePortBindings({ '80/icmp': [] }))).toMatch(/tcp, udp or sctp/);
    expect(refusal(() => parsePortBindings({ '80/tcp': [{ HostIp: 'nope', HostPort: '1' }] }))).toBe(
      'invalid IP address in port binding: "nope"',
    );
  });

  it('takes IPv6 host addresses, in the form inspect and ip6tables print', () => {
    const hosts = (ip: string) => parsePortBindings({ '80/tcp': [{ HostIp: ip, HostPort: '1' }] }).map((r) => r.hostIp);
    expect(hosts('::')).toEqual(['::']);
    expect(hosts('[::1]')).toEqual(['::1']);
    expect(hosts('FD00:0:0::0:2')).toEqual(['fd00::2']);
    expect(hosts('::ffff:127.0.0.1')).toEqual(['127.0.0.1']);
  });
});

/** Listens on port 0 to learn a free port, n times in a row from one base: a run of consecutive free ports. */
async function freeRun(n: number): Promise<number> {
  for (let tries = 0; tries < 50; tries++) {
    const base = 20000 + Math.floor(Math.random() * 10000);
    const ok = await Promise.all(Array.from({ length: n }, (_, i) => isFree(base + i)));
    if (ok.every(Boolean)) return base;
  }
  throw new Error('no run of free ports');
}

function isFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = net.createServer();
    s.once('error', () => resolve(false));
    s.listen({ host: LO, port, exclusive: true }, () => s.close(() => resolve(true)));
  });
}

const udpFree = (port: number): Promise<boolean> =>
  new Promise((resolve) => {
    const s = dgram.createSocket('udp4');
    s.once('error', () => resolve(false));
    s.bind({ address: LO, port, exclusive: true }, () => s.close(() => resolve(true)));
  });

const opened: net.Server[] = [];
let ports: HostPorts;

afterEach(async () => {
  await ports?.close();
  await Promise.all(opened.splice(0).map((s) => new Promise((r) => s.close(r))));
});

/** A server of another process's, as far as berth knows: holds the port, echoes with a greeting. */
function otherServer(port: number): Promise<net.Server> {
  const s = net.createServer((c) => {
    c.write('hello ');
    c.pipe(c);
  });
  opened.push(s);
  return new Promise((resolve) => s.listen({ host: LO, port }, () => resolve(s)));
}

const request = (hostPort: number, hostPortEnd = hostPort, proto: 'tcp' | 'udp' = 'tcp', hostIp = LO) => ({
  proto,
  containerPort: 80,
  hostIp,
  hostPort,
  hostPortEnd,
});

const message = (p: Promise<unknown>) =>
  p.then(
    () => 'resolved',
    (e: Error) => e.message,
  );

describe('HostPorts', () => {
  it('holds a TCP port: another process cannot take it until it is released', async () => {
    const port = await freeRun(1);
    ports = new HostPorts();
    expect(await ports.reserve('c1', '10.0.0.2', [request(port)])).toEqual([
      { proto: 'tcp', containerPort: 80, hostIp: LO, hostPort: port },
    ]);
    expect(await isFree(port)).toBe(false);
    expect(mappingsOf('c1', '10.0.0.2', ports.bindings('c1'))).toEqual([
      { key: 'c1', containerIp: '10.0.0.2', proto: 'tcp', containerPort: 80, hostIp: LO, hostPort: port },
    ]);
    await ports.release('c1');
    expect(await isFree(port)).toBe(true);
    expect(ports.bindings('c1')).toEqual([]);
  });

  it('holds a UDP port likewise', async () => {
    const port = await freeRun(1);
    ports = new HostPorts();
    await ports.reserve('c1', '10.0.0.2', [request(port, port, 'udp')]);
    expect(await udpFree(port)).toBe(false);
    await ports.release('c1');
    expect(await udpFree(port)).toBe(true);
  });

  it("a port berth handed out: dockerd's 'port is already allocated', naming the address that has it", async () => {
    const port = await freeRun(1);
    ports = new HostPorts();
    await ports.reserve('c1', '10.0.0.2', [request(port)]);
    expect(await message(ports.reserve('c2', '10.0.0.3', [request(port)]))).toBe(
      `Bind for ${LO}:${port} failed: port is already allocated`,
    );
    // 0.0.0.0 needs the port free on every address: refused before anything is bound.
    expect(await message(ports.reserve('c2', '10.0.0.3', [request(port, port, 'tcp', '0.0.0.0')]))).toBe(
      `Bind for ${LO}:${port} failed: port is already allocated`,
    );
    // The same number in another protocol is another port.
    await ports.reserve('c2', '10.0.0.3', [request(port, port, 'udp')]);
  });

  it("a port another process holds: dockerd's bind error", async () => {
    const port = await freeRun(1);
    await otherServer(port);
    ports = new HostPorts();
    const e = await ports.reserve('c1', '10.0.0.2', [request(port)]).catch((x: unknown) => x);
    expect(isEngineError(e, 'system')).toBe(true);
    expect((e as Error).message).toBe(`failed to bind host port ${LO}:${port}/tcp: address already in use`);
  });

  it('all or nothing: a failing binding releases those made before it in the same call', async () => {
    const port = await freeRun(2);
    await otherServer(port + 1);
    ports = new HostPorts();
    const both = [request(port), { ...request(port + 1), containerPort: 81 }];
    expect(await message(ports.reserve('c1', '10.0.0.2', both))).toMatch(/address already in use/);
    expect(await isFree(port)).toBe(true);
    expect(ports.bindings('c1')).toEqual([]);
  });

  it('a range: the first port free of it, skipping those berth or others hold; all taken is an error', async () => {
    const port = await freeRun(3);
    const other = await otherServer(port + 1);
    ports = new HostPorts();
    await ports.reserve('c1', '10.0.0.2', [request(port)]);
    const [b] = await ports.reserve('c2', '10.0.0.3', [request(port, port + 2)]);
    expect(b!.hostPort).toBe(port + 2);
    // Only the other process's port is left: after dockerd's ten tries, its bind error.
    expect(await message(ports.reserve('c3', '10.0.0.4', [request(port, port + 2)]))).toBe(
      `failed to bind host port ${LO}:${port + 1}/tcp: address already in use`,
    );
    await new Promise((r) => other.close(r));
    const [c] = await ports.reserve('c3', '10.0.0.4', [request(port, port + 2)]);
    expect(c!.hostPort).toBe(port + 1);
    expect(await message(ports.reserve('c4', '10.0.0.5', [request(port, port + 2)]))).toBe('all ports are allocated');
  });

  it('ephemeral ports come from the given range; bindings differing only in address share one', async () => {
    const port = await freeRun(4);
    await otherServer(port);
    ports = new HostPorts({ ephemeral: { start: port, end: port + 3 }, reserved: new Set([port + 1]) });
    const made = await ports.reserve('c1', '10.0.0.2', [request(0, 0), request(0, 0, 'tcp', '127.0.0.2')]);
    // port is another's, port+1 is reserved by the kernel's list: port+2, on both addresses.
    expect(made.map((b) => [b.hostIp, b.hostPort])).toEqual([
      [LO, port + 2],
      ['127.0.0.2', port + 2],
    ]);
    const [next] = await ports.reserve('c2', '10.0.0.3', [request(0, 0)]);
    expect(next!.hostPort).toBe(port + 3);
  });

  it('the held TCP port proxies to the container address (the userland proxy), until released', async () => {
    const [port, target] = [await freeRun(1), await freeRun(1)];
    await otherServer(target);
    ports = new HostPorts();
    await ports.reserve('c1', LO, [{ ...request(port), containerPort: target }]);
    const client = net.connect({ host: LO, port });
    const received: Buffer[] = [];
    client.on('data', (d: Buffer) => received.push(d));
    const closed = new Promise((r) => client.on('close', r));
    client.write('ping');
    await expect.poll(() => Buffer.concat(received).toString()).toBe('hello ping');
    await ports.release('c1');
    await closed;
    expect(await isFree(port)).toBe(true);
  });

  it('with the proxy off (userland-proxy false) the port is held and a connection to it reset', async () => {
    const [port, target] = [await freeRun(1), await freeRun(1)];
    let reached = false;
    const server = await otherServer(target);
    server.on('connection', () => {
      reached = true;
    });
    ports = new HostPorts({ proxy: false });
    await ports.reserve('c1', LO, [{ ...request(port), containerPort: target }]);
    const client = net.connect({ host: LO, port });
    const error = new Promise<string | undefined>((r) => client.on('error', (e: NodeJS.ErrnoException) => r(e.code)));
    expect(await error).toBe('ECONNRESET');
    expect(reached).toBe(false);
    expect(await isFree(port)).toBe(false);
    await ports.release('c1');
    expect(await isFree(port)).toBe(true);
  });

  it('a proxied connection to a container that does not answer is closed, the port still held', async () => {
    const [port, nobody] = [await freeRun(1), await freeRun(1)];
    ports = new HostPorts();
    await ports.reserve('c1', LO, [{ ...request(port), containerPort: nobody }]);
    const client = net.connect({ host: LO, port });
    client.on('error', () => undefined);
    await new Promise((r) => client.on('close', r));
    expect(await isFree(port)).toBe(false);
  });
});
