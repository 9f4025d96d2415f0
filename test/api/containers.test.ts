// Containers through the API with plain HTTP (as curl would): the mission's two
// sequences, errors with dockerd's statuses, and isolation that is real.
import { existsSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { waitFor, type Daemon } from '../harness/daemon.js';
import { useEnv, type Env } from '../harness/env.js';
import { demux } from '../harness/streams.js';

const ctx = useEnv();
let env: Env;
let d: Daemon;
beforeAll(() => {
  ({ env, daemon: d } = ctx);
});

async function create(body: Record<string, unknown>, name?: string): Promise<string> {
  const r = await d.request('POST', `/v1.40/containers/create${name ? `?name=${name}` : ''}`, {
    body: { Image: env.busybox, ...body },
  });
  expect(r.status, r.text).toBe(201);
  return r.json.Id;
}

async function run(cmd: string[], extra: Record<string, unknown> = {}): Promise<{ id: string; code: number }> {
  const id = await create({ Cmd: cmd, ...extra });
  const s = await d.request('POST', `/v1.40/containers/${id}/start`);
  expect(s.status, s.text).toBe(204);
  const w = await d.request('POST', `/v1.40/containers/${id}/wait`);
  return { id, code: w.json.StatusCode };
}

const stdoutOf = async (id: string) =>
  demux((await d.request('GET', `/v1.40/containers/${id}/logs?stdout=1&stderr=1`)).body)
    .map(([, t]) => t)
    .join('');

describe('the foreground sequence', () => {
  it('create → start → wait → logs', async () => {
    const c = await d.request('POST', '/v1.40/containers/create', {
      body: { Image: env.busybox, Cmd: ['echo', 'hello world'] },
      host: 'anything.example',
    });
    expect(c.status).toBe(201);
    expect(c.json).toEqual({ Id: expect.stringMatching(/^[0-9a-f]{64}$/), Warnings: [] });
    const id = c.json.Id;
    expect((await d.request('POST', `/v1.40/containers/${id}/start`)).status).toBe(204);
    const w = await d.request('POST', `/v1.40/containers/${id}/wait`);
    expect(w.status).toBe(200);
    expect(w.json).toEqual({ StatusCode: 0, Error: null });
    const logs = await d.request('GET', `/v1.40/containers/${id}/logs?stdout=1`);
    expect(logs.status).toBe(200);
    expect(demux(logs.body)).toEqual([[1, 'hello world\n']]);
  });

  it('reports exit codes, and stdout and stderr apart in order', async () => {
    // Two pipes carry stdout and stderr, so only output apart in time has a cross-stream order.
    const { id, code } = await run(['sh', '-c', 'echo out; sleep 0.05; echo err >&2; sleep 0.05; echo out2; exit 3']);
    expect(code).toBe(3);
    const frames = demux((await d.request('GET', `/containers/${id}/logs?stdout=1&stderr=1`)).body);
    expect(frames).toEqual([
      [1, 'out\n'],
      [2, 'err\n'],
      [1, 'out2\n'],
    ]);
    const onlyErr = demux((await d.request('GET', `/containers/${id}/logs?stderr=1`)).body);
    expect(onlyErr).toEqual([[2, 'err\n']]);
  });

  it('supports tail and timestamps', async () => {
    const { id } = await run(['sh', '-c', 'for i in 1 2 3 4 5; do echo line$i; done']);
    const tail = demux((await d.request('GET', `/containers/${id}/logs?stdout=1&tail=2`)).body);
    expect(tail.map(([, t]) => t)).toEqual(['line4\n', 'line5\n']);
    const ts = demux((await d.request('GET', `/containers/${id}/logs?stdout=1&timestamps=1&tail=1`)).body);
    expect(ts[0]![1]).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z line5\n$/);
  });

  it('reports a killed container as 128+signal, exited as soon as kill answers', async () => {
    const id = await create({ Cmd: ['sleep', '100'] });
    await d.request('POST', `/containers/${id}/start`);
    expect((await d.request('POST', `/containers/${id}/kill`)).status).toBe(204);
    // dockerd answers a SIGKILL once the container is down: an inspect right after sees it.
    const state = (await d.request('GET', `/containers/${id}/json`)).json.State;
    expect([state.Status, state.Running, state.ExitCode]).toEqual(['exited', false, 137]);
    expect((await d.request('POST', `/containers/${id}/wait`)).json.StatusCode).toBe(137);
  });

  it('kills with any signal: the process sees it (a trapped one here: PID 1 ignores the rest)', async () => {
    const id = await create({ Cmd: ['sh', '-c', 'trap "exit 42" USR1; while :; do sleep 0.1; done'] });
    await d.request('POST', `/containers/${id}/start`);
    await waitFor(
      async () => (await d.request('GET', `/containers/${id}/top`)).json.Processes?.length > 1,
      'the trap set',
    );
    const bad = await d.request('POST', `/containers/${id}/kill?signal=NOPE`);
    expect([bad.status, bad.json.message]).toEqual([400, 'Invalid signal: NOPE']);
    expect((await d.request('POST', `/containers/${id}/kill?signal=USR1`)).status).toBe(204);
    expect((await d.request('POST', `/containers/${id}/wait`)).json.StatusCode).toBe(42);
  });

  it("stops with a real-time StopSignal (systemd's SIGRTMIN+3) and kills with RTMIN+n", async () => {
    const trap = 'trap "exit 9" 37; trap "exit 11" 40; echo started; while :; do sleep 0.1; done';
    const stopped = await create({ Cmd: ['sh', '-c', trap], StopSignal: 'SIGRTMIN+3' });
    const killed = await create({ Cmd: ['sh', '-c', trap] });
    for (const id of [stopped, killed]) {
      await d.request('POST', `/containers/${id}/start`);
      await waitFor(async () => (await stdoutOf(id)).includes('started'), 'the traps set');
    }
    // SIGRTMIN+3 is 37 as glibc numbers them (and dockerd's signal map); RTMAX-58 is not a name.
    expect((await d.request('POST', `/containers/${stopped}/stop?t=30`)).status).toBe(204);
    expect((await d.request('GET', `/containers/${stopped}/json`)).json.State.ExitCode).toBe(9);
    const bad = await d.request('POST', `/containers/${killed}/kill?signal=RTMAX-58`);
    expect([bad.status, bad.json.message]).toEqual([400, 'Invalid signal: RTMAX-58']);
    expect((await d.request('POST', `/containers/${killed}/kill?signal=rtmin%2B6`)).status).toBe(204);
    expect((await d.request('POST', `/containers/${killed}/wait`)).json.StatusCode).toBe(11);
  });

  it('restart takes the stop signal and timeout (t, signal)', async () => {
    const id = await create({ Cmd: ['sh', '-c', 'trap "exit 7" USR2; echo started; while :; do sleep 0.1; done'] });
    const since = (Date.now() / 1000).toFixed(3);
    await d.request('POST', `/containers/${id}/start`);
    await waitFor(async () => (await stdoutOf(id)).includes('started'), 'the trap set');
    expect((await d.request('POST', `/containers/${id}/restart?signal=SIGUSR2&t=30`)).status).toBe(204);
    expect((await d.request('GET', `/containers/${id}/json`)).json.State.Running).toBe(true);
    await d.request('POST', `/containers/${id}/kill`);
    const until = ((Date.now() + 200) / 1000).toFixed(3);
    const filters = encodeURIComponent(JSON.stringify({ container: [id], event: ['die'] }));
    const died = (await d.request('GET', `/events?since=${since}&until=${until}&filters=${filters}`)).text
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l).Actor.Attributes.exitCode);
    // The trap answered USR2 (7); a SIGTERM would have been ignored by PID 1 until the SIGKILL (137).
    expect(died).toEqual(['7', '137']);
  });

  it('answers a missing command with 400 and exit code 127', async () => {
    const id = await create({ Cmd: ['/no/such/binary'] });
    const s = await d.request('POST', `/containers/${id}/start`);
    expect(s.status).toBe(400);
    expect(s.json.message).toMatch(/no such file or directory|not found/);
    const i = await d.request('GET', `/containers/${id}/json`);
    expect(i.json.State.ExitCode).toBe(127);
    expect(i.json.State.Running).toBe(false);
  });

  it('keeps each stream whole and in order under concurrent writes', async () => {
    const { id } = await run([
      'sh',
      '-c',
      '(for i in $(seq 1 200); do echo o$i; done) & (for i in $(seq 1 200); do echo e$i >&2; done); wait',
    ]);
    const frames = demux((await d.request('GET', `/containers/${id}/logs?stdout=1&stderr=1`)).body);
    const lines = (n: number) =>
      frames
        .filter(([s]) => s === n)
        .map(([, t]) => t)
        .join('')
        .split('\n')
        .filter(Boolean);
    expect(lines(1)).toEqual(Array.from({ length: 200 }, (_, i) => `o${i + 1}`));
    expect(lines(2)).toEqual(Array.from({ length: 200 }, (_, i) => `e${i + 1}`));
  });
});

