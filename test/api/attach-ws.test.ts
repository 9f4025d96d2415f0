// Attach over a WebSocket (`GET /containers/{id}/attach/ws`), as dockerd serves
// it: the raw stream (no multiplexing headers), stdin from the client's frames,
// binary frames (text below API 1.28), the streams chosen by the query from API
// 1.42, the closing handshake when the output ends, and nothing held once a
// client vanishes. Real clients: Node's own WebSocket and the Python SDK's
// attach_socket(ws=True) (websocket-client), which needs a TCP address, so this
// berthd listens on one on loopback as well; raw frames for what clients never
// send (pings, fragments, an unmasked frame).
import net from 'node:net';
import { beforeAll, describe, expect, it } from 'vitest';
import { runPython } from '../harness/clients.js';
import { type Daemon, waitFor } from '../harness/daemon.js';
import { useEnv, type Env } from '../harness/env.js';
import { expectNoLeaks, holdings } from '../harness/leaks.js';

async function freePort(): Promise<number> {
  const srv = net.createServer();
  await new Promise<void>((resolve) => srv.listen(0, '127.0.0.1', resolve));
  const { port } = srv.address() as net.AddressInfo;
  await new Promise((resolve) => srv.close(resolve));
  return port;
}

const port = await freePort();
const ctx = useEnv({ args: ['-H', `tcp://127.0.0.1:${port}`] });
let env: Env;
let d: Daemon;
beforeAll(() => {
  ({ env, daemon: d } = ctx);
});

async function run(body: Record<string, unknown>): Promise<string> {
  const c = await d.request('POST', '/containers/create', { body: { Image: env.busybox, ...body } });
  expect(c.status, c.text).toBe(201);
  const id = c.json.Id as string;
  expect((await d.request('POST', `/containers/${id}/start`)).status).toBe(204);
  return id;
}

interface Opened {
  ws: WebSocket;
  /** Everything received, and the kind of each message. */
  text(): string;
  kinds: string[];
  closed: Promise<CloseEvent>;
}

/** Node's WebSocket client on berthd's TCP address; resolves once open. */
async function open(path: string): Promise<Opened> {
  const ws = new WebSocket(`ws://127.0.0.1:${port}${path}`);
  ws.binaryType = 'arraybuffer';
  let got = '';
  const kinds: string[] = [];
  ws.onmessage = (m) => {
    kinds.push(typeof m.data === 'string' ? 'text' : 'binary');
    got += typeof m.data === 'string' ? m.data : Buffer.from(m.data as ArrayBuffer).toString('latin1');
  };
  const closed = new Promise<CloseEvent>((resolve) => {
    ws.onclose = resolve;
  });
  await new Promise<void>((resolve, reject) => {
    ws.onopen = () => resolve();
    ws.onerror = () => reject(new Error(`websocket to ${path} failed`));
  });
  return { ws, text: () => got, kinds, closed };
}

/** The opening handshake by hand over berthd's unix socket; resolves with the socket once answered 101. */
async function rawOpen(path: string): Promise<{ sock: net.Socket; rest: Buffer }> {
  const sock = net.connect(d.socket);
  await new Promise((resolve) => sock.once('connect', resolve));
  sock.write(
    `GET ${path} HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n` +
      'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n',
  );
  let buf = Buffer.alloc(0);
  while (!buf.includes('\r\n\r\n')) {
    buf = Buffer.concat([buf, await new Promise<Buffer>((resolve) => sock.once('data', resolve))]);
  }
  const end = buf.indexOf('\r\n\r\n') + 4;
  const head = buf.subarray(0, end).toString();
  expect(head).toMatch(/^HTTP\/1\.1 101 /);
  // RFC 6455's own example key and answer.
  expect(head).toContain('Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=');
  return { sock, rest: buf.subarray(end) };
}

/** A client frame: masked, as RFC 6455 requires of clients (unless told not to). */
function clientFrame(opcode: number, payload: Buffer, o: { fin?: boolean; masked?: boolean } = {}): Buffer {
  const mask = Buffer.from([1, 2, 3, 4]);
  const masked = o.masked ?? true;
  const head = Buffer.from([((o.fin ?? true) ? 0x80 : 0) | opcode, (masked ? 0x80 : 0) | payload.length]);
  const body = masked ? Buffer.from(payload.map((b, i) => b ^ mask[i % 4]!)) : payload;
  return Buffer.concat([head, masked ? mask : Buffer.alloc(0), body]);
}

