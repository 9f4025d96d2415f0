// BuildKit's connections as buildx v0.10.5 opens them (docs/buildkit/protocol.md,
// fixtures/buildkit): `POST /grpc` and `POST /session`, upgrades to h2c, then gRPC
// over HTTP/2 on the same socket; driven here by a client of our own (node:http2
// and the project's framing), as CI has no buildx.
import http2 from 'node:http2';
import type net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Deframer, frame } from '../../src/api/buildkit/grpc.js';
import * as m from '../../src/api/buildkit/proto/messages.js';
import { decode, encode, type MessageType, type Msg } from '../../src/api/buildkit/proto/wire.js';
import { type Daemon, startDaemon } from '../harness/daemon.js';
import { upgrade as upgradeOn } from '../harness/buildkit-client.js';

let d: Daemon;
beforeAll(async () => {
  d = await startDaemon();
});
afterAll(async () => {
  await d.stop();
  await d.cleanup();
});

/** An upgrade request on a socket of its own (the harness's, as buildx sends it): the answer's head, and the socket after it. */
const upgrade = (path: string, headers: Record<string, string>) => upgradeOn(d.socket, path, Object.entries(headers));

interface Answer {
  messages: Msg[];
  status: number;
  message: string;
}

/** One call on a `/grpc` connection: its answers and its status. */
function call(client: http2.ClientHttp2Session, path: string, req: MessageType, ans: MessageType, body: Msg | Buffer) {
  return new Promise<Answer>((resolve, reject) => {
    const stream = client.request({
      ':method': 'POST',
      ':path': path,
      'content-type': 'application/grpc',
      te: 'trailers',
    });
    const deframer = new Deframer();
    const messages: Msg[] = [];
    stream.on('data', (c: Buffer) => {
      for (const b of deframer.push(c)) messages.push(decode(ans, b));
    });
    stream.once('trailers', (t) =>
      resolve({
        messages,
        status: Number(t['grpc-status']),
        message: decodeURIComponent(String(t['grpc-message'] ?? '')),
      }),
    );
    stream.once('error', reject);
    stream.end(Buffer.isBuffer(body) ? body : frame(encode(req, body)));
  });
}

async function control(path = '/grpc'): Promise<{ client: http2.ClientHttp2Session; socket: net.Socket }> {
  const { head, socket } = await upgrade(path, { Upgrade: 'h2c' });
  expect(head).toMatch(/^HTTP\/1.1 101 Switching Protocols\r\n/);
  expect(head).toMatch(/\r\nUpgrade: h2c\r\n/);
  const client = http2.connect('http://localhost', { createConnection: () => socket });
  return { client, socket };
}

