// The runc floor: a bundle of the busybox rootfs run by runc alone.
import { spawn, spawnSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { pipeline } from 'node:stream/promises';
import zlib from 'node:zlib';
import { now, onCleanup, tempDir } from './core.mjs';

/** A bundle with the busybox rootfs and runc's default spec running `true`; returns a timed runner. */
export async function runcFloor(layer) {
  const dir = tempDir('berth-bench-runc-');
  const rootfs = path.join(dir, 'bundle', 'rootfs');
  const state = path.join(dir, 'state');
  mkdirSync(rootfs, { recursive: true });
  mkdirSync(state);
  const untar = spawn('tar', ['-x', '-C', rootfs], { stdio: ['pipe', 'ignore', 'inherit'] });
  const untarred = new Promise((resolve, reject) =>
    untar.once('close', (code) => (code === 0 ? resolve() : reject(new Error(`tar exited ${code}`)))),
  );
  await pipeline(layer.open(), zlib.createGunzip(), untar.stdin);
  await untarred;
  const gen = spawnSync('runc', ['spec', '--bundle', path.join(dir, 'bundle')], { encoding: 'utf8' });
  if (gen.status !== 0) throw new Error(`runc spec: ${gen.stderr}`);
  const specFile = path.join(dir, 'bundle', 'config.json');
  const spec = JSON.parse(spawnSync('cat', [specFile], { encoding: 'utf8' }).stdout);
  spec.process.terminal = false;
  spec.process.args = ['true'];
  writeFileSync(specFile, JSON.stringify(spec, null, 2));
  let n = 0;
  onCleanup(() => {
    // A run interrupted half-way leaves its container: delete whatever runc still knows.
    const list = spawnSync('runc', ['--root', state, 'list', '-q'], { encoding: 'utf8' }).stdout ?? '';
    for (const id of list.split('\n').filter(Boolean)) spawnSync('runc', ['--root', state, 'delete', '--force', id]);
  });
  return () =>
    new Promise((resolve, reject) => {
      const t0 = now();
      const p = spawn(
        'runc',
        ['--root', state, 'run', '--bundle', path.join(dir, 'bundle'), `bench-${process.pid}-${n++}`],
        { stdio: ['ignore', 'ignore', 'pipe'] },
      );
      let err = '';
      p.stderr.on('data', (c) => (err += c));
      p.once('close', (code) =>
        code === 0 ? resolve(now() - t0) : reject(new Error(`runc run exited ${code}: ${err}`)),
      );
    });
}
