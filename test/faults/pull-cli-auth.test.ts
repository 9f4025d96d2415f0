// `docker pull` (the real CLI) from a registry that wants credentials, with
// none and nothing to type them into (stdin is /dev/null, as in a CI job):
// the CLI must report and exit, not wait for a username. It prompts when the
// daemon answers 401, so berthd answers as dockerd does: a 500 for "no basic
// auth credentials", a 404 "pull access denied" when a token service refuses.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { startDaemon, type Daemon } from '../harness/daemon.js';
import { buildImage, buildLayer, pushImage } from '../harness/images.js';
import { startRegistry, type Registry, type RegistryAuth } from '../harness/registry.js';

/** Long enough for a loaded machine, far shorter than forever. */
const TIMEOUT_MS = 30_000;

let d: Daemon;
const registries = new Map<RegistryAuth, Registry>();
const configDir = mkdtempSync(path.join(os.tmpdir(), 'berth-cli-'));

beforeAll(async () => {
  const image = buildImage({
    layers: [await buildLayer([{ path: 'hello.txt', content: 'hello' }])],
    config: { Cmd: ['true'] },
  });
  for (const auth of ['htpasswd', 'token'] as const) {
    const reg = await startRegistry({ auth });
    registries.set(auth, reg);
    await pushImage(reg, 'private', 'latest', image);
  }
  d = await startDaemon();
});

afterAll(async () => {
  await d?.cleanup();
  for (const reg of registries.values()) await reg.stop();
  rmSync(configDir, { recursive: true, force: true });
});

/** `docker pull` with stdin at /dev/null and no stored credentials; killed at TIMEOUT_MS. */
function dockerPull(ref: string): Promise<{ code: number | null; output: string; ms: number; killed: boolean }> {
  const started = Date.now();
  return new Promise((resolve) => {
    const child = spawn('docker', ['pull', ref], {
      env: { ...process.env, DOCKER_HOST: d.host, DOCKER_CONFIG: configDir },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (c: Buffer) => (output += c.toString()));
    child.stderr.on('data', (c: Buffer) => (output += c.toString()));
    let killed = false;
    const timer = setTimeout(() => {
      killed = true;
      child.kill('SIGKILL');
    }, TIMEOUT_MS);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, output, ms: Date.now() - started, killed });
    });
  });
}

it.each([
  ['htpasswd', /no basic auth credentials/],
  ['token', /pull access denied for .*private, repository does not exist or may require 'docker login'/],
] as const)('a %s registry without credentials: docker pull reports and exits', async (auth, message) => {
  const reg = registries.get(auth)!;
  const r = await dockerPull(`${reg.host}/private:latest`);
  expect(r.killed, `docker pull still waiting after ${TIMEOUT_MS} ms:\n${r.output}`).toBe(false);
  expect(r.code).not.toBe(0);
  expect(r.output).toMatch(message);
  expect(r.output).not.toMatch(/Username/);
});
