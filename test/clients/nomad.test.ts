// Nomad's docker task driver (hashicorp/nomad v2.0.5, drivers/docker, on github.com/moby/moby/client
// v0.5.0) as a client of berthd. Nomad cannot be built here, so what it sends was written down from
// its source as fixtures/nomad/*.json (each request names the function it comes from) and is
// replayed against the real berthd: fingerprint, image pull and load, the pause container of a
// group network, a task with Nomad's HostConfig (inline seccomp, CgroupnsMode, Runtime, the
// container: network), its held wait, stats, exec, signal, stop and removal, and the reconcilers'
// lists. The assertions are about what Nomad reads back.
import { spawnSync } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readlinkSync, rmSync, statSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { httpGetWhenUp } from '../harness/http.js';
import { waitFor } from '../harness/daemon.js';
import { useEnv } from '../harness/env.js';
import { BUSYBOX_CONFIG, buildImage, buildLayer, busyboxFiles, busyboxImage, pushImage } from '../harness/images.js';
import { loadSequence, Replay } from '../harness/sequence.js';
import { demux } from '../harness/streams.js';
import { tarOf } from '../harness/tar.js';

const ctx = useEnv();
const seq = (name: string) => loadSequence('nomad', name);
const allocId = randomUUID();
const LOADED = 'nomad-load/app:1.0';
const HOSTS = '127.0.0.1 localhost\n10.98.0.7 web.nomad-group\n';
let allocDir: string;
let replay: Replay;
let loadedConfigDigest: string;

/** A `docker save` archive of one image named `name` (a user `app`), built here, not by berthd. */
async function loadArchive(name: string): Promise<{ tar: Buffer; configDigest: string }> {
  const layer = await buildLayer(busyboxFiles(), { gzip: false });
  const image = buildImage({ layers: [layer], config: { ...BUSYBOX_CONFIG, User: 'app', Labels: { name } } });
  const hex = image.configDigest.slice('sha256:'.length);
  const tar = await tarOf([
    { name: `${hex}/`, type: 'directory' },
    { name: `${hex}/layer.tar`, body: layer.blob! },
    { name: `${hex}.json`, body: image.configBytes },
    {
      name: 'manifest.json',
      body: JSON.stringify([{ Config: `${hex}.json`, RepoTags: [name], Layers: [`${hex}/layer.tar`] }]),
    },
  ]);
  return { tar, configDigest: image.configDigest };
}

beforeAll(async () => {
  const reg = ctx.env.registry;
  // The infra image's default command must keep running, as the pause binary does.
  await pushImage(reg, 'nomad/pause', '3.3', await busyboxImage({ config: { Cmd: ['sleep', '2147483647'] } }));
  await pushImage(reg, 'nomad/busybox', '1.36', await busyboxImage());
  const archive = await loadArchive(LOADED);
  loadedConfigDigest = archive.configDigest;
  // The alloc dir as the Nomad client lays it out for a group with one task, web.
  allocDir = mkdtempSync(path.join(os.tmpdir(), 'nomad-alloc-'));
  for (const d of ['alloc/logs', 'web/local', 'web/secrets']) mkdirSync(path.join(allocDir, d), { recursive: true });
  writeFileSync(path.join(allocDir, 'web/hosts'), HOSTS);
  replay = new Replay(
    ctx.daemon.socket,
    {
      allocId,
      allocDir,
      pauseImage: `${reg.host}/nomad/pause:3.3`,
      pauseImageName: `${reg.host}/nomad/pause`,
      pauseImageTag: '3.3',
      taskImage: `${reg.host}/nomad/busybox:1.36`,
      taskImageName: `${reg.host}/nomad/busybox`,
      taskImageTag: '1.36',
      loadImage: LOADED,
    },
    { loadArchive: archive.tar },
  );
}, 60_000);
afterAll(() => {
  if (cniAdded) {
    try {
      cni('DEL');
    } catch {
      // A test failed before the network's teardown; the bridge goes below all the same.
    }
  }
  spawnSync('ip', ['link', 'del', CNI_BRIDGE]);
  if (allocDir) rmSync(allocDir, { recursive: true, force: true });
});