describe('the background sequence', () => {
  it('create → start → list → logs → stop', async () => {
    const id = await create(
      { Cmd: ['sh', '-c', 'trap "echo bye; exit 0" TERM; echo started; while true; do sleep 0.1; done'] },
      'bg-one',
    );
    await d.request('POST', `/v1.40/containers/${id}/start`);
    const list = await d.request('GET', '/v1.40/containers/json');
    const mine = list.json.find((c: { Id: string }) => c.Id === id);
    expect(mine).toMatchObject({
      Id: id,
      Names: ['/bg-one'],
      Image: env.busybox,
      State: 'running',
      Status: expect.stringMatching(/^Up /),
    });
    await waitFor(async () => (await stdoutOf(id)).includes('started'), 'output');
    expect((await d.request('POST', `/v1.40/containers/${id}/stop?t=5`)).status).toBe(204);
    // The TERM trap ended it (a KILL would read 137), whatever the time it took.
    expect((await d.request('GET', `/containers/${id}/json`)).json.State.ExitCode).toBe(0);
    expect(await stdoutOf(id)).toBe('started\nbye\n');
    const after = await d.request('GET', `/containers/json`);
    expect(after.json.find((c: { Id: string }) => c.Id === id)).toBeUndefined();
    const all = await d.request('GET', `/containers/json?all=1`);
    expect(all.json.find((c: { Id: string }) => c.Id === id)).toMatchObject({
      State: 'exited',
      Status: expect.stringMatching(/^Exited \(0\) /),
    });
    // Stopping a stopped container: 304, no body.
    const again = await d.request('POST', `/containers/${id}/stop`);
    expect(again.status).toBe(304);
    expect(again.text).toBe('');
  });

  it('follows logs until the container stops', async () => {
    const id = await create({ Cmd: ['sh', '-c', 'for i in 1 2 3; do echo tick$i; sleep 0.2; done'] });
    await d.request('POST', `/containers/${id}/start`);
    const r = await d.request('GET', `/containers/${id}/logs?stdout=1&follow=1`);
    expect(demux(r.body).map(([, t]) => t)).toEqual(['tick1\n', 'tick2\n', 'tick3\n']);
  });
});

