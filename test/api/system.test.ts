// The API frame against a real berthd: versions, ping, errors, the docker CLI,
// the data-root lock, stale sockets and a clean shutdown.
import { execFile } from 'node:child_process';
import { existsSync, readdirSync, readlinkSync, writeFileSync, statSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BERTHD, startDaemon, type Daemon, waitFor } from '../harness/daemon.js';

const run = promisify(execFile);
let d: Daemon;

beforeAll(async () => {
  d = await startDaemon();
});
afterAll(async () => {
  await d?.cleanup();
});

describe('swarm endpoints (berth has no swarm mode)', () => {
  it('answers as a dockerd in no swarm: 503 with its words, and refuses to start or join one', async () => {
    const notManager = await d.request('GET', '/v1.47/swarm');
    expect(notManager.status).toBe(503);
    expect(notManager.json.message).toMatch(/^This node is not a swarm manager\. Use "docker swarm init"/);
    expect((await d.request('GET', '/v1.47/services')).status).toBe(503);
    // docker-py's leave_swarm(force=True), run by its tests' tear-down, takes this answer as "nothing to leave".
    const leave = await d.request('POST', '/v1.47/swarm/leave?force=1');
    expect(leave.status).toBe(503);
    expect(leave.json.message).toBe('This node is not part of a swarm');
    const init = await d.request('POST', '/v1.47/swarm/init', { body: {} });
    expect(init.status).toBe(501);
    expect(init.json.message).toContain('no swarm mode');
  });
});

