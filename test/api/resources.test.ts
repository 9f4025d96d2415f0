// The cgroup limits runc applies on Linux, given at create with the real
// docker CLI and the Python SDK: what the container's cgroups hold (read from
// inside it, and from the host under the right hierarchy), what inspect shows,
// dockerd's warnings for what the host's cgroups cannot apply (the value then
// discarded) and its refusals; CgroupParent (nested, not there yet; relative)
// followed by stats, top, update and OOM detection, and nothing of the container's left in
// any hierarchy after rm; a cgroup namespace of its own for CgroupnsMode private.
import { existsSync, readdirSync, readFileSync, readlinkSync, rmdirSync } from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { type Cli, dockerCli } from '../harness/cli.js';
import { runPython } from '../harness/clients.js';
import { type Daemon, startDaemon } from '../harness/daemon.js';
import { pull, removeAllContainers, useEnv } from '../harness/env.js';

const ctx = useEnv();
let cli: Cli | undefined;
const docker = () => {
  cli ??= dockerCli(ctx.daemon);
  return cli;
};
afterAll(async () => {
  await removeAllContainers(ctx.daemon);
});

const MB = 1024 * 1024;
const CG = '/sys/fs/cgroup';
/** The hierarchies runc makes a container's cgroup in on this host: v1's controllers, name=systemd, the unified one. */
const hierarchies = () =>
  readdirSync(CG).filter((h) => existsSync(path.join(CG, h, 'cgroup.procs')) && !h.includes(','));

/** The test's own cgroup in a hierarchy (berthd's, whose child runc is, is the same). */
function ownCgroup(h: string): string {
  const wanted = h === 'unified' ? '' : h === 'systemd' ? 'name=systemd' : h;
  for (const line of readFileSync('/proc/self/cgroup', 'utf8').split('\n')) {
    const m = /^\d+:([^:]*):(.*)$/.exec(line);
    if (m && (wanted === '' ? m[1] === '' : m[1]!.split(',').includes(wanted))) return m[2]!;
  }
  return '/';
}

/** A whole disk of the host (blkio throttles take no partition), as /dev/<name> and major:minor. */
function wholeDisk(): { dev: string; numbers: string } | undefined {
  const disks = readdirSync('/sys/block').filter((n) => !/^(loop|ram|zram)/.test(n));
  for (const n of [...disks, ...readdirSync('/sys/block').filter((x) => x.startsWith('loop'))]) {
    if (existsSync(`/dev/${n}`))
      return { dev: `/dev/${n}`, numbers: readFileSync(`/sys/block/${n}/dev`, 'utf8').trim() };
  }
  return undefined;
}

const run = async (args: string[]) =>
  (await docker().ok(['run', '-d', ...args, ctx.env.busybox, 'sleep', '300'])).trim();
const exec = async (id: string, ...cmd: string[]) => (await docker().ok(['exec', id, ...cmd])).trim();
/** The memory limit `docker stats` shows, from one sample of the stats endpoint. */
const memoryLimit = async (id: string) =>
  (await ctx.daemon.request('GET', `/containers/${id}/stats?stream=0`)).json.memory_stats.limit;
const hostConfig = async (id: string) => (await ctx.daemon.request('GET', `/containers/${id}/json`)).json.HostConfig;

