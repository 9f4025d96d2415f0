// A ready environment for container tests: a registry holding busybox, and a
// berthd that has pulled it. Each test file gets its own.
import { afterAll, beforeAll, expect } from 'vitest';
import { busyboxImage, pushImage } from './images.js';
import { startDaemon, type Daemon, type DaemonOptions } from './daemon.js';
import { startRegistry, type Registry } from './registry.js';
import { demuxText } from './streams.js';

export interface Env {
  registry: Registry;
  daemon: Daemon;
  /** The pulled busybox, e.g. 127.0.0.1:PORT/busybox:latest */
  busybox: string;
  stop(): Promise<void>;
}

/** Pulls `ref` through the API and fails with the stream's error if any. */
export async function pull(d: Daemon, ref: string, headers: Record<string, string> = {}): Promise<string> {
  const [name, tag] = splitTag(ref);
  const r = await d.request(
    'POST',
    `/v1.43/images/create?fromImage=${encodeURIComponent(name)}&tag=${encodeURIComponent(tag)}`,
    { headers },
  );
  if (r.status !== 200) throw new Error(`pull ${ref}: ${r.status} ${r.text}`);
  const last = r.text
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l))
    .at(-1);
  if (last?.error) throw new Error(`pull ${ref}: ${last.error}`);
  return r.text;
}

export function splitTag(ref: string): [string, string] {
  const at = ref.indexOf('@');
  if (at !== -1) return [ref.slice(0, at), ref.slice(at + 1)];
  const m = /^(.*?)(?::([\w][\w.-]*))?$/.exec(ref)!;
  return [m[1]!, m[2] ?? 'latest'];
}

export async function startEnv(daemonOptions: DaemonOptions = {}): Promise<Env> {
  const registry = await startRegistry();
  let daemon: Daemon | undefined;
  try {
    await pushImage(registry, 'busybox', 'latest', await busyboxImage());
    daemon = await startDaemon(daemonOptions);
    const busybox = `${registry.host}/busybox:latest`;
    await pull(daemon, busybox);
    const d = daemon;
    return {
      registry,
      daemon: d,
      busybox,
      async stop() {
        await removeAllContainers(d);
        await d.cleanup();
        await registry.stop();
      },
    };
  } catch (e) {
    await daemon?.cleanup();
    await registry.stop();
    throw e;
  }
}

/** Creates a container from `body`, runs it to its end and removes it; resolves with its stdout. */
export async function runToEnd(d: Daemon, body: Record<string, unknown>): Promise<string> {
  const c = await d.request('POST', '/containers/create', { body });
  if (c.status !== 201) throw new Error(`create: ${c.status} ${c.text}`);
  await d.request('POST', `/containers/${c.json.Id}/start`);
  await d.request('POST', `/containers/${c.json.Id}/wait`);
  const logs = await d.request('GET', `/containers/${c.json.Id}/logs?stdout=1`);
  await d.request('DELETE', `/containers/${c.json.Id}`);
  return demuxText(logs.body);
}

/** Creates a container from `body` (its Cmd `cmd`) and starts it; resolves with its id. */
export async function runDetached(d: Daemon, body: Record<string, unknown>, cmd = ['sleep', '300']): Promise<string> {
  const c = await d.request('POST', '/containers/create', { body: { Cmd: cmd, ...body } });
  expect(c.status, c.text).toBe(201);
  const s = await d.request('POST', `/containers/${c.json.Id}/start`);
  expect(s.status, s.text).toBe(204);
  return c.json.Id;
}

/** Runs a command in a running container on a TTY; its output (stdout and stderr) and exit code. */
export async function execOnTty(d: Daemon, id: string, cmd: string[]): Promise<{ out: string; code: number }> {
  const e = await d.request('POST', `/containers/${id}/exec`, {
    body: { Cmd: cmd, AttachStdout: true, AttachStderr: true, Tty: true },
  });
  expect(e.status, e.text).toBe(201);
  const s = await d.request('POST', `/exec/${e.json.Id}/start`, { body: { Detach: false, Tty: true } });
  const i = await d.request('GET', `/exec/${e.json.Id}/json`);
  return { out: s.text, code: i.json.ExitCode };
}

/** Force-removes every container so no process or mount outlives a test file. */
export async function removeAllContainers(d: Daemon): Promise<void> {
  const r = await d.request('GET', '/containers/json?all=1').catch(() => undefined);
  for (const c of (r?.json as { Id: string }[] | undefined) ?? []) {
    await d.request('DELETE', `/containers/${c.Id}?force=1`).catch(() => undefined);
  }
}

/**
 * One environment for a test file: started before its tests, stopped after.
 * Read `.env` inside tests (it is set once beforeAll has run).
 */
export function useEnv(daemonOptions: DaemonOptions = {}): { readonly env: Env; readonly daemon: Daemon } {
  let env: Env | undefined;
  beforeAll(async () => {
    env = await startEnv(daemonOptions);
  });
  afterAll(async () => {
    await env?.stop();
  });
  return {
    get env() {
      return env!;
    },
    get daemon() {
      return env!.daemon;
    },
  };
}
