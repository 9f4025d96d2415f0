// Image archives across engines: what berth's `docker save` writes, dockerd
// 20.10 loads and skopeo reads (as a docker archive and as an OCI layout);
// what dockerd 20.10 saves (its legacy layout), berth loads and runs.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Daemon } from '../harness/daemon.js';
import { startDockerd, type Dockerd } from '../harness/dockerd.js';
import { type Env, runToEnd, useEnv } from '../harness/env.js';

const ctx = useEnv();
let env: Env;
let d: Daemon;
let dockerd: Dockerd;
let dir: string;
beforeAll(async () => {
  ({ env, daemon: d } = ctx);
  dockerd = await startDockerd();
  dir = mkdtempSync(path.join(os.tmpdir(), 'interop-'));
}, 90_000);
afterAll(async () => {
  await dockerd?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const inspectId = async (daemon: { request: Daemon['request'] }, ref: string) =>
  (await daemon.request('GET', `/images/${encodeURIComponent(ref)}/json`)).json?.Id as string | undefined;

describe('archives between berth, dockerd 20.10 and skopeo', () => {
  it('berth saves; dockerd loads the same image id; skopeo reads both layouts of the file', async () => {
    await d.request('POST', `/images/${encodeURIComponent(env.busybox)}/tag?repo=interop/out&tag=1`);
    const id = await inspectId(d, 'interop/out:1');
    const saved = await d.request('GET', '/images/get?names=interop/out:1');
    expect(saved.status).toBe(200);
    const file = path.join(dir, 'berth.tar');
    writeFileSync(file, saved.body);

    const loaded = await dockerd.request('POST', '/images/load?quiet=1', { raw: saved.body });
    expect(loaded.status, loaded.text).toBe(200);
    expect(loaded.text).toContain('Loaded image: interop/out:1');
    expect(await inspectId(dockerd, 'interop/out:1')).toBe(id);

    const asDocker = JSON.parse(execFileSync('skopeo', ['inspect', '--raw', `docker-archive:${file}`]).toString());
    const asOci = JSON.parse(execFileSync('skopeo', ['inspect', `oci-archive:${file}`]).toString());
    expect(asDocker.config.digest).toBe(id);
    expect(asOci.Layers).toHaveLength(asDocker.layers.length);
    // A full copy reads every blob and checks its digest.
    execFileSync('skopeo', ['copy', '-q', `oci-archive:${file}`, `dir:${path.join(dir, 'copied')}`]);
  });

  it('dockerd saves (its 20.10 layout); berth loads the same image id and runs it', async () => {
    const tagged = await dockerd.request('POST', '/images/interop%2Fout:1/tag?repo=interop/back&tag=2');
    expect(tagged.status, tagged.text).toBe(201);
    const id = await inspectId(dockerd, 'interop/back:2');
    const saved = await dockerd.request('GET', '/images/get?names=interop/back:2');
    expect(saved.status).toBe(200);
    const loaded = await d.request('POST', '/images/load', { raw: saved.body });
    expect(loaded.text).toContain('Loaded image: interop/back:2');
    expect(await inspectId(d, 'interop/back:2')).toBe(id);
    expect(await runToEnd(d, { Image: 'interop/back:2', Cmd: ['echo', 'via dockerd'] })).toBe('via dockerd\n');
  });
});