describe('names, ids and errors', () => {
  it('resolves names with and without / and unique id prefixes', async () => {
    const id = await create({ Cmd: ['true'] }, 'named-x');
    for (const ref of ['named-x', '/named-x', id.slice(0, 12), id]) {
      const r = await d.request('GET', `/containers/${encodeURIComponent(ref)}/json`);
      expect(r.status, ref).toBe(200);
      expect(r.json).toMatchObject({ Id: id, Name: '/named-x', State: { Status: 'created' } });
    }
  });

  it("answers dockerd's errors", async () => {
    const nope = await d.request('POST', '/containers/nope/wait');
    expect(nope.status).toBe(404);
    expect(nope.json).toEqual({ message: 'No such container: nope' });
    const badName = await d.request('POST', '/containers/create?name=-bad', { body: { Image: env.busybox } });
    expect(badName.status).toBe(400);
    expect(badName.json.message).toBe('Invalid container name (-bad), only [a-zA-Z0-9][a-zA-Z0-9_.-] are allowed');
    const noImage = await d.request('POST', '/containers/create', { body: { Image: 'no-such-image:1' } });
    expect(noImage.status).toBe(404);
    expect(noImage.json.message).toBe('No such image: no-such-image:1');
    const text = await d.request('POST', '/containers/create', {
      raw: '{}',
      headers: { 'Content-Type': 'text/plain' },
    });
    expect(text.status).toBe(400);
    expect(text.json.message).toBe("unsupported Content-Type header (text/plain): must be 'application/json'");
    const bad = await d.request('POST', '/containers/create', {
      raw: '{"Image": ',
      headers: { 'Content-Type': 'application/json' },
    });
    expect(bad.status).toBe(400);
    expect(bad.json.message).toMatch(/invalid JSON/);
    const wrongType = await d.request('POST', '/containers/create', { body: { Image: env.busybox, Tty: 'yes' } });
    expect(wrongType.status).toBe(400);
    expect(wrongType.json.message).toMatch(/Tty/);
  });

  it("refuses at create, with 400 and dockerd's words, what a start would have refused", async () => {
    const mb = 1024 * 1024;
    const rows: [Record<string, unknown>, string][] = [
      [
        { HostConfig: { Memory: 64 * mb, MemorySwap: 32 * mb } },
        'Minimum memoryswap limit should be larger than memory limit, see usage',
      ],
      [
        { HostConfig: { MemorySwap: 64 * mb } },
        'You should always set the Memory limit when using Memoryswap limit, see usage',
      ],
      [{ HostConfig: { CapAdd: ['CAP_FOO'] } }, 'invalid CapAdd: unknown capability: "CAP_FOO"'],
      [{ HostConfig: { CapDrop: ['bar'] } }, 'invalid CapDrop: unknown capability: "CAP_BAR"'],
      [{ HostConfig: { CpusetCpus: '0-x' } }, 'Invalid value 0-x for cpuset cpus: invalid format: 0-x'],
      [{ HostConfig: { ExtraHosts: ['db:300.1.1.1'] } }, 'invalid IP address in add-host: "300.1.1.1"'],
      [
        { HostConfig: { RestartPolicy: { Name: 'on-failure', MaximumRetryCount: -2 } } },
        'maximum retry count cannot be negative',
      ],
      [
        {
          HostConfig: { Mounts: [{ Type: 'bind', Source: '/tmp', Target: '/t', BindOptions: { Propagation: 'up' } }] },
        },
        'invalid mount config for type "bind": invalid propagation mode: up',
      ],
      [{ StopSignal: 'SIGNOPE' }, 'Invalid signal: SIGNOPE'],
      [{ Env: ['=x'] }, 'invalid environment variable: =x'],
    ];
    const count = async () => (await d.request('GET', '/containers/json?all=1')).json.length;
    const before = await count();
    for (const [body, message] of rows) {
      const r = await d.request('POST', '/containers/create', { body: { Image: env.busybox, Cmd: ['true'], ...body } });
      expect(r.status, message).toBe(400);
      expect(r.json).toEqual({ message });
    }
    const cpus = await d.request('POST', '/containers/create', {
      body: { Image: env.busybox, Cmd: ['true'], HostConfig: { NanoCpus: 1e15 } },
    });
    expect(cpus.status).toBe(400);
    expect(cpus.json.message).toMatch(/^Range of CPUs is from 0\.01 to \d+\.00, as there are only \d+ CPUs available$/);
    expect(await count()).toBe(before);
  });

  it('gives one 201 and seven 409 for eight parallel creates of one name', async () => {
    const rs = await Promise.all(
      Array.from({ length: 8 }, () =>
        d.request('POST', '/containers/create?name=racer', { body: { Image: env.busybox, Cmd: ['true'] } }),
      ),
    );
    expect(rs.filter((r) => r.status === 201)).toHaveLength(1);
    const conflicts = rs.filter((r) => r.status === 409);
    expect(conflicts).toHaveLength(7);
    expect(conflicts[0]!.json.message).toMatch(
      /^Conflict. The container name "\/racer" is already in use by container "[0-9a-f]{64}"/,
    );
  });

  it('refuses to remove a running container without force', async () => {
    const id = await create({ Cmd: ['sleep', '100'] });
    await d.request('POST', `/containers/${id}/start`);
    const r = await d.request('DELETE', `/containers/${id}`);
    expect(r.status).toBe(409);
    expect((await d.request('DELETE', `/containers/${id}?force=1`)).status).toBe(204);
    expect((await d.request('GET', `/containers/${id}/json`)).status).toBe(404);
    // Nothing of it stays on the host: no cgroup, no runtime state.
    for (const h of ['memory', 'pids', 'cpu', 'unified'])
      expect(existsSync(`/sys/fs/cgroup/${h}/berth/${id}`), h).toBe(false);
    expect(existsSync(`${d.execRoot}/runc/${id}`)).toBe(false);
  });

  it('answers a removal at once and deletes what the container wrote in the background, mount first', async () => {
    const id = await create({
      Cmd: ['sh', '-c', 'for i in $(seq 1 300); do echo $i > /f$i; done; head -c 8388608 /dev/zero > /big'],
    });
    await d.request('POST', `/containers/${id}/start`);
    expect((await d.request('POST', `/containers/${id}/wait`)).json.StatusCode).toBe(0);
    const containers = path.join(d.dataRoot, 'containers');
    const mounted = () =>
      readFileSync('/proc/self/mountinfo', 'utf8')
        .split('\n')
        .some((l) => l.includes(id) && l.split(' ')[4]?.startsWith(containers));
    expect(mounted()).toBe(true);
    expect((await d.request('DELETE', `/containers/${id}`)).status).toBe(204);
    expect(existsSync(path.join(containers, id))).toBe(false); // renamed away before the answer
    await waitFor(
      () => !mounted() && !readdirSync(containers).some((n) => n.startsWith('.removing-')),
      'the removed container to be unmounted and deleted',
    );
  });
});