describe('limits at create, with the docker CLI', () => {
  it('applies CPU period and quota, memory reservation, cpuset mems, the OOM switch and blkio throttles', async () => {
    const disk = wholeDisk();
    const throttles = disk ? ['--device-read-bps', `${disk.dev}:1mb`, '--device-write-iops', `${disk.dev}:100`] : [];
    const id = await run([
      '--cpu-period',
      '200000',
      '--cpu-quota',
      '50000',
      '--memory',
      '64m',
      '--memory-reservation',
      '32m',
      '--cpuset-mems',
      '0',
      '--oom-kill-disable',
      ...throttles,
    ]);
    expect(await exec(id, 'cat', `${CG}/cpu/cpu.cfs_period_us`, `${CG}/cpu/cpu.cfs_quota_us`)).toBe('200000\n50000');
    expect(await exec(id, 'cat', `${CG}/memory/memory.soft_limit_in_bytes`)).toBe(String(32 * MB));
    expect(await exec(id, 'cat', `${CG}/cpuset/cpuset.mems`)).toBe('0');
    expect(await exec(id, 'cat', `${CG}/memory/memory.oom_control`)).toMatch(/^oom_kill_disable 1$/m);
    if (disk) {
      expect(await exec(id, 'cat', `${CG}/blkio/blkio.throttle.read_bps_device`)).toBe(`${disk.numbers} ${MB}`);
      expect(await exec(id, 'cat', `${CG}/blkio/blkio.throttle.write_iops_device`)).toBe(`${disk.numbers} 100`);
    }
    expect(await hostConfig(id)).toMatchObject({
      CpuPeriod: 200_000,
      CpuQuota: 50_000,
      MemoryReservation: 32 * MB,
      CpusetMems: '0',
      OomKillDisable: true,
      ...(disk
        ? {
            BlkioDeviceReadBps: [{ Path: disk.dev, Rate: MB }],
            BlkioDeviceWriteIOps: [{ Path: disk.dev, Rate: 100 }],
          }
        : {}),
    });
    // Defaults a plain run is shown with, as dockerd's.
    const plain = await run([]);
    expect(await hostConfig(plain)).toMatchObject({
      CgroupParent: '',
      CgroupnsMode: 'host',
      CpuPeriod: 0,
      CpuQuota: 0,
      OomKillDisable: false,
      BlkioWeight: 0,
    });
  });

  it("applies a blkio weight where the host's cgroup has the file, else warns and discards it as dockerd", async () => {
    const r = await docker()(['run', '-d', '--blkio-weight', '300', ctx.env.busybox, 'sleep', '300']);
    expect(r.code, r.stderr).toBe(0);
    const id = r.stdout.trim();
    if (existsSync(`${CG}/blkio/blkio.weight`)) {
      expect(await exec(id, 'cat', `${CG}/blkio/blkio.weight`)).toBe('300');
      expect((await hostConfig(id)).BlkioWeight).toBe(300);
    } else {
      expect(r.stderr).toContain(
        'WARNING: Your kernel does not support Block I/O weight or the cgroup is not mounted. Weight discarded.',
      );
      expect((await hostConfig(id)).BlkioWeight).toBe(0);
    }
  });

  it("warns as dockerd of what it keeps without effect, and refuses dockerd's refusals in its words", async () => {
    const create = (HostConfig: Record<string, unknown>) =>
      ctx.daemon.request('POST', '/containers/create', { body: { Image: ctx.env.busybox, HostConfig } });
    const kept = await create({ KernelMemory: 10 * MB, CpuPercent: 50, CpuCount: 2, OomKillDisable: true });
    expect(kept.status, kept.text).toBe(201);
    expect(kept.json.Warnings).toEqual([
      'Specifying a kernel memory limit is deprecated and will be removed in a future release.',
      'OOM killer is disabled for the container, but no memory limit is set, this can result in the system running out of resources.',
      'linux does not support CPU percent. Percent discarded.',
    ]);
    // CpuCount is Windows': dockerd keeps it on Linux and does nothing with it; CpuPercent is discarded.
    expect(await hostConfig(kept.json.Id)).toMatchObject({ KernelMemory: 10 * MB, CpuCount: 2, CpuPercent: 0 });
    for (const [host, message] of [
      [{ CpuPeriod: 500 }, 'CPU cfs period can not be less than 1ms (i.e. 1000) or larger than 1s (i.e. 1000000)'],
      [{ CpuQuota: 999 }, 'CPU cfs quota can not be less than 1ms (i.e. 1000)'],
      [{ NanoCpus: 1e9, CpuQuota: 50_000 }, 'Conflicting options: Nano CPUs and CPU Quota cannot both be set'],
      [{ NanoCpus: 1e9, CpuPeriod: 50_000 }, 'Conflicting options: Nano CPUs and CPU Period cannot both be set'],
      [{ MemoryReservation: 1000 }, 'Minimum memory reservation allowed is 6MB'],
      [
        { Memory: 16 * MB, MemoryReservation: 32 * MB },
        'Minimum memory limit can not be less than memory reservation limit, see usage',
      ],
      [{ CpusetMems: 'x' }, 'Invalid value x for cpuset mems: invalid format: x'],
      [{ CpusetMems: '4095' }, /^Requested memory nodes are not available - requested 4095, available: /],
      [{ IOMaximumIOps: 5 }, 'Invalid QoS settings: linux does not support configuration of maximum IOPs'],
      [{ CgroupnsMode: 'bad' }, 'invalid cgroup namespace mode: bad'],
    ] as const) {
      const r = await create(host);
      expect(r.status, JSON.stringify(host)).toBe(400);
      expect(r.json.message).toMatch(message);
    }
  });
});