describe('ping and version', () => {
  it('answers /_ping on versioned and unversioned paths with dockerd headers', async () => {
    for (const p of ['/_ping', '/v1.40/_ping']) {
      const r = await d.request('GET', p);
      expect(r.status).toBe(200);
      expect(r.text).toBe('OK');
      expect(r.headers['api-version']).toBe('1.47');
      expect(r.headers.ostype).toBe('linux');
      expect(r.headers['cache-control']).toBe('no-cache, no-store, must-revalidate');
      expect(r.headers.pragma).toBe('no-cache');
      expect(r.headers['docker-experimental']).toBe('false');
      expect(r.headers.server).toMatch(/^berth\//);
    }
    const head = await d.request('HEAD', '/_ping');
    expect(head.status).toBe(200);
    expect(head.text).toBe('');
  });

  it('accepts any Host header', async () => {
    const r = await d.request('GET', '/v1.41/_ping', { host: 'some.random.name:1234' });
    expect(r.status).toBe(200);
  });

  it('agrees between /version and /v1.40/version', async () => {
    const a = await d.request('GET', '/version');
    const b = await d.request('GET', '/v1.40/version');
    expect(a.status).toBe(200);
    expect(b.json).toEqual(a.json);
    expect(a.json).toMatchObject({ ApiVersion: '1.47', MinAPIVersion: '1.24', Os: 'linux', Arch: 'amd64' });
    expect(a.json.Components[0]).toMatchObject({
      Name: 'Engine',
      Details: { ApiVersion: '1.47', MinAPIVersion: '1.24' },
    });
    expect(a.json.KernelVersion).toBeTruthy();
  });

  it("refuses versions outside the range with dockerd's wording", async () => {
    const high = await d.request('GET', '/v9.99/version');
    expect(high.status).toBe(400);
    expect(high.json).toEqual({ message: 'client version 9.99 is too new. Maximum supported API version is 1.47' });
    // cri-dockerd pins /v1.44 (0.3.16) and /v1.46 (0.3.17 on) without negotiating; Docker 28's CLI asks 1.48+.
    for (const v of ['1.44', '1.46', '1.47']) expect((await d.request('GET', `/v${v}/version`)).status).toBe(200);
    const next = await d.request('GET', '/v1.48/version');
    expect(next.status).toBe(400);
    expect(next.json).toEqual({ message: 'client version 1.48 is too new. Maximum supported API version is 1.47' });
    const low = await d.request('GET', '/v1.12/version');
    expect(low.status).toBe(400);
    // Below API 1.23 dockerd answers errors in plain text.
    expect(low.headers['content-type']).toMatch(/^text\/plain/);
    expect(low.text).toMatch(/^client version 1.12 is too old. Minimum supported API version is 1.24/);
  });

  it('answers an unknown route with 404 page not found', async () => {
    const r = await d.request('GET', '/v1.41/no/such/route');
    expect(r.status).toBe(404);
    expect(r.json).toEqual({ message: 'page not found' });
  });

  it('serves /info with the fields clients read', async () => {
    const r = await d.request('GET', '/v1.41/info');
    expect(r.status).toBe(200);
    expect(r.json).toMatchObject({
      Containers: 0,
      Images: 0,
      Driver: 'overlay2',
      DockerRootDir: d.dataRoot,
      OSType: 'linux',
      CgroupDriver: 'cgroupfs',
      DefaultRuntime: 'runc',
      Swarm: { LocalNodeState: 'inactive' },
    });
    expect(r.json.NCPU).toBeGreaterThan(0);
    expect(r.json.MemTotal).toBeGreaterThan(0);
    expect(r.json.Runtimes.runc.path).toBe('runc');
    expect(r.json.RegistryConfig.IndexConfigs['docker.io'].Secure).toBe(true);
  });
});

describe('docker CLI', () => {
  it('docker version shows client and server', async () => {
    const { stdout } = await run('docker', ['version'], { env: { ...process.env, DOCKER_HOST: d.host } });
    expect(stdout).toMatch(/Server: berth/);
    // Docker 28's CLI speaks 1.50 and negotiates down to berth's maximum.
    expect(stdout).toMatch(/API version:\s+1\.47 \(minimum version 1\.24\)/);
    expect(stdout).toMatch(/API version:\s+1\.47 \(downgraded from 1\.\d+\)/);
  });
  it('docker info shows the server without error', async () => {
    const { stdout, stderr } = await run('docker', ['info'], { env: { ...process.env, DOCKER_HOST: d.host } });
    expect(stdout).toMatch(/Storage Driver: overlay2/);
    expect(stdout).toMatch(new RegExp(`Docker Root Dir: ${d.dataRoot}`));
    expect(stderr).not.toMatch(/error/i);
  });
});

describe('daemon lifecycle', () => {
  it('makes the socket mode 0660', () => {
    expect(statSync(d.socket).mode & 0o777).toBe(0o660);
  });

  it('once it has answered, holds its database reserve and the sealed copy of runc it gives conmon', async () => {
    // Both are made after the first answer (daemon.ts, afterFirstAnswer), not before the socket answers.
    await waitFor(
      () => statSync(path.join(d.dataRoot, 'berth.db.reserve'), { throwIfNoEntry: false })?.size === 4 << 20,
      'the 4 MiB database reserve',
    );
    const fds = () =>
      readdirSync(`/proc/${d.proc.pid}/fd`).map((fd) =>
        readlinkSync(`/proc/${d.proc.pid}/fd/${fd}`, { encoding: 'utf8' }),
      );
    await waitFor(() => fds().some((t) => t.startsWith('/memfd:runc_cloned')), "runc's sealed copy");
  });

  it('refuses a second berthd on the same data root and leaves the first serving', async () => {
    const other = path.join(d.dir, 'other.sock');
    const err = await run(process.execPath, [
      BERTHD,
      '-H',
      `unix://${other}`,
      '--data-root',
      d.dataRoot,
      '--exec-root',
      d.execRoot,
      '--config-file',
      path.join(d.dir, 'daemon.json'),
      '--bridge',
      'none',
      '--iptables=false',
    ]).catch((e) => e);
    expect(err.code).toBe(1);
    expect(err.stderr).toMatch(/another berthd \(pid \d+\) is already using data root/);
    expect((await d.request('GET', '/_ping')).status).toBe(200);
  });

  it('refuses a socket another daemon serves', async () => {
    const err = await run(process.execPath, [
      BERTHD,
      '-H',
      d.host,
      '--data-root',
      path.join(d.dir, 'data2'),
      '--exec-root',
      d.execRoot,
      '--config-file',
      path.join(d.dir, 'daemon.json'),
      '--bridge',
      'none',
      '--iptables=false',
    ]).catch((e) => e);
    expect(err.code).toBe(1);
    expect(err.stderr).toMatch(/another daemon is already serving on/);
  });

  it('refuses a flag given both on the command line and in daemon.json', async () => {
    const cfg = path.join(d.dir, 'both.json');
    writeFileSync(cfg, JSON.stringify({ 'data-root': '/tmp/x' }));
    const err = await run(process.execPath, [
      BERTHD,
      '--data-root',
      '/tmp/y',
      '--config-file',
      cfg,
      '--bridge',
      'none',
    ]).catch((e) => e);
    expect(err.code).toBe(1);
    expect(err.stderr).toMatch(/specified both as a flag and in the configuration file/);
  });

  it('shuts down cleanly on SIGTERM, removes a stale socket on the next start and keeps its state', async () => {
    const e = await startDaemon();
    try {
      const id = (await e.request('GET', '/info')).json.ID;
      expect(await e.stop()).toBe(0);
      expect(existsSync(e.socket)).toBe(false);
      // A daemon that dies hard leaves its socket behind; the next start must clear it.
      await e.restart();
      await e.kill();
      expect(existsSync(e.socket)).toBe(true);
      await e.restart();
      expect((await e.request('GET', '/info')).json.ID).toBe(id);
    } finally {
      await e.cleanup();
    }
  });

  it('listens on every -H given', async () => {
    const e = await startDaemon({ args: ['-H', 'unix:///tmp/berth-extra-test.sock'] });
    try {
      const { request } = await import('../harness/daemon.js');
      expect((await request('/tmp/berth-extra-test.sock', 'GET', '/_ping')).text).toBe('OK');
      // The socket is not a leftover: a client can connect and is served.
      await new Promise<void>((res, rej) =>
        net
          .connect('/tmp/berth-extra-test.sock')
          .once('connect', function (this: net.Socket) {
            this.destroy();
            res();
          })
          .once('error', rej),
      );
    } finally {
      await e.cleanup();
    }
  });
});

describe('shutdown with long streams open', () => {
  it('stops promptly while a client follows /events', async () => {
    const e = await startDaemon();
    try {
      const http = await import('node:http');
      const got = new Promise<void>((resolve) => {
        http
          .get({ socketPath: e.socket, path: '/events' }, (res) => {
            res.on('data', () => undefined);
            res.on('end', resolve);
            res.on('error', () => resolve());
          })
          .on('error', () => resolve());
      });
      await new Promise((r) => setTimeout(r, 200));
      expect(await e.stop()).toBe(0);
      await got;
    } finally {
      await e.cleanup();
    }
  });
});

describe('GET /system/df', () => {
  it('has every kind by default, only the asked ones with `type` (API 1.42), and refuses an unknown type', async () => {
    const all = await d.request('GET', '/v1.47/system/df');
    expect(all.status).toBe(200);
    // No layers: LayersSize is left out, as dockerd's omitempty does.
    expect(all.json).toEqual({ Images: [], Containers: [], Volumes: [], BuildCache: [] });
    const some = await d.request('GET', '/v1.47/system/df?type=image&type=volume');
    expect(some.json).toEqual({ Images: [], Volumes: [] });
    const old = await d.request('GET', '/v1.41/system/df?type=image');
    expect(Object.keys(old.json).sort()).toEqual(['BuildCache', 'Containers', 'Images', 'Volumes']);
    const bad = await d.request('GET', '/v1.47/system/df?type=network');
    expect(bad.status).toBe(400);
    expect(bad.json.message).toBe('unknown object type: network');
  });
});