/** Server frames in `buf`: [opcode, payload]; server frames are never masked. */
function serverFrames(buf: Buffer): [number, string][] {
  const out: [number, string][] = [];
  for (let at = 0; at + 2 <= buf.length; ) {
    expect(buf[at + 1]! & 0x80).toBe(0);
    let len = buf[at + 1]! & 0x7f;
    let off = 2;
    if (len === 126) {
      len = buf.readUInt16BE(at + 2);
      off = 4;
    }
    out.push([buf[at]! & 0x0f, buf.subarray(at + off, at + off + len).toString('latin1')]);
    at += off + len;
  }
  return out;
}

async function readUntil(sock: net.Socket, first: Buffer, done: (b: Buffer) => boolean): Promise<Buffer> {
  let buf = first;
  while (!done(buf)) {
    const next = await new Promise<Buffer | null>((resolve) => {
      sock.once('data', resolve);
      sock.once('close', () => resolve(null));
    });
    if (!next) break;
    buf = Buffer.concat([buf, next]);
  }
  return buf;
}

const remove = (id: string) => d.request('DELETE', `/containers/${id}?force=1`);

describe('attach over a WebSocket', () => {
  it('streams stdout and stderr raw, takes stdin, and closes cleanly when the process ends (Node WebSocket)', async () => {
    const id = await run({ Cmd: ['sh', '-c', 'echo hello; echo err >&2; read x; echo got:$x'], OpenStdin: true });
    await waitFor(
      async () => (await d.request('GET', `/containers/${id}/logs?stdout=1&stderr=1`)).body.length > 0,
      'output',
    );
    const c = await open(`/v1.47/containers/${id}/attach/ws?logs=1&stream=1&stdin=1&stdout=1&stderr=1`);
    await waitFor(() => c.text().includes('err\n'), 'the logged output');
    c.ws.send('typed\n');
    const closed = await c.closed;
    expect(closed.code).toBe(1000);
    expect(closed.wasClean).toBe(true);
    // Raw bytes: no 8-byte multiplexing headers, stdout and stderr in one stream.
    expect(c.text()).toBe('hello\nerr\ngot:typed\n');
    expect(new Set(c.kinds)).toEqual(new Set(['binary']));
    await remove(id);
  });

  it('sends text frames below API 1.28, and every stream below 1.42 whatever the query says', async () => {
    const id = await run({ Cmd: ['sh', '-c', 'echo out; echo err >&2; sleep 1'] });
    await waitFor(async () => (await d.request('GET', `/containers/${id}/logs?stderr=1`)).body.length > 0, 'output');
    const old = await open(`/v1.27/containers/${id}/attach/ws?logs=1&stdout=0&stderr=0`);
    await old.closed;
    expect(old.text()).toBe('out\nerr\n');
    expect(new Set(old.kinds)).toEqual(new Set(['text']));
    // From 1.42 the query chooses: stderr only.
    const chosen = await open(`/v1.42/containers/${id}/attach/ws?logs=1&stderr=1`);
    await chosen.closed;
    expect(chosen.text()).toBe('err\n');
    await remove(id);
  });

  it('with a TTY: the detach keys end the attach, the container runs on', async () => {
    const id = await run({ Cmd: ['sh'], Tty: true, OpenStdin: true });
    const c = await open(`/containers/${id}/attach/ws?stream=1&stdin=1&stdout=1&detachKeys=ctrl-x`);
    c.ws.send('echo $((6*7))\n');
    await waitFor(() => c.text().includes('42'), 'the shell’s answer');
    c.ws.send(Buffer.from([0x18]));
    expect((await c.closed).code).toBe(1000);
    expect((await d.request('GET', `/containers/${id}/json`)).json.State.Running).toBe(true);
    await remove(id);
  });

  it('the Python SDK’s attach_socket(ws=True) reads and writes through it', async () => {
    const id = await run({ Cmd: ['sh', '-c', 'echo hello; read x; echo got:$x'], OpenStdin: true });
    const { values: v, result } = await runPython(
      d,
      `
api = docker.APIClient(base_url="http://127.0.0.1:${port}")
ws = api.attach_socket(${JSON.stringify(id)}, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1, "logs": 1}, ws=True)
out = b""
while b"hello" not in out:
    out += ws.recv()
ws.send("abc\\n")
while True:
    m = ws.recv()
    if not m: break
    out += m
emit("out", out)
`,
    );
    expect(result.code, result.stderr).toBe(0);
    expect(v.out).toEqual({ bytes: 'hello\ngot:abc\n' });
    await remove(id);
  });

  it('answers pings, joins fragments, and closes on an unmasked frame', async () => {
    const id = await run({ Cmd: ['cat'], OpenStdin: true });
    const { sock, rest } = await rawOpen(`/containers/${id}/attach/ws?stream=1&stdin=1&stdout=1`);
    sock.write(clientFrame(0x9, Buffer.from('ping!')));
    sock.write(clientFrame(0x2, Buffer.from('fra'), { fin: false }));
    sock.write(clientFrame(0x0, Buffer.from('gment\n')));
    // cat may read the two fragments' bytes apart and echo them in two frames: the stream is what counts.
    const echoed = (b: Buffer) =>
      serverFrames(b)
        .filter(([op]) => op === 0x2)
        .map(([, p]) => p)
        .join('');
    let buf = await readUntil(sock, rest, (b) => echoed(b).includes('fragment\n'));
    expect(serverFrames(buf)[0]).toEqual([0xa, 'ping!']);
    expect(echoed(buf)).toBe('fragment\n');
    sock.write(clientFrame(0x2, Buffer.from('x'), { masked: false }));
    buf = await readUntil(sock, buf, (b) => serverFrames(b).some(([op]) => op === 0x8));
    const close = serverFrames(buf).find(([op]) => op === 0x8)!;
    expect(Buffer.from(close[1], 'latin1').readUInt16BE(0)).toBe(1002);
    sock.destroy();
    await remove(id);
  });

  it('refuses what is no WebSocket handshake, and a missing container first', async () => {
    const plain = await d.request('GET', '/containers/nope/attach/ws');
    expect(plain.status).toBe(404);
    expect(plain.json.message).toBe('No such container: nope');
    const id = await run({ Cmd: ['sleep', '30'] });
    const notWs = await d.request('GET', `/containers/${id}/attach/ws`);
    expect(notWs.status).toBe(400);
    expect(notWs.json.message).toBe('not websocket protocol');
    const badVersion = await d.request('GET', `/containers/${id}/attach/ws`, {
      headers: { Upgrade: 'websocket', Connection: 'Upgrade', 'Sec-WebSocket-Key': 'x', 'Sec-WebSocket-Version': '8' },
    });
    expect(badVersion.status).toBe(400);
    expect(badVersion.json.message).toBe('missing or bad WebSocket Version');
    await remove(id);
  });

  it('holds nothing once a client vanishes mid-attach, and does not hold the container back', async () => {
    // Waits for a line, then writes more than any attach buffers: a session left behind by a
    // vanished client would stop reading, and the process would block on its output for good.
    const id = await run({ Cmd: ['sh', '-c', 'read x; head -c 8000000 /dev/zero; echo done'], OpenStdin: true });
    const before = holdings(d);
    for (let i = 0; i < 3; i++) {
      const { sock } = await rawOpen(`/containers/${id}/attach/ws?stream=1&stdout=1&stderr=1`);
      sock.destroy();
    }
    const tcp = await open(`/containers/${id}/attach/ws?stream=1&stdout=1`);
    tcp.ws.close();
    await tcp.closed;
    await expectNoLeaks(d, before);
    const input = await open(`/containers/${id}/attach/ws?stream=1&stdin=1`);
    input.ws.send('go\n');
    input.ws.close();
    const wait = await d.request('POST', `/containers/${id}/wait`);
    expect(wait.json.StatusCode).toBe(0);
    await remove(id);
  }, 60_000);
});
