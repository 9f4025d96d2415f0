// CPU real-time scheduling through the API, on cgroup v1 with real-time group
// scheduling (this host): HostConfig.CpuRealtimePeriod and CpuRealtimeRuntime
// applied to the container's cgroup within the budget berthd gives the
// containers' parent (--cpu-rt-period, --cpu-rt-runtime, as dockerd's), the
// container's processes then allowed a real-time policy; dockerd's refusals,
// and its failed start when the parent has no budget.
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, rmdirSync, writeFileSync } from 'node:fs';
import { afterAll, describe, expect, it } from 'vitest';
import { waitFor } from '../harness/daemon.js';
import { removeAllContainers, startEnv, useEnv } from '../harness/env.js';

/** A container's cgroup is /berth/<id> unless it names a CgroupParent (cgroups.ts); this is their parent in the cpu hierarchy. */
const PARENT = '/sys/fs/cgroup/cpu/berth';
const BUDGET = 200_000;
const supported = existsSync('/sys/fs/cgroup/cpu/cpu.rt_period_us');

const rtRuntime = (dir: string) => Number(readFileSync(`${dir}/cpu.rt_runtime_us`, 'utf8'));

/** The containers' cgroups under the parent that hold a real-time budget of their own. */
const budgetedChildren = () =>
  readdirSync(PARENT, { withFileTypes: true })
    .filter((e) => e.isDirectory() && rtRuntime(`${PARENT}/${e.name}`) > 0)
    .map((e) => e.name);

/** Sets a process to SCHED_FIFO from the host, as a user would; the error of chrt when the kernel refuses. */
function makeFifo(pid: number): string {
  try {
    execFileSync('chrt', ['-f', '-p', '10', String(pid)], { stdio: 'pipe' });
    return execFileSync('chrt', ['-p', String(pid)], { encoding: 'utf8' });
  } catch (e) {
    return String((e as { stderr?: Buffer }).stderr ?? e);
  }
}

describe.skipIf(!supported)('real-time scheduling', () => {
  const ctx = useEnv({ args: ['--cpu-rt-period', '1000000', '--cpu-rt-runtime', String(BUDGET)] });
  // The parent is shared by every berthd on this host: it gets back the budget it had.
  const before = existsSync(PARENT) ? rtRuntime(PARENT) : 0;
  afterAll(async () => {
    await removeAllContainers(ctx.daemon);
    writeFileSync(`${PARENT}/cpu.rt_runtime_us`, String(before));
  });

  const create = async (host: Record<string, unknown>, d = ctx.daemon, image = ctx.env.busybox) => {
    const r = await d.request('POST', '/containers/create', {
      body: {
        Image: image,
        Cmd: ['sh', '-c', 'cat /sys/fs/cgroup/cpu/cpu.rt_runtime_us; sleep 100'],
        HostConfig: host,
      },
    });
    expect(r.status, r.text).toBe(201);
    return r.json.Id as string;
  };

  it("runs a container with real-time runtime within berthd's budget", async () => {
    const d = ctx.daemon;
    const id = await create({ CpuRealtimePeriod: 1_000_000, CpuRealtimeRuntime: 10_000 });
    expect((await d.request('POST', `/containers/${id}/start`)).status).toBe(204);
    expect(rtRuntime(PARENT)).toBe(BUDGET);
    expect(rtRuntime(`${PARENT}/${id}`)).toBe(10_000);
    // Inside, the container's cgroup is the one it sees.
    const logs = async () => (await d.request('GET', `/containers/${id}/logs?stdout=1`)).body.subarray(8).toString();
    expect(await waitFor(logs, 'the first line')).toBe('10000\n');
    const inspect = (await d.request('GET', `/containers/${id}/json`)).json;
    expect(inspect.HostConfig).toMatchObject({ CpuRealtimePeriod: 1_000_000, CpuRealtimeRuntime: 10_000 });
    // What it is for: its processes may run under a real-time policy; a container without runtime's may not.
    expect(makeFifo(inspect.State.Pid)).toMatch(/SCHED_FIFO/);
    const plain = await create({});
    expect((await d.request('POST', `/containers/${plain}/start`)).status).toBe(204);
    const plainPid = (await d.request('GET', `/containers/${plain}/json`)).json.State.Pid;
    expect(makeFifo(plainPid)).toMatch(/Operation not permitted/);
    for (const c of [id, plain]) await d.request('DELETE', `/containers/${c}?force=1`);
  });

  it('gives the budget to every cgroup above a container under a CgroupParent, making those not there yet', async () => {
    const d = ctx.daemon;
    const top = `berth-rt-${process.pid}`;
    const id = await create({ CgroupParent: `/${top}/pod`, CpuRealtimeRuntime: 10_000 });
    try {
      expect((await d.request('POST', `/containers/${id}/start`)).status).toBe(204);
      expect(rtRuntime(`/sys/fs/cgroup/cpu/${top}`)).toBe(BUDGET);
      expect(rtRuntime(`/sys/fs/cgroup/cpu/${top}/pod`)).toBe(BUDGET);
      expect(rtRuntime(`/sys/fs/cgroup/cpu/${top}/pod/${id}`)).toBe(10_000);
    } finally {
      await d.request('DELETE', `/containers/${id}?force=1`);
      // The parents stay, as dockerd leaves them: the test takes its own away.
      await waitFor(() => !existsSync(`/sys/fs/cgroup/cpu/${top}/pod/${id}`), "the container's cgroup to go");
      for (const h of readdirSync('/sys/fs/cgroup')) {
        for (const dir of [`/sys/fs/cgroup/${h}/${top}/pod`, `/sys/fs/cgroup/${h}/${top}`]) {
          if (existsSync(dir)) rmdirSync(dir);
        }
      }
    }
  });

  it('refuses a runtime higher than the period with 400', async () => {
    const r = await ctx.daemon.request('POST', '/containers/create', {
      body: { Image: ctx.env.busybox, HostConfig: { CpuRealtimePeriod: 100_000, CpuRealtimeRuntime: 200_000 } },
    });
    expect([r.status, r.json.message]).toEqual([
      400,
      'cpu real-time runtime cannot be higher than cpu real-time period',
    ]);
  });

  it("fails the start as dockerd's does when the parent has no budget", async () => {
    // Only the daemon with the options gives the parent a budget: take it back, as a host without one.
    await removeAllContainers(ctx.daemon);
    // The kernel refuses (EINVAL) while a child still holds a budget: a removed container's
    // cgroup can outlive its removal's answer by a moment.
    await waitFor(() => budgetedChildren().length === 0, "the removed containers' cgroups to go");
    writeFileSync(`${PARENT}/cpu.rt_runtime_us`, '0');
    const other = await startEnv();
    try {
      const id = await create({ CpuRealtimeRuntime: 10_000 }, other.daemon, other.busybox);
      const s = await other.daemon.request('POST', `/containers/${id}/start`);
      expect(s.status).toBe(500);
      expect(s.json.message).toMatch(
        new RegExp(`^OCI runtime create failed: .*${PARENT}/${id}/cpu\\.rt_runtime_us: invalid argument: unknown$`),
      );
      expect(rtRuntime(PARENT)).toBe(0);
    } finally {
      await other.stop();
    }
  });
});
