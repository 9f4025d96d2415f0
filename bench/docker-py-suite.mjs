// docker-py's own integration tests against berthd and against dockerd 20.10,
// file by file, and the tests that pass on one and not the other. Not a
// benchmark and not part of berth's tests (they need the docker-py source and
// take minutes); a check of compatibility to run by hand:
//   node bench/docker-py-suite.mjs <docker-py git dir> [tag=5.0.3] [test files…]
// (as root, after npm run build; the git dir e.g. from `fetch github:docker/docker-py`).
//
// The client is Debian's python3-docker (the tests' copy of the `docker`
// package is left out of the extracted tree), run by /usr/bin/python3 with
// python3-pytest. The daemons as bench/network.mjs starts them: berthd with a
// default bridge, chain prefix and pool of its own, dockerd in a network
// namespace of its own. Neither reaches Docker Hub: both get alpine:3.10 (the
// tests' TEST_IMG), alpine:latest and busybox:latest by `POST /images/load`,
// busybox-static with what the exec tests expect of alpine (a postgres user,
// /var/opt). docker-py's conftest turns warnings into errors; Python 3.11's
// distutils warnings would fail every test, so that is relaxed to "default".
// The swarm, plugin, secret, config and service files are not run: berth has
// no swarm mode.
import { execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { BUSYBOX_CONFIG, buildImage, buildLayer, busyboxLayer } from '../fixtures/images.mjs';
import {
  berthdWithNetworks,
  dockerdWithNetworks,
  loadImage,
  onCleanup,
  removeAllContainers,
  runBench,
  tempDir,
  which,
} from './lib.mjs';

const [gitDir, tag = '5.0.3', ...given] = process.argv.slice(2);
const FILES = given.length
  ? given
  : [
      'api_container_test.py',
      'api_exec_test.py',
      'api_network_test.py',
      'api_volume_test.py',
      'api_client_test.py',
      'models_containers_test.py',
      'models_networks_test.py',
      'models_volumes_test.py',
    ];
const id = randomBytes(3).toString('hex');

/** busybox, plus alpine's postgres user (uid 70) and /var/opt, which docker-py's exec tests use. */
async function alpineLike() {
  const passwd = [
    'root:x:0:0:root:/root:/bin/sh',
    'app:x:1000:1000:app:/home/app:/bin/sh',
    'postgres:x:70:70:postgres:/var/lib/postgresql:/bin/sh',
    'nobody:x:65534:65534:nobody:/nonexistent:/bin/false',
    '',
  ].join('\n');
  const group = ['root:x:0:', 'app:x:1000:', 'postgres:x:70:', 'nogroup:x:65534:', ''].join('\n');
  const extra = await buildLayer([
    { path: 'etc', type: 'dir', mode: 0o755 },
    { path: 'etc/passwd', content: passwd },
    { path: 'etc/group', content: group },
    { path: 'var', type: 'dir', mode: 0o755 },
    { path: 'var/opt', type: 'dir', mode: 0o755 },
  ]);
  return buildImage({ layers: [await busyboxLayer(), extra], config: { ...BUSYBOX_CONFIG } });
}

/** The tests of `tag`, without docker-py's own `docker` package, warnings not turned into errors. */
function extract() {
  const dir = tempDir('berth-docker-py-');
  const tar = execFileSync('git', ['-C', gitDir, 'archive', tag, 'tests', 'pytest.ini'], {
    maxBuffer: 256 * 1024 * 1024,
  });
  execFileSync('tar', ['-x', '-C', dir], { input: tar });
  const conftest = path.join(dir, 'tests/integration/conftest.py');
  writeFileSync(
    conftest,
    readFileSync(conftest, 'utf8').replace("warnings.simplefilter('error')", "warnings.simplefilter('default')"),
  );
  return dir;
}

/** One file's run: its outcome per test (from pytest's -rA lines) and the summary line. */
function pytest(dir, d, file) {
  return new Promise((resolve) => {
    const args = [
      '-m',
      'pytest',
      '-p',
      'no:cacheprovider',
      '-W',
      'default',
      '-rA',
      '--tb=line',
      `tests/integration/${file}`,
    ];
    const child = spawn('/usr/bin/python3', args, {
      cwd: dir,
      env: { ...process.env, DOCKER_HOST: d.host, COLUMNS: '250' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const out = [];
    child.stdout.on('data', (c) => out.push(c));
    child.stderr.on('data', (c) => out.push(c));
    const killer = setTimeout(() => child.kill('SIGKILL'), 30 * 60_000);
    child.once('close', () => {
      clearTimeout(killer);
      const text = Buffer.concat(out).toString();
      const outcomes = new Map();
      for (const m of text.matchAll(/^(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) (\S+)(?: - (.*))?$/gm))
        outcomes.set(m[2], { outcome: m[1], why: m[3] ?? '' });
      const summary = text.trim().split('\n').at(-1).replace(/=/g, '').trim();
      resolve({ outcomes, summary });
    });
  });
}

await runBench(async () => {
  if (!gitDir) throw new Error('usage: node bench/docker-py-suite.mjs <docker-py git dir> [tag] [files…]');
  if (!which('dockerd')) throw new Error('needs dockerd: bench/run.sh --with-dockerd installs it');
  const dir = extract();
  const daemons = [await berthdWithNetworks(id), await dockerdWithNetworks(id)];
  // Before the daemons stop (LIFO): a test that failed half-way may leave a container running.
  onCleanup(() => Promise.all(daemons.map((d) => removeAllContainers(d))));
  const image = await alpineLike();
  for (const d of daemons)
    for (const name of ['alpine:3.10', 'alpine:latest', 'busybox:latest']) await loadImage(d, image, name);
  const differ = [];
  for (const file of FILES) {
    // One daemon at a time: the tests prune, list and count what is there.
    const [b, k] = [await pytest(dir, daemons[0], file), await pytest(dir, daemons[1], file)];
    console.log(`${file}\n  berthd:  ${b.summary}\n  dockerd: ${k.summary}`);
    for (const [test, r] of b.outcomes) {
      const other = k.outcomes.get(test);
      if (r.outcome !== 'FAILED' && r.outcome !== 'ERROR') continue;
      console.log(`  berthd ${r.outcome} ${test} (dockerd: ${other?.outcome ?? 'not run'}): ${r.why.slice(0, 200)}`);
      if (other?.outcome === 'PASSED') differ.push(test);
    }
    for (const [test, r] of k.outcomes)
      if ((r.outcome === 'FAILED' || r.outcome === 'ERROR') && b.outcomes.get(test)?.outcome === 'PASSED')
        console.log(`  dockerd ${r.outcome} ${test} (berthd: PASSED): ${r.why.slice(0, 200)}`);
  }
  console.log(
    `\n${differ.length} tests pass on dockerd and fail on berthd:\n${differ.map((t) => `  ${t}`).join('\n')}`,
  );
});
