// cri-dockerd v0.3.7 (kubelet's runtime for Docker-API engines) driving berthd,
// without cri-dockerd: the Engine-API requests it made against dockerd 20.10
// for each CRI call (fixtures/cri-dockerd/sequence.json, recorded through
// fixtures/cri-dockerd/record.mjs) are replayed against berthd, and between
// them the test does what cri-dockerd does outside the API: Debian's CNI
// plugins into the sandbox's network namespace, the rewritten resolv.conf,
// kubelet's log path linked to LogPath. Asserted is what kubelet would see:
// the answers cri-dockerd decodes (dockerd's statuses, fields and JSON types),
// the pod's IP, its containers sharing the sandbox's network, hostname and
// resolv.conf, json-file logs, exec exit codes, stats, cgroups under the
// CgroupParent, and a clean removal.
import { execFileSync, spawnSync } from 'node:child_process';
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  rmdirSync,
  rmSync,
  symlinkSync,
  unlinkSync,
  writeFileSync,
} from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type CniNetwork, PodNetwork, portmapChains, removePortmapChains } from '../harness/cni.js';
import { at, describeStep, mismatches, Replayer, type Step } from '../harness/cri-replay.js';
import { type Daemon, startDaemon, waitFor } from '../harness/daemon.js';
import { busyboxImage, pauseImage, pushImage } from '../harness/images.js';
import { allowing, expectNoLeaks, type Holdings, holdings, registryPool } from '../harness/leaks.js';
import { type Registry, startRegistry } from '../harness/registry.js';
import { demuxText } from '../harness/streams.js';

// The recording's pod (fixtures/cri-dockerd/cri/*.json) and network (record.sh).
const POD_UID = '6f1c2d3e-4b5a-4c7d-8e9f-0a1b2c3d4e5f';
const HOSTNET_UID = '7a2b3c4d-5e6f-4a8b-9c0d-1e2f3a4b5c6d';
const CGROUP_PARENT = `/kubepods/burstable/pod${POD_UID}`;
const HOSTNET_PARENT = `/kubepods/besteffort/pod${HOSTNET_UID}`;
const POD_LOGS = `replay_web_${POD_UID}`;
const HOSTNET_LOGS = `replay_node-agent_${HOSTNET_UID}`;
const RESOLV =
  'nameserver 10.96.0.10\nsearch replay.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5\n';
const GREETING = 'hello from a config map\n';

let registry: Registry;
let d: Daemon;
let dir: string;
let replay: Replayer;
let net: CniNetwork;
// portmap's shared chains that were there before (it never removes the ones it makes).
const chainsBefore = portmapChains();
let pod: PodNetwork | undefined;
let before: Holdings;

beforeAll(async () => {
  registry = await startRegistry();
  await pushImage(registry, 'cri-replay/pause', '3.9', await pauseImage());
  await pushImage(registry, 'cri-replay/busybox', 'latest', await busyboxImage());
  d = await startDaemon(); // --bridge none, as the dockerd of the recording ran: CNI makes the pod's network
  dir = mkdtempSync(path.join(os.tmpdir(), 'cri-replay-'));
  // What kubelet makes before it asks: the pod's log directories, the files it mounts.
  for (const c of ['app', 'sidecar']) mkdirSync(path.join(dir, 'logs', POD_LOGS, c), { recursive: true });
  mkdirSync(path.join(dir, 'logs', HOSTNET_LOGS, 'agent'), { recursive: true });
  mkdirSync(path.join(dir, 'host/config'), { recursive: true });
  writeFileSync(path.join(dir, 'host/config/greeting'), GREETING);
  writeFileSync(path.join(dir, 'host/etc-hosts'), '127.0.0.1 localhost\n10.87.0.2 web\n');
  writeFileSync(path.join(dir, 'host/termination-log'), '');
  writeFileSync(path.join(dir, 'host/termination-log-2'), '');
  net = { name: 'replay', bridge: 'rpcni0', subnet: '10.87.0.0/24', dataDir: path.join(dir, 'ipam') };
  replay = new Replayer(d, {
    dir,
    logs: path.join(dir, 'logs'),
    host: path.join(dir, 'host'),
    registry: registry.host,
    nodeHostname: os.hostname(),
  });
}, 120_000);

