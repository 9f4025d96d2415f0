// A full disk: berthd's data root on a small ext4 filesystem of the test's
// own (a loop-mounted image file), filled up to a chosen amount by a ballast
// file beside berth's directories. A pull and a commit that run out of space
// fail with dockerd's "no space left on device", free their temp space, and
// leave the daemon and the earlier images intact; with space again, the same
// pull and commit succeed. A container that writes until the disk is full
// does not corrupt berth.db, and the daemon goes on serving.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, statfsSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import Database from '../../src/engine/store/sqlite.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startDaemon, waitFor, type Daemon } from '../harness/daemon.js';
import { pull, removeAllContainers } from '../harness/env.js';
import { busyboxImage, largeImage, pushImage } from '../harness/images.js';
import { allowing, expectNoLeaks, holdings, mountsUnder, registryPool, type Holdings } from '../harness/leaks.js';
import { startRegistry, type Registry } from '../harness/registry.js';
import { demuxText } from '../harness/streams.js';

const MiB = 1024 * 1024;
/** The filesystem: room for busybox, the large image (twice its size: blobs and trees) and the commits. */
const FS_MIB = 320;
const LARGE_MIB = 96;

let dir: string;
let dataRoot: string;
let registry: Registry | undefined;
let d: Daemon | undefined;
let busybox: string;
let large: string;
const q = encodeURIComponent;

beforeAll(async () => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'berth-full-'));
  dataRoot = path.join(dir, 'data');
  const image = path.join(dir, 'fs.img');
  execFileSync('truncate', ['-s', `${FS_MIB}M`, image]);
  // No blocks reserved for root: berthd and the containers' processes are all root here.
  execFileSync('mkfs.ext4', ['-q', '-F', '-m', '0', image]);
  mkdirSync(dataRoot);
  // -o loop: the loop device goes with the unmount (autoclear).
  execFileSync('mount', ['-o', 'loop', image, dataRoot]);
  registry = await startRegistry();
  busybox = `${registry.host}/busybox:latest`;
  large = `${registry.host}/full/large:latest`;
  await pushImage(registry, 'busybox', 'latest', await busyboxImage());
  await pushImage(registry, 'full/large', 'latest', await largeImage(LARGE_MIB, 4));
  d = await startDaemon({ dir });
  await pull(d, busybox);
});

afterAll(async () => {
  // Every step runs whatever failed before it: nothing of the test may stay mounted or attached.
  const steps = [
    async () => d && (await removeAllContainers(d)),
    async () => d && (await d.stop()),
    async () => registry?.stop(),
    () => {
      for (const m of mountsUnder(dataRoot).reverse()) {
        try {
          execFileSync('umount', [m]);
        } catch {
          execFileSync('umount', ['-l', m]);
        }
      }
    },
    () => rmSync(dir, { recursive: true, force: true }),
  ];
  const errors: unknown[] = [];
  for (const step of steps)
    await Promise.resolve()
      .then(step)
      .catch((e: unknown) => errors.push(e));
  if (errors.length) throw errors[0];
});

// ───────────────────────────────── helpers ─────────────────────────────────

const ballast = () => path.join(dataRoot, 'ballast');
const freeBytes = () => {
  const s = statfsSync(dataRoot);
  return s.bavail * s.bsize;
};

/** Makes the filesystem have about `mib` MiB free, with the ballast file (grown or shrunk). */
async function leaveFree(mib: number): Promise<void> {
  // What berthd deletes in the background (a removed image's blob and tree, a
  // container's directory) must be gone first, or its space comes back later.
  await waitFor(() => holdings(d!).temps.length === 0, "berthd's deletions to end");
  rmSync(ballast(), { force: true });
  execFileSync('sync', ['-f', dataRoot]);
  const size = freeBytes() - mib * MiB;
  if (size > 0) execFileSync('fallocate', ['-l', String(size), ballast()]);
}

/** Frees what the ballast held. */
function makeRoom(): void {
  rmSync(ballast(), { force: true });
}

async function createContainer(image: string, cmd: string[]): Promise<string> {
  const r = await d!.request('POST', '/containers/create', { body: { Image: image, Cmd: cmd } });
  expect(r.status, r.text).toBe(201);
  return r.json.Id;
}

async function startContainer(id: string): Promise<void> {
  const s = await d!.request('POST', `/containers/${id}/start`);
  expect(s.status, s.text).toBe(204);
}

const logText = async (id: string) =>
  demuxText((await d!.request('GET', `/containers/${id}/logs?stdout=1&stderr=1`)).body);
const state = async (id: string) => (await d!.request('GET', `/containers/${id}/json`)).json.State;

/** Runs `cmd` in a new container of `image` to its end, removes it, returns its output (exit code 0 asserted). */
async function runToEnd(image: string, cmd: string[]): Promise<string> {
  const id = await createContainer(image, cmd);
  await startContainer(id);
  const w = await d!.request('POST', `/containers/${id}/wait`);
  const out = await logText(id);
  expect(w.json.StatusCode, out).toBe(0);
  expect((await d!.request('DELETE', `/containers/${id}`)).status).toBe(204);
  return out;
}

/** The earlier image is whole and the daemon serves. */
async function expectIntact(): Promise<void> {
  expect((await d!.request('GET', '/_ping')).status).toBe(200);
  expect(await runToEnd(busybox, ['echo', 'intact'])).toBe('intact\n');
}