// Nomad's bridge networking runs Debian's CNI plugins (the bridge and host-local ones, as Nomad's
// default config has them) on the namespace at the pause container's SandboxKey
// (client/allocrunner/networking_cni.go Setup). A bridge and a subnet of this file's own.
const CNI_BIN = '/usr/lib/cni';
const CNI_BRIDGE = `nmdcni${randomBytes(2).toString('hex')}`;
const CNI_NET = `10.228.${randomBytes(1)[0]}`;
let cniAdded = false;
function cni(command: 'ADD' | 'DEL') {
  const conf = {
    cniVersion: '0.4.0',
    name: 'nomad',
    type: 'bridge',
    bridge: CNI_BRIDGE,
    isGateway: true,
    ipMasq: false,
    ipam: {
      type: 'host-local',
      ranges: [[{ subnet: `${CNI_NET}.0/24` }]],
      routes: [{ dst: '0.0.0.0/0' }],
      dataDir: path.join(allocDir, 'cni-ipam'),
    },
  };
  const r = spawnSync(path.join(CNI_BIN, 'bridge'), {
    input: JSON.stringify(conf),
    env: {
      CNI_COMMAND: command,
      CNI_CONTAINERID: replay.vars.pauseId!,
      CNI_NETNS: replay.vars.sandboxKey!,
      CNI_IFNAME: 'eth0',
      CNI_PATH: CNI_BIN,
      PATH: process.env.PATH,
    },
  });
  if (r.status !== 0) throw new Error(`CNI ${command}: ${r.stdout} ${r.stderr}`);
  return r.stdout.length ? JSON.parse(r.stdout.toString()) : undefined;
}

/** The inode of the namespace at `p` (a /proc ns link or a bind-mounted ns file). */
const nsInode = (p: string) => statSync(p).ino;
const inspect = async (id: string) => (await ctx.daemon.request('GET', `/containers/${id}/json`)).json;
/**
 * The task's shell has set its traps once it prints "started": a signal sent before is lost
 * (the shell is the container's PID 1, which ignores a signal it has no handler for).
 */
const untilStarted = (id: string) =>
  waitFor(
    async () => (await ctx.daemon.request('GET', `/containers/${id}/logs?stdout=1`)).body.includes('started'),
    'the task to set its traps',
  );

