// `RUN --mount=type=secret|ssh`: what only the client that started a BuildKit
// build has, asked of it through the session for one RUN. A secret is fetched
// for each RUN and written to a private tmpfs on the host, whose file is
// bound read-only into the container: never on a disk, in a layer, in the
// history or in the step's cache key (that holds its id and target only). An
// ssh agent is a unix socket in a host directory of the RUN, bound into the
// container; each connection to it is one forwarded to the client's agent.
import { chmod, chown, mkdir, rm, writeFile } from 'node:fs/promises';
import net from 'node:net';
import path from 'node:path';
import { invalidParameter, messageOf } from '../../errors.js';
import type { RunMount } from '../dockerfile/index.js';
import { mountPrivateTmpfs, unmount } from '../os/mount.js';
import type { BuildSession, StepContext } from './build-types.js';

/** A mount made on the host for one RUN: bound at `target`, undone by `release`. */
export interface HostMount {
  source: string;
  target: string;
  readOnly: boolean;
  env?: string;
  release(): Promise<void>;
}

/** A secret's tmpfs: room for the file and nothing else. */
const SECRET_FS_BYTES = 1 << 20;
/** BuildKit's limit on a secret's size (500 KiB). */
const MAX_SECRET = 500 * 1024;

function needSession(cx: StepContext, m: RunMount): BuildSession {
  const s = cx.run.req.session;
  if (s) return s;
  throw invalidParameter(
    `RUN --mount=type=${m.type} needs the client's BuildKit session, which the classic builder API has none of: build with BuildKit (docker buildx build --${m.type} …)`,
  );
}

/** The secret mount, or null when the client has no such secret and it is not required. */
export async function secretMount(cx: StepContext, m: RunMount, dir: string): Promise<HostMount | null> {
  const session = needSession(cx, m);
  const id = m.source || m.id || path.posix.basename(m.target!);
  const target = m.target || `/run/secrets/${path.posix.basename(id)}`;
  const data = await session.secret(id);
  if (!data) {
    if (m.required) throw invalidParameter(`secret ${id}: not found`);
    return null;
  }
  if (data.length > MAX_SECRET) throw invalidParameter(`secret ${id}: too big (${data.length} > ${MAX_SECRET} bytes)`);
  await mkdir(dir, { mode: 0o700 });
  mountPrivateTmpfs(dir, SECRET_FS_BYTES + data.length);
  const file = path.join(dir, 'secret');
  try {
    await writeFile(file, data, { mode: 0o600 });
    await chmod(file, m.mode ?? 0o400);
    await chown(file, m.uid ?? 0, m.gid ?? 0);
  } catch (e) {
    unmount(dir);
    throw e;
  }
  return {
    source: file,
    target,
    readOnly: true,
    release: async () => {
      unmount(dir);
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/** The ssh agent's socket, or null when the client has no such agent and it is not required. */
export async function sshMount(cx: StepContext, m: RunMount, index: number, dir: string): Promise<HostMount | null> {
  const session = needSession(cx, m);
  if (m.source) throw invalidParameter('ssh does not support source');
  const id = m.id || 'default';
  // The agent is asked once before the RUN, as BuildKit's CheckAgent does: a missing one fails now, not inside the command.
  try {
    (await session.sshAgent(id)).destroy();
  } catch (e) {
    cx.log.debug({ err: messageOf(e), id }, 'the client has no such ssh agent');
    if (m.required) throw invalidParameter(`no SSH key "${id}" forwarded from the client`);
    return null;
  }
  await mkdir(dir, { mode: 0o700 });
  const socket = path.join(dir, 'agent.sock');
  const server = net.createServer((conn) => {
    conn.on('error', () => undefined);
    session.sshAgent(id).then(
      (agent) => {
        agent.on('error', () => conn.destroy());
        conn.on('close', () => agent.destroy());
        agent.on('close', () => conn.destroy());
        conn.pipe(agent).pipe(conn);
      },
      (e: unknown) => {
        cx.log.debug({ err: messageOf(e), id }, 'forwarding an ssh agent connection failed');
        conn.destroy();
      },
    );
  });
  const connections = new Set<net.Socket>();
  server.on('connection', (c) => {
    connections.add(c);
    c.on('close', () => connections.delete(c));
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(socket, () => resolve());
  });
  await chmod(socket, m.mode ?? 0o600);
  await chown(socket, m.uid ?? 0, m.gid ?? 0);
  const target = m.target || `/run/buildkit/ssh_agent.${index}`;
  return {
    source: socket,
    target,
    readOnly: false,
    env: `SSH_AUTH_SOCK=${target}`,
    release: async () => {
      for (const c of connections) c.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await rm(dir, { recursive: true, force: true });
    },
  };
}