/** The space the failed operation used is given back (its temp files go in the background). */
async function expectSpaceBack(before: Holdings, freeBefore: number): Promise<void> {
  await expectNoLeaks(d!, before);
  await waitFor(
    () => freeBytes() >= freeBefore - 2 * MiB,
    `free space back to ${freeBefore} bytes (now ${freeBytes()})`,
  );
}

// ─────────────────────────────────── tests ───────────────────────────────────

describe('a full disk', () => {
  it('fails a pull with "no space left on device", frees its temp space, and lets it succeed once there is room', async () => {
    await leaveFree(40);
    const before = allowing(holdings(d!), registryPool(registry!.host));
    const free = freeBytes();
    const r = await d!.request('POST', `/images/create?fromImage=${q(large.replace(/:latest$/, ''))}&tag=latest`);
    expect(r.status).toBe(200);
    const last = r.text
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l))
      .at(-1);
    // dockerd's words: the download's or the extraction's write that failed.
    expect(last.error).toMatch(/^(failed to register layer: )?write \S+: no space left on device$/);
    expect(last.errorDetail.message).toBe(last.error);
    expect((await d!.request('GET', `/images/${q(large)}/json`)).status).toBe(404);
    await expectSpaceBack(before, free);
    await expectIntact();

    makeRoom();
    await pull(d!, large);
    expect(await runToEnd(large, ['sh', '-c', 'cat /data/large-*.bin | wc -c'])).toBe(`${LARGE_MIB * MiB}\n`);
    expect((await d!.request('DELETE', `/images/${q(large)}`)).status).toBe(200);
  });

  it('fails a commit with "no space left on device", frees its temp space, and lets it succeed once there is room', async () => {
    const id = await createContainer(busybox, [
      'sh',
      '-c',
      'dd if=/dev/urandom of=/big bs=1M count=32 2>/dev/null && echo ready; exec sleep 300',
    ]);
    await startContainer(id);
    await waitFor(async () => (await logText(id)).includes('ready'), 'the writes', 30_000, 50);
    await leaveFree(12); // less than the layer's blob: random bytes do not compress
    const before = allowing(holdings(d!), registryPool(registry!.host));
    const free = freeBytes();
    const r = await d!.request('POST', `/commit?container=${id}&repo=full/commit`);
    expect(r.status, r.text).toBe(500);
    expect(r.json.message).toMatch(/^write \S+: no space left on device$/);
    expect((await d!.request('GET', '/images/full/commit/json')).status).toBe(404);
    await expectSpaceBack(before, free);
    // The container was frozen for the commit: it runs on, thawed.
    expect(await state(id)).toMatchObject({ Status: 'running', Paused: false });
    await expectIntact();

    makeRoom();
    const again = await d!.request('POST', `/commit?container=${id}&repo=full/commit`);
    expect(again.status, again.text).toBe(201);
    expect(await runToEnd('full/commit', ['sh', '-c', 'wc -c < /big'])).toBe(`${32 * MiB}\n`);
    expect((await d!.request('DELETE', `/containers/${id}?force=1`)).status).toBe(204);
    expect((await d!.request('DELETE', '/images/full/commit')).status).toBe(200);
  });

  it('survives a container that writes until the disk is full: berth.db stays whole and the daemon serves', async () => {
    await leaveFree(24);
    const id = await createContainer(busybox, [
      'sh',
      '-c',
      'echo filling; dd if=/dev/zero of=/fill bs=64k; echo "dd: $?"; exit 3',
    ]);
    await startContainer(id);
    await waitFor(() => freeBytes() < MiB, 'the disk to be full', 30_000, 50);
    // While it is full: the daemon answers, and what it cannot write it refuses cleanly.
    expect((await d!.request('GET', '/_ping')).status).toBe(200);
    expect((await d!.request('GET', '/containers/json?all=1')).status).toBe(200);
    const made = await d!.request('POST', '/containers/create', { body: { Image: busybox, Cmd: ['true'] } });
    if (made.status !== 201) expect(made.json.message).toMatch(/no space left on device/);
    // The exit is recorded with its code.
    const w = await d!.request('POST', `/containers/${id}/wait`);
    expect(w.json.StatusCode).toBe(3);
    expect(await state(id)).toMatchObject({ Status: 'exited', ExitCode: 3 });

    // berth.db is whole (checked with the daemon running, as a reader).
    const db = new Database(path.join(dataRoot, 'berth.db'), { readonly: true, fileMustExist: true });
    try {
      expect(db.pragma('integrity_check', { simple: true })).toBe('ok');
    } finally {
      db.close();
    }
    // Still full: removing what filled it works (berthd keeps a reserve for its records), and gives the space back.
    expect(freeBytes()).toBeLessThan(8 * MiB);
    for (const c of made.status === 201 ? [id, made.json.Id] : [id])
      expect((await d!.request('DELETE', `/containers/${c}`)).status).toBe(204);
    makeRoom();
    await expectIntact();
    // It also starts again on that data root, with everything in it.
    expect(await d!.stop()).toBe(0);
    await d!.restart();
    await expectIntact();
    expect(existsSync(path.join(dataRoot, 'berth.db'))).toBe(true);
  });
});