describe('Nomad docker driver, replayed', () => {
  it('fingerprint: negotiates an API version moby/client v0.5.0 accepts and finds runc among the runtimes', async () => {
    const s = seq('fingerprint');
    const ping = await replay.step(s.steps[0]!);
    // WithAPIVersionNegotiation takes the daemon's version when lower than the client's 1.55,
    // and refuses a daemon below its minimum, 1.40.
    const api = String(ping.headers['api-version']);
    expect(Number(api.split('.')[1])).toBeGreaterThanOrEqual(40);
    replay.vars.api = api;
    await replay.run(s, { from: 'version' });
    const info = replay.answer('info').json;
    expect(Object.keys(info.Runtimes)).toContain('runc');
    expect(info.OSType).toBe('linux');
    expect(['cgroupfs', 'systemd']).toContain(info.CgroupDriver);
    // No network named bridge with --bridge none: no bridge_ip attribute, which Nomad allows.
    expect(replay.answer('networks').json.map((n: { Name: string }) => n.Name)).not.toContain('bridge');
  });

  it('images: pulls a missing image, and finds a loaded archive by its name after load quiet=1', async () => {
    await replay.run(seq('images'));
    expect(replay.answer('task-image-inspect').json.RepoTags).toContain(replay.vars.taskImage);
    const loaded = replay
      .answer('load')
      .text.trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    // quiet: no progress lines, only the result.
    expect(loaded).toEqual([{ stream: `Loaded image: ${LOADED}\n` }]);
    const image = replay.answer('load-inspect').json;
    expect(image.Id).toBe(loadedConfigDigest);
    expect(image.Config.User).toBe('app');
  });

  it('network: the pause container runs with no network and its SandboxKey is its own network namespace', async () => {
    await replay.run(seq('network'));
    // containerByName finds the container it made by the name in the list of all containers.
    const listed = replay
      .answer('pause-by-name')
      .json.find((c: { Names: string[] }) => c.Names.includes(`/nomad_init_${allocId}`));
    expect(listed?.Id).toBe(replay.vars.pauseId);
    const pause = replay.answer('pause-inspect').json;
    expect(pause.State.Running).toBe(true);
    expect(Object.keys(pause.NetworkSettings.Networks)).toEqual(['none']);
    expect(pause.HostConfig.RestartPolicy).toEqual({ Name: 'unless-stopped', MaximumRetryCount: 0 });
    // CNI is handed this path: it must be a network namespace, the pause's, not the host's.
    const key = replay.vars.sandboxKey!;
    expect(nsInode(key)).toBe(nsInode(`/proc/${pause.State.Pid}/ns/net`));
    expect(nsInode(key)).not.toBe(nsInode('/proc/self/ns/net'));
    expect(readlinkSync(`/proc/${pause.State.Pid}/ns/net`)).toMatch(/^net:\[\d+\]$/);
  });

  it.skipIf(!existsSync(`${CNI_BIN}/bridge`))(
    'network: the CNI bridge plugin configures the namespace at SandboxKey',
    () => {
      const result = cni('ADD');
      cniAdded = true;
      expect(result.ips[0].address).toBe(`${CNI_NET}.2/24`);
    },
  );

  it('a second task with cgroupns host shares the cgroup namespace of the daemon; Runtime runc is taken', async () => {
    await replay.run(seq('cgroupns'));
    const sidecar = replay.answer('host-cgroupns-inspect').json;
    expect(sidecar.HostConfig.CgroupnsMode).toBe('host');
    expect(sidecar.HostConfig.Runtime).toBe('runc');
    expect(nsInode(`/proc/${sidecar.State.Pid}/ns/cgroup`)).toBe(nsInode(`/proc/${ctx.daemon.proc.pid}/ns/cgroup`));
  });

  it('reconcilers: the label filter finds the group containers only, the dangling list has what isNomadContainer reads', async () => {
    // A container Nomad did not make: no alloc label.
    const other = await ctx.daemon.request('POST', '/containers/create?name=not-nomad', {
      body: { Image: replay.vars.taskImage, Cmd: ['sleep', '300'] },
    });
    expect(other.status).toBe(201);
    expect((await ctx.daemon.request('POST', `/containers/${other.json.Id}/start`)).status).toBe(204);
    replay.vars.danglingId = replay.vars.sidecarId!;
    const s = seq('reconcile');
    await replay.run(s, { to: 'pause-list' });
    const names = (id: string) =>
      replay
        .answer(id)
        .json.flatMap((c: { Names: string[] }) => c.Names)
        .sort();
    expect(names('pause-list')).toEqual([`/nomad_init_${allocId}`, `/sidecar-${allocId}`]);
    expect(names('dangling-list')).toContain('/not-nomad');
    const sidecar = replay.answer('dangling-list').json.find((c: { Id: string }) => c.Id === replay.vars.sidecarId);
    expect(sidecar.Labels['com.hashicorp.nomad.alloc_id']).toBe(allocId);
    expect(sidecar.Mounts.map((m: { Destination: string }) => m.Destination)).toEqual(
      expect.arrayContaining(['/alloc', '/local', '/secrets']),
    );
    expect(sidecar.Created).toBeLessThanOrEqual(Date.now() / 1000);
    await replay.run(s, { from: 'dangling-remove' });
    expect((await ctx.daemon.request('GET', `/containers/${replay.vars.sidecarId}/json`)).status).toBe(404);
    await ctx.daemon.request('DELETE', `/containers/${other.json.Id}?force=1`);
  });

  describe('a task in the group network', () => {
    const s = () => seq('task');

    it('creates and starts with the HostConfig Nomad builds, kept as given', async () => {
      await replay.run(s(), { to: 'task-inspect' });
      const task = replay.answer('task-inspect').json;
      expect(task.State.Running).toBe(true);
      expect(task.HostConfig).toMatchObject({
        NetworkMode: `container:${replay.vars.pauseId}`,
        CgroupnsMode: 'private',
        Runtime: 'runc',
        CapDrop: ['CAP_NET_RAW'],
        Memory: 268435456,
        MemorySwap: 268435456,
        LogConfig: { Type: 'json-file', Config: { 'max-file': '2', 'max-size': '2m' } },
      });
      expect(task.HostConfig.SecurityOpt[0]).toMatch(/^seccomp=\{"defaultAction":"SCMP_ACT_ALLOW"/);
      expect(task.Config.Labels['com.hashicorp.nomad.task_name']).toBe('web');
    });

    it('holds the wait (condition not-running) open while the task runs', async () => {
      await replay.run(s(), { from: 'task-wait', to: 'task-logs' });
      await new Promise((r) => setTimeout(r, 500));
      expect(replay.pending('task-wait').settled).toBe(false);
      expect(replay.pending('task-logs').settled).toBe(false);
    });

    it('stats: one sample with the previous one, and the fields stats_posix.go reads', async () => {
      await replay.run(s(), { from: 'task-stats', to: 'task-stats' });
      const st = replay.answer('task-stats').json;
      // Two samples about a second apart, so Nomad's CPU percent has a delta.
      const apart = Date.parse(st.read) - Date.parse(st.preread);
      expect(apart).toBeGreaterThan(500);
      expect(st.precpu_stats.system_cpu_usage).toBeLessThan(st.cpu_stats.system_cpu_usage);
      expect(st.cpu_stats.cpu_usage.total_usage).toBeGreaterThan(0);
      expect(st.cpu_stats.cpu_usage.total_usage).toBeGreaterThanOrEqual(st.precpu_stats.cpu_usage.total_usage);
      expect(st.memory_stats.usage).toBeGreaterThan(0);
      // Nomad takes rss and cache (cgroup v1), or anon and file (v2); max_usage only on v1.
      const v2 = st.memory_stats.max_usage === undefined;
      for (const k of v2 ? ['anon', 'file'] : ['rss', 'cache']) expect(typeof st.memory_stats.stats[k]).toBe('number');
      if (!v2) expect(st.memory_stats.max_usage).toBeGreaterThanOrEqual(st.memory_stats.usage);
      expect(st.memory_stats.limit).toBe(268435456);
      expect(st.cpu_stats.throttling_data).toEqual({
        periods: expect.any(Number),
        throttled_periods: expect.any(Number),
        throttled_time: expect.any(Number),
      });
      expect(replay.pending('task-wait').settled).toBe(false);
    });

    it('exec: the inline seccomp profile, the pause network namespace, a private cgroup namespace, no NET_RAW, the /etc/hosts mount', async () => {
      await replay.run(s(), { from: 'exec-create', to: 'exec-inspect' });
      const frames = demux(replay.answer('exec-start').body);
      const out = frames
        .filter(([f]) => f === 1)
        .map(([, t]) => t)
        .join('');
      const err = frames
        .filter(([f]) => f === 2)
        .map(([, t]) => t)
        .join('');
      // The profile denies mkdir with EPERM: without it, root makes /tmp/denied.
      expect(out).toContain('mkdir=1\n');
      expect(err).toMatch(/can't create directory '\/tmp\/denied': Operation not permitted/);
      const field = (name: string) => Number(new RegExp(`^${name}=(\\d+)$`, 'm').exec(out)?.[1]);
      expect(field('net')).toBe(nsInode(replay.vars.sandboxKey!));
      expect(field('cgroup')).not.toBe(nsInode(`/proc/${ctx.daemon.proc.pid}/ns/cgroup`));
      const capEff = BigInt(`0x${/^CapEff:\s+([0-9a-f]+)$/m.exec(out)![1]}`);
      expect(capEff & (1n << 13n)).toBe(0n); // CAP_NET_RAW
      expect(capEff & (1n << 0n)).toBe(1n); // CAP_CHOWN, a default Nomad keeps
      expect(out).toContain(HOSTS);
      expect(replay.answer('exec-inspect').json).toMatchObject({ ExitCode: 2, Running: false });
    });

    it('exec -t: running as soon as it is attached, resized, the shell reading stdin; its exit code at the end', async () => {
      await replay.run(s(), { from: 'exec-tty-create', to: 'exec-tty-inspect' });
      // Nomad ends the session at the first Running false it sees, from right after the attach.
      expect(replay.answer('exec-tty-inspect-running').json.Running).toBe(true);
      // A terminal's raw bytes, no frames: the shell's prompt.
      expect(replay.answer('exec-tty-output').text).toContain('/ # ');
      const done = await waitFor(async () => {
        const j = (await ctx.daemon.request('GET', `/exec/${replay.vars.ttyExecId}/json`)).json;
        return j.Running ? undefined : j;
      }, 'the exec to end');
      // The command sent on stdin exits with the terminal's width, as the resize set it.
      expect(done.ExitCode).toBe(100);
    });

    it.skipIf(!existsSync(`${CNI_BIN}/bridge`))(
      'the task is reachable at the address CNI gave the pause namespace',
      async () => {
        // busybox httpd in the task (it forks into the background), serving the alloc dir.
        writeFileSync(path.join(allocDir, 'alloc/index.html'), 'from the task\n');
        const e = await ctx.daemon.request('POST', `/containers/${replay.vars.taskId}/exec`, {
          body: { Cmd: ['httpd', '-p', '8080', '-h', '/alloc'] },
        });
        expect((await ctx.daemon.request('POST', `/exec/${e.json.Id}/start`, { body: { Detach: false } })).status).toBe(
          200,
        );
        expect(await httpGetWhenUp(`${CNI_NET}.2`, 8080, 'the task over the CNI bridge')).toBe('from the task\n');
      },
    );

    it('signal, then stop: the held wait answers the exit status and the followed logs end', async () => {
      await untilStarted(replay.vars.taskId!);
      await replay.run(s(), { from: 'signal', to: 'stop' });
      await replay.run(s(), { from: 'task-wait-answer', to: 'task-logs-end' });
      expect(replay.answer('task-wait-answer').json).toEqual({ StatusCode: 3, Error: null });
      const logs = demux(replay.answer('task-logs-end').body)
        .map(([, t]) => t)
        .join('');
      expect(logs).toBe('started\ngot USR1\nbye\n');
    });

    it('after the exit: inspect, stop 304, kill 409, then removal of the task and of the pause container', async () => {
      await replay.run(s(), { from: 'exited-inspect', to: 'destroy-remove' });
      // The network hook's Postrun: CNI DEL on the namespace, then the driver's DestroyNetwork.
      if (cniAdded) {
        cni('DEL');
        cniAdded = false;
      }
      await replay.run(s(), { from: 'destroy-network-stop' });
      expect(replay.answer('exited-inspect').json.State).toMatchObject({
        OOMKilled: false,
        Running: false,
        ExitCode: 3,
      });
      expect(replay.answer('exited-kill').json.message).toMatch(/is not running/);
      expect((await inspect(replay.vars.taskId!))?.message).toMatch(/No such container/);
      expect((await inspect(replay.vars.pauseId!))?.message).toMatch(/No such container/);
    });
  });
});

// Nomad 1.8 and before drive the same flow through fsouza/go-dockerclient: unversioned paths,
// Content-Type plain/text on POSTs without a body, a numeric kill signal, a wait without a
// condition, stats as a held stream, old-style filters, and removal with v=1.
describe('Nomad 1.8 docker driver (fsouza/go-dockerclient), replayed', () => {
  const legacyAlloc = randomUUID();
  const LEGACY_LOADED = 'nomad-load/legacy:1.8';
  let legacy: Replay;

  beforeAll(async () => {
    const reg = ctx.env.registry;
    await pushImage(reg, 'nomad/busybox', '1.8', await busyboxImage());
    const archive = await loadArchive(LEGACY_LOADED);
    legacy = new Replay(
      ctx.daemon.socket,
      {
        allocId: legacyAlloc,
        allocDir,
        pauseImage: `${reg.host}/nomad/pause:3.3`,
        taskImage: `${reg.host}/nomad/busybox:1.8`,
        taskImageName: `${reg.host}/nomad/busybox`,
        taskImageTag: '1.8',
        loadImage: LEGACY_LOADED,
      },
      { loadArchive: archive.tar },
    );
  });

  it('runs the whole task lifecycle on unversioned paths', async () => {
    const s = seq('legacy-fsouza');
    await legacy.run(s, { to: 'task-start' });
    // Nomad passes the task's start time, in seconds.
    legacy.vars.since = String(Math.floor(Date.now() / 1000) - 1);
    await legacy.run(s, { from: 'task-wait', to: 'task-stats-records' });
    expect(legacy.pending('task-wait').settled).toBe(false);
    await untilStarted(legacy.vars.taskId!);
    await legacy.run(s, { from: 'signal' });

    const loaded = legacy
      .answer('load')
      .text.trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(loaded.at(-1)).toEqual({ stream: `Loaded image: ${LEGACY_LOADED}\n` });
    expect(legacy.answer('load-inspect').json.Config.User).toBe('app');
    expect(
      demux(legacy.answer('exec-start').body)
        .map(([, t]) => t)
        .join(''),
    ).toContain('mkdir=1\n');
    expect(legacy.answer('exec-inspect').json.ExitCode).toBe(2);
    // signal=10 is SIGUSR1: the task's trap saw it.
    const logs = demux(legacy.answer('task-logs-end').body)
      .map(([, t]) => t)
      .join('');
    expect(logs).toBe('started\ngot USR1\nbye\n');
    expect(legacy.answer('task-wait-answer').json).toEqual({ StatusCode: 3, Error: null });
    // The old filter encoding finds the running pause container (the task has exited).
    expect(legacy.answer('pause-list').json.flatMap((c: { Names: string[] }) => c.Names)).toEqual([
      `/nomad_init_${legacyAlloc}`,
    ]);
    expect((await inspect(legacy.vars.taskId!))?.message).toMatch(/No such container/);
    expect((await inspect(legacy.vars.pauseId!))?.message).toMatch(/No such container/);
  });

  it('streams stats while the task runs: each record carries the one before as precpu_stats', () => {
    const records = legacy.answer('task-stats-records').json;
    expect(records).toHaveLength(3);
    for (let i = 1; i < records.length; i++) {
      const [before, r] = [records[i - 1], records[i]];
      expect(r.preread).toBe(before.read);
      expect(r.precpu_stats.cpu_usage.total_usage).toBe(before.cpu_stats.cpu_usage.total_usage);
      expect(r.precpu_stats.system_cpu_usage).toBe(before.cpu_stats.system_cpu_usage);
      expect(Date.parse(r.read) - Date.parse(before.read)).toBeGreaterThan(500);
      expect(typeof r.memory_stats.usage).toBe('number');
      expect(typeof r.cpu_stats.throttling_data.throttled_periods).toBe('number');
    }
  });
});
