// HostConfig.Runtime with the daemon's configured runtimes (daemon.json
// `runtimes`): a container created with one is run by it, with its
// runtimeArgs, for every runtime command on it (create, kill, delete), and the
// others by the default. The runtime here is a wrapper of runc that notes each
// call, so the test sees who ran what.
import { execFileSync } from 'node:child_process';
import { chmodSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import type { Daemon } from '../harness/daemon.js';
import { type Env, useEnv } from '../harness/env.js';
import { demuxText } from '../harness/streams.js';

const dir = mkdtempSync(path.join(os.tmpdir(), 'berth-runtimes-'));
const calls = path.join(dir, 'calls');
const wrapper = path.join(dir, 'traced-runc');
const runc = execFileSync('sh', ['-c', 'command -v runc']).toString().trim();
writeFileSync(wrapper, `#!/bin/sh\necho "$*" >> ${calls}\nexec ${runc} "$@"\n`);
chmodSync(wrapper, 0o755);
writeFileSync(calls, '');
const configFile = path.join(dir, 'daemon.json');
writeFileSync(configFile, JSON.stringify({ runtimes: { traced: { path: wrapper, runtimeArgs: ['--debug'] } } }));

const ctx = useEnv({ args: ['--config-file', configFile] });
let env: Env;
let d: Daemon;
beforeAll(() => {
  ({ env, daemon: d } = ctx);
});

const callsOf = (id: string) =>
  readFileSync(calls, 'utf8')
    .split('\n')
    .filter((l) => l.includes(id));

async function create(host: Record<string, unknown>, cmd: string[]): Promise<string> {
  const r = await d.request('POST', '/containers/create', { body: { Image: env.busybox, Cmd: cmd, HostConfig: host } });
  expect(r.status, r.text).toBe(201);
  return r.json.Id;
}

describe('HostConfig.Runtime', () => {
  it('a configured runtime runs the container, with its runtimeArgs, for each runtime command', async () => {
    const id = await create({ Runtime: 'traced' }, ['sh', '-c', 'echo by traced; exec sleep 60']);
    expect((await d.request('GET', `/containers/${id}/json`)).json.HostConfig.Runtime).toBe('traced');
    expect((await d.request('POST', `/containers/${id}/start`)).status).toBe(204);
    expect((await d.request('POST', `/containers/${id}/stop?t=0`)).status).toBe(204);
    const logs = await d.request('GET', `/containers/${id}/logs?stdout=1`);
    expect(demuxText(logs.body)).toBe('by traced\n');
    expect((await d.request('DELETE', `/containers/${id}`)).status).toBe(204);
    const made = callsOf(id);
    expect(made.some((l) => /^--debug .*\bcreate\b/.test(l))).toBe(true);
    expect(made.some((l) => /\bkill\b/.test(l))).toBe(true);
    expect(made.some((l) => /\bdelete\b/.test(l))).toBe(true);
  });

  it('the default runs the others; an unknown name is refused in dockerd words', async () => {
    const id = await create({}, ['true']);
    expect((await d.request('POST', `/containers/${id}/start`)).status).toBe(204);
    await d.request('POST', `/containers/${id}/wait`);
    expect((await d.request('GET', `/containers/${id}/json`)).json.HostConfig.Runtime).toBe('runc');
    expect(callsOf(id)).toEqual([]);
    const r = await d.request('POST', '/containers/create', {
      body: { Image: env.busybox, HostConfig: { Runtime: 'nope' } },
    });
    expect([r.status, r.json.message]).toEqual([400, 'Unknown runtime specified nope']);
  });

  it('an exec in such a container runs through it too', async () => {
    const id = await create({ Runtime: 'traced' }, ['sleep', '60']);
    expect((await d.request('POST', `/containers/${id}/start`)).status).toBe(204);
    const e = await d.request('POST', `/containers/${id}/exec`, { body: { Cmd: ['echo', 'in'], AttachStdout: true } });
    const out = await d.request('POST', `/exec/${e.json.Id}/start`, { body: { Detach: false } });
    expect(demuxText(out.body)).toBe('in\n');
    expect(callsOf(id).some((l) => /\bexec\b/.test(l))).toBe(true);
    await d.request('DELETE', `/containers/${id}?force=1`);
  });
});
