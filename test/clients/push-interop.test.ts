// Pushes across engines: what berth pushes (a committed image, made here),
// Debian's dockerd 20.10 pulls with the same image id and manifest digest, and
// runs; what dockerd pushes, berth pulls and runs.
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { ApiResponse, Daemon, RequestOptions } from '../harness/daemon.js';
import { startDockerd, type Dockerd } from '../harness/dockerd.js';
import { type Env, pull, splitTag, useEnv } from '../harness/env.js';
import { demuxText } from '../harness/streams.js';

const ctx = useEnv();
let env: Env;
let d: Daemon;
let dockerd: Dockerd;
beforeAll(async () => {
  ({ env, daemon: d } = ctx);
  dockerd = await startDockerd();
}, 90_000);
afterAll(async () => {
  await dockerd?.stop();
});

type Engine = { request(method: string, urlPath: string, opts?: RequestOptions): Promise<ApiResponse> };
const q = encodeURIComponent;
/** dockerd 20.10 refuses a push without X-Registry-Auth: `{}` is anonymous. */
const ANONYMOUS = { 'X-Registry-Auth': Buffer.from('{}').toString('base64') };

/** Pushes `name:tag`; the digest of its aux message. */
async function push(engine: Engine, name: string, tag: string): Promise<string> {
  const r = await engine.request('POST', `/images/${name}/push?tag=${tag}`, { headers: ANONYMOUS });
  expect(r.status, r.text).toBe(200);
  const msgs = r.text
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l));
  expect(
    msgs.find((m) => m.error),
    r.text,
  ).toBeUndefined();
  return msgs.find((m) => m.aux).aux.Digest;
}

/** A pull by dockerd (API 1.41 at most: the harness's pull asks for 1.43). */
async function dockerdPull(name: string, tag: string): Promise<void> {
  const r = await dockerd.request('POST', `/images/create?fromImage=${q(name)}&tag=${q(tag)}`);
  expect(r.status, r.text).toBe(200);
  expect(r.text).not.toMatch(/"error"/);
}

/** Runs `cmd` in a container of `image` to its end; its stdout. */
async function output(engine: Engine, image: string, cmd: string[]): Promise<string> {
  const c = await engine.request('POST', '/containers/create', {
    body: { Image: image, Cmd: cmd, HostConfig: { NetworkMode: 'none' } },
  });
  expect(c.status, c.text).toBe(201);
  await engine.request('POST', `/containers/${c.json.Id}/start`);
  await engine.request('POST', `/containers/${c.json.Id}/wait`);
  const logs = await engine.request('GET', `/containers/${c.json.Id}/logs?stdout=1`);
  await engine.request('DELETE', `/containers/${c.json.Id}?force=1`);
  return demuxText(logs.body);
}

it('berth pushes a committed image; dockerd pulls the same id and digest, and runs it', async () => {
  const c = await d.request('POST', '/containers/create', {
    body: { Image: env.busybox, Cmd: ['sh', '-c', 'echo from-berth > /made.txt'] },
  });
  await d.request('POST', `/containers/${c.json.Id}/start`);
  await d.request('POST', `/containers/${c.json.Id}/wait`);
  const target = `${env.registry.host}/interop/from-berth`;
  const commit = await d.request('POST', `/commit?container=${c.json.Id}&repo=${q(target)}&tag=v1`);
  expect(commit.status, commit.text).toBe(201);
  const digest = await push(d, target, 'v1');

  await dockerdPull(target, 'v1');
  const img = (await dockerd.request('GET', `/images/${target}:v1/json`)).json;
  expect(img.Id).toBe(commit.json.Id);
  expect(img.RepoDigests).toEqual([`${target}@${digest}`]);
  expect(await output(dockerd, `${target}:v1`, ['cat', '/made.txt'])).toBe('from-berth\n');
});

it('dockerd pushes; berth pulls it and runs it', async () => {
  await dockerdPull(...splitTag(env.busybox));
  const target = `${env.registry.host}/interop/from-dockerd`;
  await dockerd.request('POST', `/images/${q(env.busybox)}/tag?repo=${q(target)}&tag=v1`);
  const digest = await push(dockerd, target, 'v1');
  await pull(d, `${target}:v1`);
  expect((await d.request('GET', `/images/${target}:v1/json`)).json.RepoDigests).toContain(`${target}@${digest}`);
  expect(await output(d, `${target}:v1`, ['echo', 'ran'])).toBe('ran\n');
});