describe('CgroupParent', () => {
  const top = `berth-test-kubepods-${process.pid}`;
  afterAll(() => {
    // What dockerd leaves too: the parents runc made. The test takes its own away.
    for (const h of hierarchies()) {
      for (const base of new Set([path.join(CG, h, top), path.join(CG, h, ownCgroup(h), top)])) {
        if (!existsSync(base)) continue;
        for (const dir of [`${base}/besteffort/pod1`, `${base}/besteffort`, base]) rmdirSync(dir);
      }
    }
  });

  it('puts a nested parent that does not exist yet in every hierarchy; stats, top and update follow it; rm leaves only the parents', async () => {
    const parent = `/${top}/besteffort/pod1`;
    const id = await run(['--cgroup-parent', parent, '--memory', '64m']);
    const lines = (await exec(id, 'cat', '/proc/self/cgroup')).split('\n');
    expect(lines.length).toBeGreaterThan(1);
    for (const l of lines) expect(l).toMatch(new RegExp(`:${parent}/${id}$`));
    for (const h of hierarchies()) expect(existsSync(path.join(CG, h, parent, id)), h).toBe(true);
    expect((await hostConfig(id)).CgroupParent).toBe(parent);

    // stats reads its memory cgroup (the limit is the container's), top its processes.
    expect(await memoryLimit(id)).toBe(64 * MB);
    const ps = await docker().ok(['top', id]);
    expect(ps).toMatch(/sleep 300/);
    await docker().ok(['update', '--cpu-quota', '30000', id]);
    expect(readFileSync(path.join(CG, 'cpu', parent, id, 'cpu.cfs_quota_us'), 'utf8').trim()).toBe('30000');

    await docker().ok(['rm', '-f', id]);
    for (const h of hierarchies()) {
      expect(existsSync(path.join(CG, h, parent, id)), h).toBe(false);
      expect(existsSync(path.join(CG, h, parent)), h).toBe(true);
    }
  });

  it('sees the OOM kill of a container under it', async () => {
    const r = await docker()([
      'run',
      '--name',
      `oom-${process.pid}`,
      '--memory',
      '8m',
      '--memory-swap',
      '8m',
      '--cgroup-parent',
      `/${top}/besteffort/pod1`,
      ctx.env.busybox,
      'sh',
      '-c',
      'a=$(head -c 60000000 /dev/zero | tr "\\0" a); echo ${#a}',
    ]);
    expect(r.code).toBe(137);
    const state = (await ctx.daemon.request('GET', `/containers/oom-${process.pid}/json`)).json.State;
    expect(state).toMatchObject({ OOMKilled: true, ExitCode: 137 });
    await docker().ok(['rm', `oom-${process.pid}`]);
  });

  it("takes a relative parent from berthd's own cgroup in each hierarchy, as runc does", async () => {
    const id = await run(['--cgroup-parent', `${top}/besteffort/pod1`, '--memory', '48m']);
    for (const l of (await exec(id, 'cat', '/proc/self/cgroup')).split('\n')) {
      expect(l).toMatch(new RegExp(`/${top}/besteffort/pod1/${id}$`));
    }
    for (const h of hierarchies()) {
      expect(existsSync(path.join(CG, h, ownCgroup(h), top, 'besteffort/pod1', id)), h).toBe(true);
    }
    expect(await memoryLimit(id)).toBe(48 * MB);
    await docker().ok(['rm', '-f', id]);
  });
});

describe("the daemon's --cgroup-parent", () => {
  // Nomad's docker driver finds a container's cgroup as dockerd's default makes it (/docker/<id>)
  // for its cpuset management: berthd run with --cgroup-parent /docker puts it there.
  const parent = `/berth-test-daemon-parent-${process.pid}`;
  let d: Daemon | undefined;
  afterAll(async () => {
    if (d) {
      await removeAllContainers(d);
      await d.cleanup();
    }
    for (const h of hierarchies()) if (existsSync(path.join(CG, h, parent))) rmdirSync(path.join(CG, h, parent));
  });

  it('puts a container that names no parent under it in every hierarchy; its own CgroupParent still wins', async () => {
    d = await startDaemon({ args: ['--cgroup-parent', parent] });
    await pull(d, ctx.env.busybox);
    const start = async (host: Record<string, unknown>) => {
      const c = await d!.request('POST', '/containers/create', {
        body: { Image: ctx.env.busybox, Cmd: ['sleep', '300'], HostConfig: { Memory: 40 * MB, ...host } },
      });
      expect(c.status, c.text).toBe(201);
      expect((await d!.request('POST', `/containers/${c.json.Id}/start`)).status).toBe(204);
      return c.json.Id as string;
    };
    const id = await start({});
    for (const h of hierarchies()) expect(existsSync(path.join(CG, h, parent, id)), h).toBe(true);
    // As dockerd: the daemon's parent is not the container's setting.
    const inspect = (await d.request('GET', `/containers/${id}/json`)).json;
    expect(inspect.HostConfig.CgroupParent).toBe('');
    // stats and top read the cgroup where it is.
    expect((await d.request('GET', `/containers/${id}/stats?stream=0`)).json.memory_stats.limit).toBe(40 * MB);
    expect(JSON.stringify((await d.request('GET', `/containers/${id}/top`)).json.Processes)).toMatch(/sleep 300/);

    const own = `${parent}/own`;
    const other = await start({ CgroupParent: own });
    for (const h of hierarchies()) expect(existsSync(path.join(CG, h, own, other)), h).toBe(true);
    await removeAllContainers(d);
    for (const h of hierarchies()) if (existsSync(path.join(CG, h, own))) rmdirSync(path.join(CG, h, own));
  });
});

