// The BuildSession a BuildKit build hands its RUN steps (src/api/buildkit/session-services.ts):
// secrets through Secrets/GetSecret and ssh agents through SSH/CheckAgent + one
// SSH/ForwardAgent stream per connection, against the project's buildx stand-in serving a
// secret and a fake agent. Called directly: the RUN --mount=type=secret|ssh steps that use it
// are the builder's (issue 29, M4); this is the session's half of the contract.
import http2 from 'node:http2';
import net from 'node:net';
import path from 'node:path';
import type { Duplex } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import { clientServices } from '../../src/api/buildkit/session-services.js';
import { type ClientSession, watchHealth } from '../../src/api/buildkit/session.js';
import { BUILD_METHODS, FAKE_AGENT_KEY, Session, type SessionOptions } from '../harness/buildkit-client.js';
import { scratchDir } from '../harness/tmp.js';

/**
 * berthd's end of `POST /session` in a few lines (routes/buildkit.ts does it for real):
 * the 101, then an HTTP/2 client on the socket, with the methods the client listed.
 */
async function connect(o: SessionOptions): Promise<{ session: ClientSession; client: Session; close(): void }> {
  const sock = path.join(scratchDir('bk-svc-'), 's');
  let accepted!: (s: ClientSession) => void;
  const got = new Promise<ClientSession>((resolve) => {
    accepted = resolve;
  });
  const server = net.createServer((socket) => {
    let head = '';
    const onData = (c: Buffer) => {
      head += c.toString('latin1');
      const end = head.indexOf('\r\n\r\n');
      if (end < 0) return;
      socket.off('data', onData);
      const methods = head
        .slice(0, end)
        .split('\r\n')
        .filter((l) => /^x-docker-expose-session-grpc-method:/i.test(l))
        .map((l) => l.slice(l.indexOf(':') + 1).trim());
      socket.write('HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n');
      const h2 = http2.connect('http://localhost', { createConnection: () => socket });
      h2.on('error', () => undefined);
      accepted({
        id: 'x',
        name: 'ctx',
        sharedKey: '',
        methods,
        client: h2,
        closed: new Promise((resolve) => socket.once('close', () => resolve())),
      });
    };
    socket.on('data', onData);
  });
  await new Promise<void>((resolve) => server.listen(sock, resolve));
  const client = await Session.open(sock, o);
  const session = await got;
  return {
    session,
    client,
    close() {
      client.close();
      session.client.destroy();
      server.close();
    },
  };
}

/** One ssh-agent message (uint32 length, then the message) written, the answer read whole. */
async function ask(conn: Duplex, message: Buffer): Promise<Buffer> {
  const len = Buffer.alloc(4);
  len.writeUInt32BE(message.length);
  conn.write(Buffer.concat([len, message]));
  let got = Buffer.alloc(0);
  for await (const c of conn) {
    got = Buffer.concat([got, c as Buffer]);
    if (got.length >= 4 && got.length >= 4 + got.readUInt32BE(0)) return got.subarray(4, 4 + got.readUInt32BE(0));
  }
  throw new Error(`the agent connection ended after ${got.length} bytes`);
}

describe("the BuildSession over a client's session", () => {
  let close = () => undefined as unknown;
  afterEach(() => close());

  it('secrets: the bytes the client has, undefined for one it has not', async () => {
    const c = await connect({ secrets: { s: 's3cr3t\n' } });
    close = c.close;
    const bs = clientServices(c.session, new AbortController().signal);
    expect((await bs.secret('s'))?.toString()).toBe('s3cr3t\n');
    expect(await bs.secret('nope')).toBeUndefined();
    const asked = c.client.calls.filter((x) => x.path === '/moby.buildkit.secrets.v1.Secrets/GetSecret');
    expect(asked.map((x) => x.request)).toEqual([{ ID: 's' }, { ID: 'nope' }]);
  });

  it('ssh: CheckAgent once, then a ForwardAgent stream per connection, the agent answering through it', async () => {
    const c = await connect({ sshAgents: ['default'] });
    close = c.close;
    const bs = clientServices(c.session, new AbortController().signal);
    for (let i = 0; i < 2; i++) {
      const conn = await bs.sshAgent('default');
      // SSH_AGENTC_REQUEST_IDENTITIES → SSH_AGENT_IDENTITIES_ANSWER with the fake key.
      const answer = await ask(conn, Buffer.from([11]));
      expect(answer[0]).toBe(12);
      expect(answer.readUInt32BE(1)).toBe(1);
      expect(answer.includes(Buffer.from(FAKE_AGENT_KEY.comment))).toBe(true);
      conn.end();
    }
    const paths = c.client.calls.map((x) => x.path);
    expect(paths).toEqual([
      '/moby.sshforward.v1.SSH/CheckAgent',
      '/moby.sshforward.v1.SSH/ForwardAgent',
      '/moby.sshforward.v1.SSH/ForwardAgent',
    ]);
    expect(c.client.calls[0]?.request).toEqual({ ID: 'default' });
    for (const x of c.client.calls.slice(1)) expect(x.headers['buildkit.ssh.id']).toBe('default');
    await expect(bs.sshAgent('work')).rejects.toThrow('unset ssh forward key work');
  });

  it('the build ending cancels an agent connection; methods the client does not list are refused in its words', async () => {
    const c = await connect({ sshAgents: ['default'], methods: BUILD_METHODS.slice(0, 2) });
    close = c.close;
    const abort = new AbortController();
    const bs = clientServices(c.session, abort.signal);
    await expect(bs.secret('s')).rejects.toThrow(
      'method /moby.buildkit.secrets.v1.Secrets/GetSecret not supported by the client',
    );
    await expect(bs.sshAgent('default')).rejects.toThrow('not supported by the client');
    // No Auth listed (dockerode's sessions): no credentials, no call.
    expect(await bs.credentials?.('docker.io')).toBeUndefined();
    expect(c.client.calls).toEqual([]);

    const full = await connect({ sshAgents: ['default'] });
    const closeFirst = close;
    close = () => {
      closeFirst();
      full.close();
    };
    const live = clientServices(full.session, abort.signal);
    const conn = await live.sshAgent('default');
    const closed = new Promise((resolve) => conn.once('close', resolve));
    conn.on('error', () => undefined);
    abort.abort(new Error('the build ended'));
    await closed;
    await expect(live.secret('s')).rejects.toThrow('the build ended');
  });
});

describe("the session's health checks", () => {
  const quick = { everyMs: 50, timeoutMs: 100 };

  it('a client that answers Health/Check keeps its session; one that hangs loses it at the second failed check', async () => {
    const healthy = await connect({});
    const hung = await connect({ healthHang: true });
    try {
      let healthyFailed = false;
      const stop = watchHealth(
        healthy.session,
        () => {
          healthyFailed = true;
        },
        quick,
      );
      await new Promise<void>((resolve) => watchHealth(hung.session, resolve, quick));
      stop();
      // Ended at the second check that went unanswered, not the first.
      expect(hung.client.calls.filter((c) => c.path === '/grpc.health.v1.Health/Check').length).toBe(2);
      expect(healthyFailed).toBe(false);
      expect(healthy.client.calls.filter((c) => c.path === '/grpc.health.v1.Health/Check').length).toBeGreaterThan(2);
      // A client that serves no Health (dockerode's sessions) is never asked.
      const none = await connect({ methods: [] });
      watchHealth(none.session, () => undefined, quick)();
      await new Promise((resolve) => setTimeout(resolve, 200));
      expect(none.client.calls).toEqual([]);
      none.close();
    } finally {
      healthy.close();
      hung.close();
    }
  });
});