afterAll(async () => {
  // After a failure: the pod's network and containers go the way a node would take them down.
  try {
    pod?.del();
  } catch {
    // the namespace is already gone
  }
  if (d) {
    const all = await d.request('GET', '/containers/json?all=1');
    for (const c of (all.json as { Id: string }[] | undefined) ?? [])
      await d.request('DELETE', `/containers/${c.Id}?force=1`);
    await d.cleanup();
  }
  spawnSync('ip', ['link', 'del', 'rpcni0']);
  removePortmapChains(chainsBefore);
  removeCgroupDirs([CGROUP_PARENT, HOSTNET_PARENT]);
  await registry?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** Replays one recorded call and expects every answer to be what cri-dockerd read from dockerd's. */
async function expectReplay(call: string, between?: Parameters<Replayer['call']>[1]): Promise<Step[]> {
  const steps = await replay.call(call, between);
  const wrong = steps.flatMap((s) => mismatches(replay, s));
  expect(wrong, `${call}:\n${steps.map(describeStep).join('\n')}`).toEqual([]);
  return steps;
}

const answerOf = (steps: Step[], i: number) => steps[i]!.answer.json as Record<string, any>;

const cgroupV2 = existsSync('/sys/fs/cgroup/cgroup.controllers');

/** A file of a container's cgroup (v1: under the controller's hierarchy; v2: the unified one). */
function cgroupFile(controller: string, cgroupsPath: string, v1: string, v2: string): string {
  return cgroupV2
    ? path.join('/sys/fs/cgroup', cgroupsPath, v2)
    : path.join('/sys/fs/cgroup', controller, cgroupsPath, v1);
}

const readCgroup = (controller: string, cgroupsPath: string, v1: string, v2: string) =>
  readFileSync(cgroupFile(controller, cgroupsPath, v1, v2), 'utf8').trim();

/** The pod cgroups the runtime made under each hierarchy (kubelet's own, on a node), deepest first. */
function removeCgroupDirs(parents: string[]): void {
  const roots = cgroupV2 ? ['/sys/fs/cgroup'] : readdirSync('/sys/fs/cgroup').map((c) => `/sys/fs/cgroup/${c}`);
  for (const root of roots) {
    for (const parent of parents) {
      const parts = parent.split('/').filter(Boolean);
      for (let n = parts.length; n > 0; n--) {
        try {
          rmdirSync(path.join(root, ...parts.slice(0, n)));
        } catch {
          // not there, or still holding another pod's cgroups
        }
      }
    }
  }
}

/** A GET over TCP from the host (the pod's IP on the CNI bridge). */
function httpGet(url: string): Promise<string> {
  return new Promise((resolve, reject) => {
    http
      .get(url, { timeout: 3000 }, (res) => {
        let body = '';
        res.on('data', (c: Buffer) => (body += c.toString()));
        res.on('end', () => resolve(body));
      })
      .on('error', reject);
  });
}

/** A command in a running container, outside the replay (what a user's `kubectl exec` would show). */
async function execIn(id: string, cmd: string[]): Promise<{ out: string; code: number }> {
  const e = await d.request('POST', `/containers/${id}/exec`, {
    body: { Cmd: cmd, AttachStdout: true, AttachStderr: true },
  });
  expect(e.status, e.text).toBe(201);
  const s = await d.request('POST', `/exec/${e.json.Id}/start`, { body: { Detach: false, Tty: false } });
  const i = await d.request('GET', `/exec/${e.json.Id}/json`);
  return { out: demuxText(s.body), code: i.json.ExitCode };
}

const netnsOf = (pid: number) => readlinkSync(`/proc/${pid}/ns/net`);

const ipTablesLines = (needle: string) =>
  execFileSync('iptables-save', ['-t', 'nat'], { encoding: 'utf8' })
    .split('\n')
    .filter((l) => l.includes(needle));

/** kubelet's symlink from its log path (the container's logpath label) to the engine's LogPath, as cri-dockerd makes it. */
function linkLogPath(inspect: Record<string, any>): string {
  const link = inspect.Config.Labels['io.kubernetes.container.logpath'] as string;
  expect(typeof inspect.LogPath === 'string' && inspect.LogPath !== '', `LogPath ${inspect.LogPath}`).toBe(true);
  rmSync(link, { force: true });
  symlinkSync(inspect.LogPath, link);
  return link;
}

/** The lines of a log file, as kubelet reads them (straight from the file). */
const logLines = (file: string) => readFileSync(file, 'utf8').split('\n').filter(Boolean);

/** Each line parsed as Docker's json-file entry ({"log","stream","time"}), failing with the line that is not one. */
function jsonFileEntries(lines: string[]): { log: string; stream: string; time: string }[] {
  return lines.map((l) => {
    let entry: unknown;
    try {
      entry = JSON.parse(l);
    } catch {
      entry = undefined;
    }
    expect(entry, `a json-file line, not ${JSON.stringify(l)}`).toBeTypeOf('object');
    return entry as { log: string; stream: string; time: string };
  });
}

describe('cri-dockerd v0.3.7 replayed against berthd: a pod on a CNI bridge', () => {
  it('Startup: /_ping, /version and /info as cri-dockerd reads them (cgroupfs, json-file)', async () => {
    const steps = await expectReplay('Startup');
    const info = answerOf(steps, 2);
    expect(info.CgroupDriver).toBe('cgroupfs');
    expect(info.LoggingDriver).toBe('json-file');
    expect(info.CgroupVersion).toBe(cgroupV2 ? '2' : '1');
  });

  it('PullImage and ImageStatus: pull with X-Registry-Auth, image list, inspect and history', async () => {
    await expectReplay('PullImage');
    await expectReplay('ImageStatus');
    expect(replay.get('busyboxImage')).toMatch(/^[0-9a-f]{64}$/);
    before = allowing(holdings(d), registryPool(registry.host));
  });

  it('RunPodSandbox: the pause container starts in its CgroupParent; CNI gives it the pod IP; resolv.conf is the pod DNS', async () => {
    const steps = await expectReplay('RunPodSandbox', {
      // cri-dockerd, after the start's inspect: rewrites ResolvConfPath, then runs CNI into the sandbox's netns.
      3: (s) => {
        const inspect = s[3]!.answer.json as Record<string, any>;
        writeFileSync(inspect.ResolvConfPath, RESOLV);
        expect(inspect.NetworkSettings.SandboxKey, 'SandboxKey').toMatch(/./);
        pod = new PodNetwork(net, replay.get('sandbox'), `/proc/${inspect.State.Pid}/ns/net`, [
          { hostPort: 18087, containerPort: 8080, protocol: 'tcp', hostIP: '127.0.0.1' },
        ]);
        pod.add();
      },
    });
    const inspect = answerOf(steps, 3);
    expect(inspect.State.Status).toBe('running');
    expect(pod!.ip).toMatch(/^10\.87\.0\.\d+$/);
    // The address is in the sandbox's namespace and answers from the host across the bridge.
    const addrs = execFileSync('nsenter', [`--net=/proc/${inspect.State.Pid}/ns/net`, 'ip', '-4', '-o', 'addr'], {
      encoding: 'utf8',
    });
    expect(addrs).toContain(`${pod!.ip}/24`);
    expect(readFileSync(inspect.ResolvConfPath, 'utf8')).toBe(RESOLV);
    expect(existsSync(cgroupFile('memory', `${CGROUP_PARENT}/${replay.get('sandbox')}`, 'tasks', 'cgroup.procs'))).toBe(
      true,
    );
    await expectReplay('PodSandboxStatus');
  });

  it('CreateContainer: the app (bind mounts, user, resources, masked and read-only paths) and its sidecar join the sandbox', async () => {
    await expectReplay('CreateContainer.app');
    await expectReplay('CreateContainer.sidecar');
  });

  it('StartContainer: both start; kubelet’s log path links to LogPath', async () => {
    for (const c of ['app', 'sidecar']) {
      const steps = await expectReplay(`StartContainer.${c}`, {
        1: (s) => void linkLogPath(s[1]!.answer.json as Record<string, any>),
      });
      expect(answerOf(steps, 1).State.Status).toBe('running');
    }
    await expectReplay('ListContainers');
  });

  it('the pod’s containers share the sandbox’s network namespace, and localhost between them', async () => {
    const pids = await Promise.all(
      ['sandbox', 'app', 'sidecar'].map(
        async (c) => (await d.request('GET', `/containers/${replay.get(c)}/json`)).json.State.Pid,
      ),
    );
    expect(new Set(pids.map(netnsOf)).size).toBe(1);
    // The sidecar waits for the app on 127.0.0.1:8080, then says so; the host reaches the app on the pod IP.
    await waitFor(
      async () => (await execIn(replay.get('sidecar'), ['cat', '/proc/1/cmdline'])).out.includes('sleep'),
      'the sidecar to reach the app over localhost',
      15_000,
      200,
    );
    expect(await httpGet(`http://${pod!.ip}:8080/`)).toBe(GREETING);
  });

  it('the app runs as the user kubelet asked, its config mount read-only, kubelet’s masked and read-only paths applied', async () => {
    const app = replay.get('app');
    expect((await execIn(app, ['id', '-u'])).out).toBe('1000\n');
    expect((await execIn(app, ['id', '-g'])).out).toBe('1000\n');
    expect((await execIn(app, ['cat', '/config/greeting'])).out).toBe(GREETING);
    // Mount options from the container's own mountinfo: "<id> <parent> <dev> <root> <mount point> <options> …".
    const mounts = new Map(
      (await execIn(app, ['cat', '/proc/self/mountinfo'])).out
        .split('\n')
        .filter(Boolean)
        .map((l) => l.split(' '))
        .map((f) => [f[4]!, f[5]!]),
    );
    expect(mounts.get('/config')?.split(',')).toContain('ro');
    expect(mounts.get('/proc/sys')?.split(',')).toContain('ro'); // a readonly path
    // kubelet's masked paths that this kernel has (runc leaves out the others) are mounted over.
    const masked = ['/proc/keys', '/proc/timer_list', '/proc/kcore', '/sys/firmware'].filter((p) => existsSync(p));
    expect(masked.length).toBeGreaterThan(0);
    for (const p of masked) expect(mounts.has(p), `${p} masked`).toBe(true);
  });

  it('the pod’s containers see the resolv.conf cri-dockerd wrote at the sandbox’s ResolvConfPath', async () => {
    for (const c of ['app', 'sidecar']) {
      expect((await execIn(replay.get(c), ['cat', '/etc/resolv.conf'])).out, `${c}'s resolv.conf`).toBe(RESOLV);
    }
  });

  it('the pod’s containers have the sandbox’s hostname', async () => {
    for (const c of ['app', 'sidecar']) {
      expect((await execIn(replay.get(c), ['hostname'])).out, `${c}'s hostname`).toBe('web\n');
      expect((await execIn(replay.get(c), ['cat', '/etc/hostname'])).out, `${c}'s /etc/hostname`).toBe('web\n');
    }
  });

  it('logs: kubelet reads json-file lines ({log, stream, time}) through its link to LogPath', async () => {
    const link = path.join(dir, 'logs', POD_LOGS, 'app/0.log');
    const lines = jsonFileEntries(
      await waitFor(() => logLines(link).length >= 2 && logLines(link), 'the app to log two lines'),
    );
    expect(lines).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ log: 'serving hello pod\n', stream: 'stdout' }),
        expect.objectContaining({ log: 'to-stderr\n', stream: 'stderr' }),
      ]),
    );
    for (const l of lines) {
      expect(Object.keys(l).sort()).toEqual(['log', 'stream', 'time']);
      expect(l.time).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z$/);
    }
    const sidecar = jsonFileEntries(logLines(path.join(dir, 'logs', POD_LOGS, 'sidecar/0.log')));
    expect(sidecar.map((l) => l.log)).toContain('sidecar up\n');
  });

  it('ExecSync: the output frames and exit codes 0 and 3, as kubelet’s probes read them', async () => {
    for (const [call, code] of [
      ['ExecSync.ok', 0],
      ['ExecSync.fail', 3],
    ] as const) {
      const steps = await expectReplay(call);
      expect(steps[2]!.answer.frames, call).toEqual(steps[2]!.recorded.response.frames);
      expect(answerOf(steps, 3).ExitCode, call).toBe(code);
    }
  });

  it('ContainerStatus: inspect and the image, as cri-dockerd maps them', async () => {
    const steps = await expectReplay('ContainerStatus');
    const inspect = answerOf(steps, 0);
    expect(inspect.Config.Labels['io.kubernetes.sandbox.id']).toBe(replay.get('sandbox'));
    expect(inspect.Mounts.map((m: { Destination: string }) => m.Destination).sort()).toEqual([
      '/config',
      '/dev/termination-log',
      '/etc/hosts',
    ]);
  });

  it('ListContainerStats and ContainerStats: one-shot stats decode as uint64s, with usage', async () => {
    for (const call of ['ListContainerStats', 'ContainerStats']) {
      const steps = await expectReplay(call);
      for (const s of steps.filter((x) => x.sent.path.includes('/stats'))) {
        expect(at(s.answer.json, 'cpu_stats.cpu_usage.total_usage') as number, s.sent.path).toBeGreaterThan(0);
        expect(at(s.answer.json, 'memory_stats.usage') as number, s.sent.path).toBeGreaterThan(0);
      }
    }
  });

  it('UpdateContainerResources: the app’s cgroup under the CgroupParent takes the new CPU quota and memory limit', async () => {
    const cg = `${CGROUP_PARENT}/${replay.get('app')}`;
    expect(readCgroup('memory', cg, 'memory.limit_in_bytes', 'memory.max')).toBe('67108864');
    expect(readCgroup('cpu', cg, 'cpu.cfs_quota_us', 'cpu.max')).toMatch(/^50000\b/);
    await expectReplay('UpdateContainerResources');
    expect(readCgroup('memory', cg, 'memory.limit_in_bytes', 'memory.max')).toBe('100663296');
    expect(readCgroup('cpu', cg, 'cpu.cfs_quota_us', 'cpu.max')).toMatch(/^40000\b/);
  });

  it('StopContainer, then StopPodSandbox: CNI DEL takes the veth, the address and the iptables rules away before the stop', async () => {
    await expectReplay('StopContainer');
    const sandbox = replay.get('sandbox');
    expect(ipTablesLines(sandbox).length).toBeGreaterThan(0);
    const steps = await expectReplay('StopPodSandbox', {
      1: () => {
        pod!.del();
        pod = undefined;
      },
    });
    expect(steps.at(-1)!.answer.status).toBe(204);
    expect(ipTablesLines(sandbox)).toEqual([]);
    expect(execFileSync('ip', ['-o', 'link', 'show', 'master', 'rpcni0'], { encoding: 'utf8' })).toBe('');
    expect(readdirSync(path.join(net.dataDir, net.name)).filter((f) => f.startsWith('10.'))).toEqual([]);
  });

  it('RemovePodSandbox: every container goes, and nothing is left on the host', async () => {
    for (const c of ['app', 'sidecar']) unlinkSync(path.join(dir, 'logs', POD_LOGS, `${c}/0.log`));
    const cgroups = ['sandbox', 'app', 'sidecar'].map((c) => `${CGROUP_PARENT}/${replay.get(c)}`);
    await expectReplay('RemovePodSandbox');
    expect((await d.request('GET', '/containers/json?all=1')).json).toEqual([]);
    spawnSync('ip', ['link', 'del', 'rpcni0']); // the node's bridge, which CNI DEL leaves for the next pod
    expect(spawnSync('ip', ['link', 'show', 'rpcni0']).status).not.toBe(0);
    for (const cg of cgroups) expect(existsSync(cgroupFile('memory', cg, '', '')), cg).toBe(false);
    await expectNoLeaks(d, before);
  });
});