describe('POST /grpc: the Control service', () => {
  it('lists berth as the worker, gives its version, and an empty cache for du and prune', async () => {
    const { client } = await control();
    try {
      const workers = await call(
        client,
        '/moby.buildkit.v1.Control/ListWorkers',
        m.ListWorkersRequest,
        m.ListWorkersResponse,
        {},
      );
      expect(workers.status).toBe(0);
      expect(workers.messages).toEqual([
        { record: [{ ID: 'berth', platforms: [{ Architecture: 'amd64', OS: 'linux' }] }] },
      ]);
      const version = (await d.request('GET', '/version')).json.Version;
      const info = await call(client, '/moby.buildkit.v1.Control/Info', m.InfoRequest, m.InfoResponse, {});
      expect(info.messages).toEqual([{ buildkitVersion: { package: 'berth', version } }]);
      const du = await call(client, '/moby.buildkit.v1.Control/DiskUsage', m.DiskUsageRequest, m.DiskUsageResponse, {
        filter: [''],
      });
      expect(du).toEqual({ messages: [{}], status: 0, message: '' });
      const prune = await call(client, '/moby.buildkit.v1.Control/Prune', m.PruneRequest, m.UsageRecord, { all: true });
      expect(prune).toEqual({ messages: [], status: 0, message: '' });
    } finally {
      client.close();
    }
  });

  it("refuses what it does not build and what it does not know, in gRPC's codes", async () => {
    const { client } = await control('/v1.41/grpc');
    try {
      const solve = await call(client, '/moby.buildkit.v1.Control/Solve', m.SolveRequest, m.SolveResponse, {
        Ref: 'abc',
        Exporter: 'oci',
        FrontendAttrs: { filename: 'Dockerfile' },
      });
      expect(solve.status).toBe(3);
      expect(solve.message).toMatch(/^exporter "oci" is not supported by berthd yet/);
      const noSession = await call(client, '/moby.buildkit.v1.Control/Solve', m.SolveRequest, m.SolveResponse, {
        Ref: 'abd',
        Exporter: 'tar',
      });
      expect(noSession.status).toBe(3);
      expect(noSession.message).toBe(
        'the tar exporter sends the files to the client: it needs a session (SolveRequest.Session)',
      );
      const unknown = await call(client, '/moby.buildkit.v1.Control/Nope', m.InfoRequest, m.InfoResponse, {});
      expect(unknown.status).toBe(12);
      // A request that is no protobuf message: INVALID_ARGUMENT, and the connection serves on.
      const bad = await call(
        client,
        '/moby.buildkit.v1.Control/Info',
        m.InfoRequest,
        m.InfoResponse,
        frame(Buffer.from([0x0a, 0x7f])),
      );
      expect(bad.status).toBe(3);
      expect(bad.message).toMatch(/malformed protobuf message/);
      const compressed = Buffer.from([1, 0, 0, 0, 0]);
      expect(
        (await call(client, '/moby.buildkit.v1.Control/Info', m.InfoRequest, m.InfoResponse, compressed)).status,
      ).toBe(12);
      const again = await call(client, '/grpc.health.v1.Health/Check', m.HealthCheckRequest, m.HealthCheckResponse, {});
      expect(again.messages).toEqual([{ status: 1 }]);
    } finally {
      client.close();
    }
  });

  it('takes a connection closed right after the 101 (buildx opens one so), and refuses a missing upgrade', async () => {
    const { socket } = await upgrade('/grpc', { Upgrade: 'h2c' });
    socket.destroy();
    const plain = await d.request('POST', '/grpc');
    expect(plain.status).toBe(500);
    expect(plain.json.message).toBe('no upgrade proto in request');
    expect((await d.request('GET', '/_ping')).text).toBe('OK');
  });
});

describe('POST /session', () => {
  it("answers moby's integration/session: no upgrade and a foreign protocol refused, h2c upgraded", async () => {
    const none = await d.request('POST', '/session');
    expect(none.status).toBe(400);
    expect(none.json.message).toBe('no upgrade proto in request');
    const foo = await d.request('POST', '/session', { headers: { Upgrade: 'foo' } });
    expect(foo.status).toBe(400);
    expect(foo.json.message).toBe('protocol foo not supported');
  });

  it('holds a session by its id while its connection lives, and only one of each id', async () => {
    const headers = {
      Upgrade: 'h2c',
      'X-Docker-Expose-Session-Uuid': 'sess-1',
      'X-Docker-Expose-Session-Name': 'ctx',
      'X-Docker-Expose-Session-Sharedkey': 'key',
    };
    const first = await upgrade('/session', headers);
    expect(first.head).toMatch(/^HTTP\/1.1 101 Switching Protocols\r\n/);
    // berthd is the HTTP/2 client here: its connection preface comes first.
    const preface = await new Promise<Buffer>((resolve) => {
      first.socket.once('data', resolve);
      first.socket.resume();
    });
    expect(preface.subarray(0, 24).toString('latin1')).toBe('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n');
    const twice = await upgrade('/session', headers);
    expect(twice.head).toMatch(/^HTTP\/1.1 400 /);
    twice.socket.destroy();
    first.socket.destroy();
    // Gone with its connection: the id is free again.
    let again: Awaited<ReturnType<typeof upgrade>> | undefined;
    for (let i = 0; i < 50 && !again?.head.startsWith('HTTP/1.1 101'); i++) {
      again?.socket.destroy();
      again = await upgrade('/session', headers);
    }
    expect(again?.head).toMatch(/^HTTP\/1.1 101 /);
    again?.socket.destroy();
  });
});
