// What a build asks of its client through the session (the engine's
// BuildSession): a secret (Secrets/GetSecret, for `RUN --mount=type=secret`),
// a connection to an ssh agent (SSH/CheckAgent once per id, then one
// SSH/ForwardAgent stream per connection a RUN makes to the socket it is
// given, tagged `buildkit.ssh.id`), and registry credentials for a base
// image's pull (Auth/Credentials). Only methods the client listed are called
// (callSession); a build that ends cancels what is still under way.
import { Duplex } from 'node:stream';
import type { AuthConfig, BuildSession } from '../../engine/index.js';
import type { ClientCall } from './grpc-client.js';
import { GrpcCode, GrpcError } from './grpc.js';
import * as m from './proto/messages.js';
import type { MessageType, Msg } from './proto/wire.js';
import { type ClientSession, callSession } from './session.js';

const GET_SECRET = '/moby.buildkit.secrets.v1.Secrets/GetSecret';
const CHECK_AGENT = '/moby.sshforward.v1.SSH/CheckAgent';
const FORWARD_AGENT = '/moby.sshforward.v1.SSH/ForwardAgent';
const CREDENTIALS = '/moby.filesync.v1.Auth/Credentials';
/** BuildKit's limit on a secret's size (secrets/secrets.go MaxSecretSize). */
const MAX_SECRET = 500 << 10;
/** What BuildKit asks Docker Hub's credentials for (its resolver's host for docker.io). */
const DOCKER_HUB_HOST = 'registry-1.docker.io';

/** A call cancelled when the build ends. */
function bound(call: ClientCall, signal: AbortSignal): ClientCall {
  const cancel = () => call.cancel();
  signal.addEventListener('abort', cancel, { once: true });
  void call.status.then(() => signal.removeEventListener('abort', cancel));
  return call;
}

/** A unary call of the session: its one answer, or its status as an error. */
async function unary(
  session: ClientSession,
  path: string,
  request: MessageType,
  answer: MessageType,
  body: Msg,
  signal: AbortSignal,
): Promise<Msg> {
  signal.throwIfAborted();
  const call = bound(callSession(session, path, request, answer), signal);
  call.send(body);
  call.end();
  const msg = await call.next();
  const s = await call.status;
  if (s.code !== GrpcCode.OK) throw new GrpcError(s.code, s.message);
  return msg ?? {};
}

/** A ForwardAgent stream as a socket's other end: bytes both ways, half-close as EOF. */
function agentConnection(call: ClientCall): Duplex {
  const conn = new Duplex({
    read() {},
    write(chunk: Buffer, _encoding, done) {
      call.send({ data: chunk });
      void call.drained().then(() => done());
    },
    final(done) {
      call.end();
      done();
    },
    destroy(err, done) {
      call.cancel();
      done(err);
    },
  });
  void (async () => {
    for (let msg = await call.next(); msg; msg = await call.next()) {
      const data = msg.data as Buffer | undefined;
      if (data?.length) conn.push(data);
    }
    const s = await call.status;
    if (s.code !== GrpcCode.OK) conn.destroy(new GrpcError(s.code, s.message));
    else conn.push(null);
  })().catch((e: unknown) => conn.destroy(e as Error));
  return conn;
}

/** The client's Credentials answer as the engine's auth: a user and password, or (no user) an identity token. */
function authOf(answer: Msg, serveraddress: string): AuthConfig | undefined {
  const username = String(answer.Username ?? '');
  const secret = String(answer.Secret ?? '');
  if (!secret) return undefined;
  return username ? { username, password: secret, serveraddress } : { identitytoken: secret, serveraddress };
}

/** The engine's BuildSession over a client's session, for one build (`signal`: the build's). */
export function clientServices(session: ClientSession, signal: AbortSignal): BuildSession {
  const agents = new Map<string, Promise<unknown>>();
  const credentials = new Map<string, Promise<AuthConfig | undefined>>();
  const lists = (method: string) => session.methods.some((x) => x.toLowerCase() === method.toLowerCase());
  return {
    async secret(id) {
      try {
        const answer = await unary(session, GET_SECRET, m.GetSecretRequest, m.GetSecretResponse, { ID: id }, signal);
        const data = Buffer.from((answer.data as Buffer | undefined) ?? []);
        if (data.length > MAX_SECRET) throw new GrpcError(GrpcCode.INVALID_ARGUMENT, `secret ${id} is too big`);
        return data;
      } catch (e) {
        if (e instanceof GrpcError && e.code === GrpcCode.NOT_FOUND) return undefined;
        throw e;
      }
    },
    async sshAgent(id) {
      let checked = agents.get(id);
      if (!checked) {
        checked = unary(session, CHECK_AGENT, m.CheckAgentRequest, m.CheckAgentResponse, { ID: id }, signal);
        agents.set(id, checked);
      }
      await checked;
      signal.throwIfAborted();
      return agentConnection(
        bound(callSession(session, FORWARD_AGENT, m.BytesMessage, m.BytesMessage, { 'buildkit.ssh.id': id }), signal),
      );
    },
    credentials(domain) {
      // A client that serves no Auth (dockerode's sessions) has nothing to give: the pull goes without.
      if (!lists(CREDENTIALS)) return Promise.resolve(undefined);
      const host = domain === 'docker.io' ? DOCKER_HUB_HOST : domain;
      let got = credentials.get(host);
      if (!got) {
        got = unary(session, CREDENTIALS, m.CredentialsRequest, m.CredentialsResponse, { Host: host }, signal).then(
          (a) => authOf(a, domain === 'docker.io' ? 'https://index.docker.io/v1/' : domain),
        );
        credentials.set(host, got);
      }
      return got;
    },
  };
}
