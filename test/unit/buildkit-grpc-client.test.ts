// The client role of berthd's gRPC (api/buildkit/grpc-client.ts) against a peer
// that words its status badly: a build's session is the client's own process,
// and what it sends in `grpc-message` must end the call, not the daemon.
import http2 from 'node:http2';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startCall } from '../../src/api/buildkit/grpc-client.js';
import * as m from '../../src/api/buildkit/proto/messages.js';

let server: http2.Http2Server;
let client: http2.ClientHttp2Session;

beforeAll(async () => {
  server = http2.createServer();
  // Each path names the grpc-message the server ends its call with, as sent (not encoded).
  server.on('stream', (stream, headers) => {
    const message = decodeURIComponent(String(headers[':path']).slice(1));
    stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
    stream.once('wantTrailers', () => stream.sendTrailers({ 'grpc-status': '2', 'grpc-message': message }));
    stream.end();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  client = http2.connect(`http://127.0.0.1:${(server.address() as AddressInfo).port}`);
});

afterAll(async () => {
  client.close();
  await new Promise((resolve) => server.close(resolve));
});

const statusFor = (sent: string) =>
  startCall(client, `/${encodeURIComponent(sent)}`, m.HealthCheckRequest, m.HealthCheckResponse).status;

describe('gRPC client status', () => {
  it('decodes a percent-encoded message', async () => {
    expect(await statusFor('no such file%3A a%20b')).toEqual({ code: 2, message: 'no such file: a b' });
  });

  it('keeps a message that is not percent-encoding as it came, and the call ends', async () => {
    expect(await statusFor('100% done')).toEqual({ code: 2, message: '100% done' });
    expect(await statusFor('bad %E0%A4%A')).toEqual({ code: 2, message: 'bad %E0%A4%A' });
  });
});