describe('cri-dockerd v0.3.7 replayed against berthd: a host-network pod', () => {
  it('RunPodSandbox and its container with UTSMode host: they run on the node’s network and hostname', async () => {
    const sandbox = await expectReplay('RunPodSandbox.hostnet');
    expect(
      existsSync(cgroupFile('memory', `${HOSTNET_PARENT}/${replay.get('hostnetSandbox')}`, 'tasks', 'cgroup.procs')),
    ).toBe(true);
    expect(netnsOf(answerOf(sandbox, 3).State.Pid)).toBe(netnsOf(process.pid));
    await expectReplay('CreateContainer.agent');
    await expectReplay('StartContainer.agent', {
      1: (s) => void linkLogPath(s[1]!.answer.json as Record<string, any>),
    });
    const exec = await expectReplay('ExecSync.agent');
    expect(exec[2]!.answer.frames).toEqual([{ stream: 'stdout', text: `${os.hostname()}\n` }]);
  });

  it('logs: the agent’s json-file line names the node, read through kubelet’s link', async () => {
    const log = path.join(dir, 'logs', HOSTNET_LOGS, 'agent/0.log');
    const lines = await waitFor(() => logLines(log).length >= 1 && logLines(log), 'the agent to log', 5000);
    expect(jsonFileEntries(lines)[0]).toMatchObject({ log: `agent on ${os.hostname()}\n`, stream: 'stdout' });
  });

  it('StopPodSandbox and RemovePodSandbox (no CNI for a host-network pod)', async () => {
    rmSync(path.join(dir, 'logs', HOSTNET_LOGS, 'agent/0.log'), { force: true });
    await expectReplay('StopPodSandbox.hostnet');
    await expectReplay('RemovePodSandbox.hostnet');
    expect((await d.request('GET', '/containers/json?all=1')).json).toEqual([]);
  });
});