describe('a CgroupParent that climbs', () => {
  it('stays inside the hierarchies, cleaned as runc cleans it (moby TestRunInvalidCgroupParent)', async () => {
    const name = `BERTH_SHOULD_NOT_EXIST_${process.pid}`;
    try {
      for (const parent of [`../../../../../../../../${name}`, `/../../../../../../../../${name}`]) {
        const id = await run(['--cgroup-parent', parent]);
        for (const l of (await exec(id, 'cat', '/proc/self/cgroup')).split('\n')) {
          expect(l).toMatch(new RegExp(`/${name}/${id}$`));
        }
        await docker().ok(['rm', '-f', id]);
      }
      expect(existsSync(`/${name}`)).toBe(false);
    } finally {
      for (const h of hierarchies()) {
        for (const dir of new Set([path.join(CG, h, name), path.join(CG, h, ownCgroup(h), name)])) {
          if (existsSync(dir)) rmdirSync(dir);
        }
      }
    }
  });
});

describe('CgroupnsMode', () => {
  it('private gives the container a cgroup namespace of its own, where its cgroup is the root', async () => {
    const id = await run(['--cgroupns', 'private']);
    expect(await exec(id, 'readlink', '/proc/1/ns/cgroup')).not.toBe(readlinkSync('/proc/self/ns/cgroup'));
    for (const l of (await exec(id, 'cat', '/proc/self/cgroup')).split('\n')) expect(l).toMatch(/:\/$/);
    expect((await hostConfig(id)).CgroupnsMode).toBe('private');
    const host = await run(['--cgroupns', 'host']);
    expect(await exec(host, 'readlink', '/proc/1/ns/cgroup')).toBe(readlinkSync('/proc/self/ns/cgroup'));
  });
});

describe('the Python SDK', () => {
  it('runs with cpu_quota, mem_reservation and cgroup_parent, and updates cpu_quota', async () => {
    const { values, result } = await runPython(
      ctx.daemon,
      `
c = client.containers.run(${JSON.stringify(ctx.env.busybox)}, ["sleep", "300"], detach=True,
    cpu_period=100000, cpu_quota=25000, mem_reservation="16m", cgroup_parent="/berth-py-${process.pid}")
emit('quota', c.exec_run(["cat", "/sys/fs/cgroup/cpu/cpu.cfs_quota_us"]).output)
emit('reservation', c.exec_run(["cat", "/sys/fs/cgroup/memory/memory.soft_limit_in_bytes"]).output)
emit('cgroup', c.exec_run(["grep", "memory", "/proc/self/cgroup"]).output)
emit('update', c.update(cpu_quota=-1))
emit('lifted', c.exec_run(["cat", "/sys/fs/cgroup/cpu/cpu.cfs_quota_us"]).output)
c.reload()
emit('host', {k: c.attrs['HostConfig'][k] for k in ['CpuPeriod', 'CpuQuota', 'MemoryReservation', 'CgroupParent']})
emit('id', c.id)
c.remove(force=True)
`,
    );
    expect(result.code, result.stderr).toBe(0);
    expect(values.quota).toEqual({ bytes: '25000\n' });
    expect(values.reservation).toEqual({ bytes: `${16 * MB}\n` });
    expect(values.cgroup.bytes).toMatch(new RegExp(`^\\d+:memory:/berth-py-${process.pid}/${values.id}\\n$`));
    expect(values.update).toEqual({ Warnings: null });
    expect(values.lifted).toEqual({ bytes: '-1\n' });
    expect(values.host).toEqual({
      CpuPeriod: 100_000,
      CpuQuota: -1,
      MemoryReservation: 16 * MB,
      CgroupParent: `/berth-py-${process.pid}`,
    });
    for (const h of hierarchies()) {
      const dir = path.join(CG, h, `berth-py-${process.pid}`);
      if (existsSync(dir)) rmdirSync(dir);
    }
  });
});
