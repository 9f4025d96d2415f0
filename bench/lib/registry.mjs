// Debian's docker-registry on loopback, with the fixtures' images pushed into it.
import { spawn } from 'node:child_process';
import crypto from 'node:crypto';
import { writeFileSync } from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { busyboxImage, largeImage, pushImage } from '../../fixtures/images.mjs';
import { MiB, onCleanup, sleep, tempDir } from './core.mjs';
import { tail } from './http.mjs';

// The registry under a tiny shell watchdog that kills it when our stdin pipe
// closes (we died without cleaning up), as test/harness/registry.ts does.
const WATCHDOG = 'docker-registry serve "$0" & read -r _; kill -9 $! 2>/dev/null; wait';

/** Debian's docker-registry (CNCF distribution) on a free 127.0.0.1 port, temp storage, anonymous. */
export async function startRegistry() {
  const dir = tempDir('berth-bench-reg-');
  const config = {
    version: '0.1',
    log: { level: 'info', formatter: 'text', accesslog: { disabled: true } },
    storage: {
      filesystem: { rootdirectory: path.join(dir, 'storage') },
      delete: { enabled: true },
      maintenance: { uploadpurging: { enabled: false } },
    },
    http: { addr: '127.0.0.1:0', secret: crypto.randomBytes(16).toString('hex') },
  };
  const configFile = path.join(dir, 'config.yml');
  writeFileSync(configFile, JSON.stringify(config, null, 2)); // JSON is YAML
  const proc = spawn('sh', ['-c', WATCHDOG, configFile], { detached: true, stdio: ['pipe', 'ignore', 'pipe'] });
  const closed = new Promise((r) => proc.once('close', r));
  const stop = onCleanup(async () => {
    try {
      process.kill(-proc.pid, 'SIGKILL');
    } catch {}
    await closed;
  });
  const logs = tail(proc.stderr);
  const deadline = Date.now() + 15_000;
  const listening = () => /listening on 127\.0\.0\.1:(\d+)/.exec(logs())?.[1];
  let port = listening();
  for (; !port; port = listening()) {
    if (proc.exitCode !== null || Date.now() > deadline) throw new Error(`docker-registry did not start: ${logs()}`);
    await sleep(10);
  }
  const host = `127.0.0.1:${port}`;
  for (;;) {
    const ok = await new Promise((resolve) => {
      http
        .get(`http://${host}/v2/`, (res) => {
          res.resume();
          resolve(res.statusCode === 200);
        })
        .on('error', () => resolve(false));
    });
    if (ok) break;
    if (Date.now() > deadline) throw new Error(`registry at ${host} does not answer /v2/`);
    await sleep(10);
  }
  return { host, url: `http://${host}`, dir, stop };
}

/** A registry (startRegistry) holding the busybox fixture; `ref` names it: host:port/busybox:latest. */
export async function busyboxRegistry() {
  const registry = await startRegistry();
  await pushImage(registry.url, 'busybox', 'latest', await busyboxImage());
  return { registry, ref: `${registry.host}/busybox:latest` };
}

/**
 * A registry holding a large image: busybox plus `layerCount` layers of random
 * data, `totalMiB` in all; `ref` names it (host:port/large:latest), `bytes` is
 * the size of its compressed layers. Prints a line saying so.
 */
export async function largeImageRegistry(totalMiB, layerCount) {
  const registry = await startRegistry();
  const image = await largeImage(totalMiB, layerCount);
  const ref = `${registry.host}/large:latest`;
  await pushImage(registry.url, 'large', 'latest', image);
  const bytes = image.layers.reduce((a, l) => a + l.size, 0);
  console.log(
    `image: ${image.layers.length} layers (busybox base + ${layerCount} of random data), ${(bytes / MiB).toFixed(1)} MiB compressed (${(bytes / 1e6).toFixed(0)} MB), from docker-registry at ${registry.host}`,
  );
  return { registry, image, ref, bytes };
}