describe('isolation', () => {
  it('has its own pid 1, hostname, mounts and rootfs', async () => {
    const { id, code } = await run(
      [
        'sh',
        '-c',
        'echo pid=$$; hostname; cat /proc/1/cmdline | tr "\\0" " "; echo; ls /; grep -c " / overlay " /proc/mounts',
      ],
      { Hostname: 'box' },
    );
    expect(code).toBe(0);
    const out = await stdoutOf(id);
    expect(out).toMatch(/^pid=1\nbox\nsh -c/);
    expect(out).toMatch(/\bbin\b/);
    expect(out).not.toMatch(/\bboot\b|\bwork\b/); // not the host's /
    expect(out.trim().split('\n').at(-1)).toBe('1');
  });

  it('enforces Memory and PidsLimit', async () => {
    const mem = await run(['sh', '-c', 'cat /sys/fs/cgroup/memory/memory.limit_in_bytes'], {
      HostConfig: { Memory: 64 * 1024 * 1024 },
    });
    expect((await stdoutOf(mem.id)).trim()).toBe(String(64 * 1024 * 1024));
    const pids = await run(['sh', '-c', 'for i in 1 2 3 4 5 6 7 8 9 10; do sleep 5 & done; wait'], {
      HostConfig: { PidsLimit: 5 },
    });
    expect(await stdoutOf(pids.id)).toMatch(/can't fork|Resource temporarily unavailable/);
    // A memory hog over its limit is OOM-killed.
    const hog = await run(['sh', '-c', 'x=$(head -c 100000000 /dev/zero | tr "\\0" a); echo $x | wc -c'], {
      HostConfig: { Memory: 16 * 1024 * 1024, MemorySwap: 16 * 1024 * 1024 },
    });
    expect(hog.code).toBe(137);
  });

  it('makes ReadonlyRootfs read-only and shows a bind mount', async () => {
    const ro = await run(['touch', '/x'], { HostConfig: { ReadonlyRootfs: true } });
    expect(ro.code).not.toBe(0);
    expect(await stdoutOf(ro.id)).toMatch(/Read-only file system/);
    const dir = mkdtempSync(path.join(os.tmpdir(), 'berth-bind-'));
    writeFileSync(path.join(dir, 'hello.txt'), 'from the host\n');
    const b = await run(['cat', '/data/hello.txt'], { HostConfig: { Binds: [`${dir}:/data:ro`] } });
    expect(b.code).toBe(0);
    expect(await stdoutOf(b.id)).toBe('from the host\n');
  });

  it('runs as the image user given by name', async () => {
    const { id } = await run(['id'], { User: 'nobody' });
    expect(await stdoutOf(id)).toMatch(/^uid=65534/);
  });
});

describe('host config', () => {
  const capEff = async (extra: Record<string, unknown>) => {
    const { id } = await run(['sh', '-c', 'grep CapEff /proc/self/status; grep NoNewPrivs /proc/self/status'], extra);
    return stdoutOf(id);
  };

  it("applies Docker's default capabilities, CapAdd, CapDrop, Privileged and no-new-privileges", async () => {
    expect(await capEff({})).toMatch(/CapEff:\s+00000000a80425fb\nNoNewPrivs:\s+0/);
    expect(await capEff({ HostConfig: { CapDrop: ['NET_RAW'], CapAdd: ['CAP_SYS_ADMIN'] } })).toMatch(
      /CapEff:\s+00000000a82405fb/,
    );
    // Privileged: every capability berthd holds (this host withholds CAP_SYS_RESOURCE).
    const bnd = /CapBnd:\s+([0-9a-f]+)/.exec(readFileSync('/proc/self/status', 'utf8'))![1];
    expect(await capEff({ HostConfig: { Privileged: true } })).toContain(`CapEff:\t${bnd}`);
    expect(await capEff({ HostConfig: { SecurityOpt: ['no-new-privileges'] } })).toMatch(/NoNewPrivs:\s+1/);
  });

  it('filters system calls with the built-in seccomp profile unless privileged or unconfined', async () => {
    const probe = [
      'sh',
      '-c',
      'grep Seccomp: /proc/self/status; unshare -U true 2>&1 && echo userns; unshare -n true 2>&1 && echo netns; echo end',
    ];
    const confined = await run(probe);
    // A new user namespace would hand the container every capability inside it: seccomp alone stops it.
    expect(await stdoutOf(confined.id)).toMatch(
      /^Seccomp:\s+2\nunshare: unshare\(0x10000000\): Operation not permitted\nunshare: unshare\(0x40000000\): Operation not permitted\nend\n$/,
    );
    const unconfined = await run(probe, { HostConfig: { SecurityOpt: ['seccomp=unconfined'] } });
    expect(await stdoutOf(unconfined.id)).toMatch(/^Seccomp:\s+0\nuserns\n/);
    // CAP_SYS_ADMIN gives back namespaces and mounts, as in dockerd's profile.
    const admin = await run(probe, { HostConfig: { CapAdd: ['SYS_ADMIN'] } });
    expect(await stdoutOf(admin.id)).toBe('Seccomp:\t2\nuserns\nnetns\nend\n');
    const privileged = await run(['grep', 'Seccomp:', '/proc/self/status'], { HostConfig: { Privileged: true } });
    expect(await stdoutOf(privileged.id)).toMatch(/^Seccomp:\s+0\n$/);
  });

  it('applies a custom seccomp profile and refuses one it cannot read', async () => {
    const profile = {
      defaultAction: 'SCMP_ACT_ALLOW',
      syscalls: [{ names: ['mkdir', 'mkdirat'], action: 'SCMP_ACT_ERRNO', errnoRet: 1 }],
    };
    const custom = await run(['sh', '-c', 'mkdir /made 2>&1; touch /touched && echo touched'], {
      HostConfig: { SecurityOpt: [`seccomp=${JSON.stringify(profile)}`] },
    });
    expect(await stdoutOf(custom.id)).toBe("mkdir: can't create directory '/made': Operation not permitted\ntouched\n");
    const before = (await d.request('GET', '/containers/json?all=1')).json.length;
    const bad = await d.request('POST', '/containers/create', {
      body: { Image: env.busybox, HostConfig: { SecurityOpt: ['seccomp={"defaultAction": 3}'] } },
    });
    expect(bad.status).toBe(400);
    expect(bad.json.message).toMatch(/^Decoding seccomp profile failed/);
    expect((await d.request('GET', '/containers/json?all=1')).json.length).toBe(before);
  });

  it('runs an init as pid 1 with Init', async () => {
    const { id } = await run(['sh', '-c', 'cat /proc/1/cmdline | tr "\\0" " "'], { HostConfig: { Init: true } });
    expect(await stdoutOf(id)).toMatch(/^\/dev\/init -- sh -c/);
  });

  it('gives a private network namespace with loopback up, none, and host', async () => {
    const { id } = await run(['sh', '-c', 'cat /sys/class/net/lo/operstate; ls /sys/class/net | wc -l']);
    expect(await stdoutOf(id)).toMatch(/^(unknown|up)\n1\n$/);
    const none = await run(['sh', '-c', 'ls /sys/class/net'], { HostConfig: { NetworkMode: 'none' } });
    expect(await stdoutOf(none.id)).toBe('lo\n');
    const host = await run(['hostname'], { HostConfig: { NetworkMode: 'host' } });
    expect((await stdoutOf(host.id)).trim()).toBe(os.hostname());
    const bad = await d.request('POST', '/containers/create', {
      body: { Image: env.busybox, HostConfig: { NetworkMode: 'nonet' } },
    });
    expect(bad.status).toBe(404);
    expect(bad.json.message).toBe('network nonet not found');
  });

  it('caps the log size with LogConfig max-size so a noisy container cannot fill the disk', async () => {
    const { id } = await run(['sh', '-c', 'yes 0123456789012345678901234567890123456789 | head -c 5000000'], {
      HostConfig: { LogConfig: { Type: 'json-file', Config: { 'max-size': '256k' } } },
    });
    const logPath = (await d.request('GET', `/containers/${id}/json`)).json.LogPath;
    const { statSync } = await import('node:fs');
    expect(statSync(logPath).size).toBeLessThan(600 * 1024);
    expect((await d.request('GET', '/_ping')).status).toBe(200);
  });

  it('merges the image config: Env, WorkingDir, Entrypoint rules, Labels', async () => {
    const { id } = await run(['sh', '-c', 'echo $PATH; echo $FOO; pwd'], {
      Env: ['FOO=bar'],
      WorkingDir: '/tmp',
      Labels: { team: 'a' },
    });
    expect(await stdoutOf(id)).toBe('/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\nbar\n/tmp\n');
    const i = (await d.request('GET', `/containers/${id}/json`)).json;
    expect(i).toMatchObject({
      Path: 'sh',
      Args: ['-c', expect.any(String)],
      Config: { Labels: { team: 'a' }, Env: expect.arrayContaining(['FOO=bar']) },
    });
    const ep = await run([], { Entrypoint: ['echo', 'from-entrypoint'] });
    expect(await stdoutOf(ep.id)).toBe('from-entrypoint\n');
    const labelled = await d.request(
      'GET',
      `/containers/json?all=1&filters=${encodeURIComponent('{"label":["team=a"]}')}`,
    );
    expect(labelled.json.map((c: { Id: string }) => c.Id)).toEqual([id]);
  });

  it('reports top, stats and sizes', async () => {
    const id = await create({ Cmd: ['sh', '-c', 'dd if=/dev/zero of=/big bs=1k count=300 2>/dev/null; sleep 100'] });
    await d.request('POST', `/containers/${id}/start`);
    await waitFor(
      async () =>
        (await d.request('GET', `/containers/${id}/top`)).json.Processes?.some(
          (p: string[]) => p.at(-1) === 'sleep 100',
        ),
      'sleep in top',
    );
    const top = (await d.request('GET', `/containers/${id}/top`)).json;
    expect(top.Titles).toContain('PID');
    const single = await d.request('GET', `/containers/${id}/stats?stream=0`);
    // One JSON document and its newline, as dockerd's encoder writes it: the docker CLI's
    // `stats --no-stream` (28) read a body without it as EOF, most times.
    expect(single.text.endsWith('}\n')).toBe(true);
    const stats = single.json;
    expect(stats).toMatchObject({ id, name: expect.stringMatching(/^\//) });
    expect(stats.pids_stats.current).toBeGreaterThanOrEqual(1);
    expect(stats.memory_stats.usage).toBeGreaterThan(0);
    expect(stats.cpu_stats.cpu_usage.total_usage).toBeGreaterThan(0);
    // stream=0 is dockerd's second frame: the first one is its precpu_stats, a second before.
    expect(stats.precpu_stats.cpu_usage.total_usage).toBeGreaterThan(0);
    expect(stats.precpu_stats.system_cpu_usage).toBeLessThan(stats.cpu_stats.system_cpu_usage);
    expect(Date.parse(stats.preread)).toBeLessThan(Date.parse(stats.read));
    const shot = await d.request('GET', `/containers/${id}/stats?stream=0&one-shot=1`);
    expect(shot.text.endsWith('}\n')).toBe(true);
    const oneShot = shot.json;
    expect(oneShot.cpu_stats.cpu_usage.total_usage).toBeGreaterThan(0);
    expect(oneShot.precpu_stats.cpu_usage?.total_usage ?? 0).toBe(0);
    const both = await d.request('GET', `/containers/${id}/stats?stream=1&one-shot=1`);
    expect([both.status, both.json.message]).toEqual([400, 'cannot have stream=true and one-shot=true']);
    const sized = (await d.request('GET', '/containers/json?size=1')).json.find((c: { Id: string }) => c.Id === id);
    expect(sized.SizeRw).toBeGreaterThanOrEqual(300 * 1024);
    expect(sized.SizeRootFs).toBeGreaterThan(sized.SizeRw);
    // Inspect counts them only when asked, as dockerd does.
    expect((await d.request('GET', `/containers/${id}/json`)).json).not.toHaveProperty('SizeRw');
    const inspected = (await d.request('GET', `/containers/${id}/json?size=1`)).json;
    expect([inspected.SizeRw, inspected.SizeRootFs]).toEqual([sized.SizeRw, sized.SizeRootFs]);
    await d.request('DELETE', `/containers/${id}?force=1`);

    // A container that wrote nothing: the list omits its zero SizeRw (dockerd's omitempty), inspect shows it.
    const quiet = (await run(['true'])).id;
    const image = (await d.request('GET', `/images/${env.busybox}/json`)).json.Size;
    const listed = (await d.request('GET', '/containers/json?all=1&size=1')).json.find(
      (c: { Id: string }) => c.Id === quiet,
    );
    expect(listed).not.toHaveProperty('SizeRw');
    expect(listed.SizeRootFs).toBe(image);
    expect((await d.request('GET', `/containers/${quiet}/json?size=true`)).json).toMatchObject({
      SizeRw: 0,
      SizeRootFs: image,
    });
  });

  it('pauses and unpauses, renames, and restarts', async () => {
    const id = await create({ Cmd: ['sleep', '100'] }, 'to-rename');
    await d.request('POST', `/containers/${id}/start`);
    expect((await d.request('POST', `/containers/${id}/pause`)).status).toBe(204);
    expect((await d.request('GET', `/containers/${id}/json`)).json.State).toMatchObject({
      Status: 'paused',
      Paused: true,
    });
    expect((await d.request('POST', `/containers/${id}/unpause`)).status).toBe(204);
    expect((await d.request('POST', `/containers/${id}/rename?name=renamed`)).status).toBe(204);
    expect((await d.request('GET', '/containers/renamed/json')).json.Id).toBe(id);
    const pid0 = (await d.request('GET', `/containers/${id}/json`)).json.State.Pid;
    expect((await d.request('POST', `/containers/${id}/restart?t=0`)).status).toBe(204);
    const after = (await d.request('GET', `/containers/${id}/json`)).json.State;
    expect(after.Running).toBe(true);
    expect(after.Pid).not.toBe(pid0);
    await d.request('DELETE', `/containers/${id}?force=1`);
  });
});

describe('namespaces, groups, devices and limits', () => {
  /** What a container prints, and its inspect, once its command has run. */
  async function output(cmd: string[], host: Record<string, unknown>, extra: Record<string, unknown> = {}) {
    const { id, code } = await run(cmd, { HostConfig: host, ...extra });
    expect(code, await stdoutOf(id)).toBe(0);
    return { out: (await stdoutOf(id)).trim(), inspect: (await d.request('GET', `/containers/${id}/json`)).json };
  }

  /** The 400 a create answers, by its message. */
  async function refused(host: Record<string, unknown>, extra: Record<string, unknown> = {}): Promise<string> {
    const r = await d.request('POST', '/containers/create', {
      body: { Image: env.busybox, Cmd: ['true'], HostConfig: host, ...extra },
    });
    expect(r.status, r.text).toBe(400);
    return r.json.message;
  }

  /** A running `sleep` to join, with its id. */
  async function donor(host: Record<string, unknown> = {}): Promise<string> {
    const id = await create({ Cmd: ['sh', '-c', 'echo shared > /dev/shm/note; exec sleep 100'], HostConfig: host });
    expect((await d.request('POST', `/containers/${id}/start`)).status).toBe(204);
    await waitFor(
      async () => (await d.request('GET', `/containers/${id}/top`)).json.Processes?.[0]?.[7]?.startsWith('sleep'),
      'the donor asleep',
    );
    return id;
  }

  it("PidMode host sees the host's processes; container:<id> joins another's", async () => {
    const hostInit = readFileSync('/proc/1/comm', 'utf8').trim();
    const host = await output(['cat', '/proc/1/comm'], { PidMode: 'host' });
    expect(host.out).toBe(hostInit);
    expect(host.inspect.HostConfig.PidMode).toBe('host');
    const own = await output(['cat', '/proc/1/comm'], {});
    expect([own.out, own.inspect.HostConfig.PidMode]).toEqual(['cat', '']);
    const other = await donor();
    const joined = await output(['cat', '/proc/1/comm'], { PidMode: `container:${other}` });
    expect(joined.out).toBe('sleep');
    await d.request('POST', `/containers/${other}/kill`);
    expect(await refused({ PidMode: 'nonsense' })).toBe('invalid PID mode: nonsense');
  });

  it("UTSMode host has the host's name, which a Hostname cannot change", async () => {
    const uts = await output(['sh', '-c', 'hostname; cat /etc/hostname'], { UTSMode: 'host' });
    expect(uts.out.split('\n')).toEqual([os.hostname(), os.hostname()]);
    expect(uts.inspect.HostConfig.UTSMode).toBe('host');
    expect(await refused({ UTSMode: 'host' }, { Hostname: 'mine' })).toBe(
      'conflicting options: hostname and the UTS mode',
    );
  });

  it('IpcMode: private by default, shareable joinable by container:<id>, none without /dev/shm', async () => {
    const plain = await output(['true'], {});
    expect(plain.inspect.HostConfig.IpcMode).toBe('private');
    const shareable = await donor({ IpcMode: 'shareable' });
    expect((await d.request('GET', `/containers/${shareable}/json`)).json.HostConfig.IpcMode).toBe('shareable');
    const joined = await output(['cat', '/dev/shm/note'], { IpcMode: `container:${shareable}` });
    expect(joined.out).toBe('shared');
    const privateOne = await donor();
    const id = await create({ Cmd: ['true'], HostConfig: { IpcMode: `container:${privateOne}` } });
    const start = await d.request('POST', `/containers/${id}/start`);
    expect([start.status, start.json.message]).toEqual([
      409,
      'non-shareable IPC (hint: use IpcMode:shareable for the donor container)',
    ]);
    for (const c of [shareable, privateOne]) await d.request('DELETE', `/containers/${c}?force=1`);
    // The shareable one's /dev/shm was a tmpfs on the host: removal unmounts it.
    await waitFor(() => !readFileSync('/proc/self/mountinfo', 'utf8').includes(`${shareable}/shm`), 'shm unmounted');
    const none = await output(['sh', '-c', 'grep -c " /dev/shm " /proc/mounts || true'], { IpcMode: 'none' });
    expect(none.out).toBe('0');
    expect(await refused({ IpcMode: 'weird' })).toBe('invalid IPC mode: weird');
  });

  it('GroupAdd gives the process extra groups, by number or by name in the image', async () => {
    const groups = await output(['id', '-G'], { GroupAdd: ['app', '4242'] });
    expect(groups.out.split(' ').sort()).toEqual(['0', '1000', '4242']);
    expect(groups.inspect.HostConfig.GroupAdd).toEqual(['app', '4242']);
    const id = await create({ Cmd: ['true'], HostConfig: { GroupAdd: ['nosuch'] } });
    const start = await d.request('POST', `/containers/${id}/start`);
    expect([start.status, start.json.message]).toEqual([
      400,
      'Unable to find group nosuch: no matching entries in group file',
    ]);
  });

  it('DeviceCgroupRules go into the devices cgroup', async () => {
    const rules = await output(['grep', '7:128', '/sys/fs/cgroup/devices/devices.list'], {
      DeviceCgroupRules: ['c 7:128 rwm'],
    });
    expect(rules.out).toBe('c 7:128 rwm');
    expect(await refused({ DeviceCgroupRules: ['x 7:128 rwm'] })).toBe("invalid device cgroup format 'x 7:128 rwm'");
  });

  it('Devices: the host node made in the container, usable as CgroupPermissions says', async () => {
    const readOnly = await output(
      ['sh', '-c', 'ls -l /dev/myfuse; (: > /dev/myfuse) 2>/dev/null && echo writable || echo refused'],
      { Devices: [{ PathOnHost: '/dev/fuse', PathInContainer: '/dev/myfuse', CgroupPermissions: 'r' }] },
    );
    expect(readOnly.out).toMatch(/^crw------- +1 root +root +10, +229 .* \/dev\/myfuse\nrefused$/);
    const writable = await output(['sh', '-c', ': > /dev/myfuse && echo writable'], {
      Devices: [{ PathOnHost: '/dev/fuse', PathInContainer: '/dev/myfuse', CgroupPermissions: 'rw' }],
    });
    expect(writable.out).toBe('writable');
    expect(await refused({ Devices: [{ PathOnHost: '/dev/fuse', CgroupPermissions: 'rwx' }] })).toBe(
      'invalid device mode: rwx',
    );
    const id = await create({ Cmd: ['true'], HostConfig: { Devices: [{ PathOnHost: '/etc/passwd' }] } });
    const start = await d.request('POST', `/containers/${id}/start`);
    expect([start.status, start.json.message]).toEqual([
      400,
      'error gathering device information while adding custom device "/etc/passwd": not a device node',
    ]);
  });

  it('OomScoreAdj: applied when raised; lowered only where berthd holds CAP_SYS_RESOURCE', async () => {
    const raised = await output(['cat', '/proc/self/oom_score_adj'], { OomScoreAdj: 500 });
    expect([raised.out, raised.inspect.HostConfig.OomScoreAdj]).toEqual(['500', 500]);
    const capBnd = BigInt(`0x${/^CapBnd:\s*([0-9a-f]+)$/m.exec(readFileSync('/proc/self/status', 'utf8'))![1]}`);
    if ((capBnd >> 24n) & 1n) {
      expect((await output(['cat', '/proc/self/oom_score_adj'], { OomScoreAdj: -500 })).out).toBe('-500');
    } else {
      expect(await refused({ OomScoreAdj: -500 })).toMatch(
        /^OomScoreAdj -500 is below berthd's own .*CAP_SYS_RESOURCE/,
      );
    }
    expect(await refused({ OomScoreAdj: 1001 })).toBe('Invalid value 1001, range for oom score adj is [-1000, 1000]');
  });

  it("Ulimits set the process's limits, within the host's hard limits", async () => {
    const limits = await output(['sh', '-c', 'ulimit -Sn; ulimit -Hn'], {
      Ulimits: [{ Name: 'nofile', Soft: 100, Hard: 200 }],
    });
    expect(limits.out.split('\n')).toEqual(['100', '200']);
    expect(await refused({ Ulimits: [{ Name: 'nope', Soft: 1, Hard: 1 }] })).toBe('invalid ulimit type: nope');
    expect(await refused({ Ulimits: [{ Name: 'nofile', Soft: 300, Hard: 200 }] })).toBe(
      'ulimit soft limit must be less than or equal to hard limit: 300 > 200',
    );
  });

  it('Sysctls of the namespaces the container has to itself', async () => {
    const sysctl = await output(['cat', '/proc/sys/net/ipv4/ip_forward'], {
      Sysctls: { 'net.ipv4.ip_forward': '1' },
    });
    expect(sysctl.out).toBe('1');
    expect(await refused({ Sysctls: { 'kernel.domainname': 'x' } })).toBe("sysctl 'kernel.domainname' is not allowed");
    expect(await refused({ NetworkMode: 'host', Sysctls: { 'net.ipv4.ip_forward': '1' } })).toBe(
      'sysctl "net.ipv4.ip_forward" not allowed in host network namespace',
    );
  });

  it('log drivers: json-file, local and none; other drivers and options refused, never dropped', async () => {
    const lc = (Type: string, Config: Record<string, string> = {}) => ({ LogConfig: { Type, Config } });
    expect(await refused(lc('nope'))).toBe("logger: no log driver named 'nope' is registered");
    expect(await refused(lc('syslog'))).toMatch(/^the syslog log driver is not supported by berth yet/);
    expect(await refused(lc('json-file', { 'env-regex': '^A' }))).toBe(
      "log opt 'env-regex' is not supported by berth yet",
    );
    expect(await refused(lc('json-file', { colour: 'red' }))).toBe("unknown log opt 'colour' for json-file log driver");
    const kept = await output(['echo', 'kept'], lc('json-file', { 'max-size': '1m', 'max-file': '1' }));
    expect(kept.out).toBe('kept');
  });

  it('refuses what it does not apply yet, and takes the zeros and defaults clients send', async () => {
    expect(await refused({ Links: ['other:db'] })).toBe('could not get container for other: No such container: other');
    // A GPU request: dockerd hands it to a device driver (nvidia's), which berth has not.
    expect(await refused({ DeviceRequests: [{ Driver: 'nvidia', Count: -1, Capabilities: [['gpu']] }] })).toMatch(
      /^HostConfig.DeviceRequests is not supported by berth yet/,
    );
    // A storage option with an empty value still asks for something (container-config.test.ts has the rest).
    expect(await refused({ StorageOpt: { size: '' } })).toBe(
      "--storage-opt is supported only for overlay over xfs with 'pquota' mount option",
    );
    // What asks for no confinement is what berth does; a profile or label is what dockerd ignores
    // on a host without the module (lsm.ts; the refusal where the host has one: test/unit/lsm.test.ts).
    expect((await output(['true'], { SecurityOpt: ['apparmor=unconfined', 'label=disable'] })).out).toBe('');
    // What the docker CLI sends for a plain `docker run`: nothing asked.
    const plain = await output(['echo', 'fine'], {
      PortBindings: {},
      ConsoleSize: [0, 0],
      CgroupnsMode: 'host',
      MemorySwappiness: -1,
      BlkioWeightDevice: [],
      Isolation: '',
      KernelMemory: 0,
      OomKillDisable: false,
      VolumeDriver: '',
      VolumesFrom: null,
      Links: null,
    });
    expect(plain.out).toBe('fine');
  });

  it("shows what a Go client sends as nil, and PidsLimit 0 or -1 (unlimited), as dockerd's inspect does", async () => {
    // Nomad's docker driver (moby/client) sends nil slices as null and PidsLimit -1 when no limit is set.
    const { inspect } = await output(['true'], {
      PidsLimit: -1,
      Devices: null,
      DeviceRequests: null,
      Links: null,
      Ulimits: null,
    });
    expect(inspect.HostConfig).toMatchObject({
      PidsLimit: null,
      Devices: null,
      DeviceRequests: null,
      Links: null,
      Ulimits: null,
    });
    expect((await output(['true'], { PidsLimit: 0 })).inspect.HostConfig.PidsLimit).toBeNull();
    expect((await output(['true'], { PidsLimit: 7 })).inspect.HostConfig.PidsLimit).toBe(7);
    // What dockerd's types leave out when unset (omitempty) is not there; what they always carry is.
    expect(inspect.HostConfig).not.toHaveProperty('Init');
    expect(inspect.Config).not.toHaveProperty('ExposedPorts');
    expect(inspect.HostConfig).toMatchObject({ Cgroup: '', ConsoleSize: [0, 0], PublishAllPorts: false });
    expect((await output(['true'], { Init: false })).inspect.HostConfig.Init).toBe(false);
  });
});

describe("a body's field names", () => {
  it("match in any case, as dockerd's decoder matches them; map keys stay as given", async () => {
    const r = await d.request('POST', '/containers/create', {
      body: {
        image: env.busybox,
        CMD: ['sh', '-c', 'cat /sys/fs/cgroup/memory/memory.limit_in_bytes; echo $Mixed'],
        env: ['Mixed=case'],
        labels: { 'Key.Case': 'kept' },
        hostconfig: { memory: 32 * 1024 * 1024, restartpolicy: { name: 'no' } },
      },
    });
    expect(r.status, r.text).toBe(201);
    const id = r.json.Id;
    expect((await d.request('POST', `/containers/${id}/start`)).status).toBe(204);
    expect((await d.request('POST', `/containers/${id}/wait`)).json.StatusCode).toBe(0);
    expect(await stdoutOf(id)).toBe(`${32 * 1024 * 1024}\ncase\n`);
    const inspect = (await d.request('GET', `/containers/${id}/json`)).json;
    expect(inspect.Config.Labels).toEqual({ 'Key.Case': 'kept' });
    expect(inspect.HostConfig).toMatchObject({ Memory: 32 * 1024 * 1024, RestartPolicy: { Name: 'no' } });
  });
});

describe('prune', () => {
  it('removes the stopped containers and reports the space they had written', async () => {
    const wrote = await run(['sh', '-c', 'head -c 300000 /dev/zero > /data']);
    const live = await create({ Cmd: ['sleep', '100'] });
    expect((await d.request('POST', `/containers/${live}/start`)).status).toBe(204);
    const r = await d.request('POST', '/containers/prune');
    expect(r.status, r.text).toBe(200);
    expect(r.json.ContainersDeleted).toContain(wrote.id);
    expect(r.json.ContainersDeleted).not.toContain(live);
    expect(r.json.SpaceReclaimed).toBeGreaterThanOrEqual(300_000);
    await d.request('DELETE', `/containers/${live}?force=1`);
  });

  it('keeps what was created after `until`, read as a duration as the docker CLI sends it', async () => {
    const recent = await create({ Cmd: ['true'] });
    const r = await d.request('POST', `/containers/prune?filters=${encodeURIComponent('{"until":["10m"]}')}`);
    expect(r.status, r.text).toBe(200);
    expect(r.json.ContainersDeleted ?? []).not.toContain(recent);
    const bad = await d.request('POST', `/containers/prune?filters=${encodeURIComponent('{"until":["soon"]}')}`);
    expect([bad.status, bad.json.message]).toEqual([400, "invalid filter 'until=soon'"]);
    await d.request('DELETE', `/containers/${recent}`);
  });
});

describe('attach to a container that has ended', () => {
  it('answers 200: its log with logs=1, and a stream that ends at once (as dockerd; compose run --rm relies on it)', async () => {
    const { id } = await run(['sh', '-c', 'echo done; sleep 0.05; echo err >&2']);
    const withLogs = await d.request('POST', `/containers/${id}/attach?stream=1&stdout=1&stderr=1&logs=1`);
    expect(withLogs.status).toBe(200);
    expect(demux(withLogs.body)).toEqual([
      [1, 'done\n'],
      [2, 'err\n'],
    ]);
    const streamOnly = await d.request('POST', `/containers/${id}/attach?stream=1&stdout=1&stderr=1`);
    expect([streamOnly.status, streamOnly.body.length]).toEqual([200, 0]);
  });
});
