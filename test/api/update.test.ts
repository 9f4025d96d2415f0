// docker update (POST /containers/{id}/update) through the API, as dockerd
// does it: the limits a running container's cgroups hold change at once, a
// stopped one's at its next start; the restart policy counts from the next
// exit; dockerd's refusals and their words; what berth does not change is
// refused, not taken and dropped. Limits are read from inside the container
// (its cgroup files), as a user would see them.
import { existsSync } from 'node:fs';
import { beforeAll, describe, expect, it } from 'vitest';
import { dockerCli } from '../harness/cli.js';
import { waitFor, type Daemon } from '../harness/daemon.js';
import { useEnv, type Env } from '../harness/env.js';
import { demux } from '../harness/streams.js';

const ctx = useEnv();
let env: Env;
let d: Daemon;
beforeAll(() => {
  ({ env, daemon: d } = ctx);
});

const MB = 1024 * 1024;

async function create(host: Record<string, unknown> = {}, cmd = ['sleep', '300']): Promise<string> {
  const r = await d.request('POST', '/containers/create', { body: { Image: env.busybox, Cmd: cmd, HostConfig: host } });
  expect(r.status, r.text).toBe(201);
  return r.json.Id;
}

async function running(host: Record<string, unknown> = {}): Promise<string> {
  const id = await create(host);
  const s = await d.request('POST', `/containers/${id}/start`);
  expect(s.status, s.text).toBe(204);
  return id;
}

const update = (id: string, body: Record<string, unknown>, version = '') =>
  d.request('POST', `${version}/containers/${id}/update`, { body });

const hostConfig = async (id: string) => (await d.request('GET', `/containers/${id}/json`)).json.HostConfig;

/** A cgroup file of the container, read from inside it (an exec of cat). */
async function cgroupFile(id: string, file: string): Promise<string> {
  const x = await d.request('POST', `/containers/${id}/exec`, {
    body: { Cmd: ['cat', `/sys/fs/cgroup/${file}`], AttachStdout: true, AttachStderr: true },
  });
  const out = await d.request('POST', `/exec/${x.json.Id}/start`, { body: {} });
  return demux(out.body)
    .map(([, t]) => t)
    .join('')
    .trim();
}

describe('docker update of a running container', () => {
  it('changes memory, CPU shares, CPUs, pids and the restart policy, in inspect and in its cgroups', async () => {
    const id = await running({ Memory: 64 * MB, RestartPolicy: { Name: 'always' } });
    // dockerd's default swap limit is twice the memory limit, stored at create.
    expect(await hostConfig(id)).toMatchObject({ Memory: 64 * MB, MemorySwap: 128 * MB });
    const r = await update(id, {
      Memory: 32 * MB,
      CpuShares: 512,
      NanoCpus: 500_000_000,
      PidsLimit: 20,
      RestartPolicy: { Name: 'on-failure', MaximumRetryCount: 3 },
    });
    expect([r.status, r.json]).toEqual([200, { Warnings: null }]);
    expect(await hostConfig(id)).toMatchObject({
      Memory: 32 * MB,
      MemorySwap: 128 * MB,
      CpuShares: 512,
      NanoCpus: 500_000_000,
      PidsLimit: 20,
      RestartPolicy: { Name: 'on-failure', MaximumRetryCount: 3 },
    });
    expect(await cgroupFile(id, 'memory/memory.limit_in_bytes')).toBe(String(32 * MB));
    expect(await cgroupFile(id, 'cpu/cpu.shares')).toBe('512');
    expect(await cgroupFile(id, 'cpu/cpu.cfs_quota_us')).toBe('50000');
    expect(await cgroupFile(id, 'pids/pids.max')).toBe('20');
    // 0 (or any negative value) lifts the pids limit.
    expect((await update(id, { PidsLimit: -1 })).status).toBe(200);
    expect(await cgroupFile(id, 'pids/pids.max')).toBe('max');
    expect((await hostConfig(id)).PidsLimit).toBe(0);
  });

  it('changes the CFS period and quota, the memory reservation and cpuset mems (the docker CLI); -1 lifts the quota', async () => {
    const id = await running();
    const docker = dockerCli(d);
    await docker.ok(['update', '--cpu-period', '50000', '--cpu-quota', '20000', '--memory-reservation', '24m', id]);
    await docker.ok(['update', '--cpuset-mems', '0', id]);
    expect(await cgroupFile(id, 'cpu/cpu.cfs_period_us')).toBe('50000');
    expect(await cgroupFile(id, 'cpu/cpu.cfs_quota_us')).toBe('20000');
    expect(await cgroupFile(id, 'memory/memory.soft_limit_in_bytes')).toBe(String(24 * MB));
    expect(await cgroupFile(id, 'cpuset/cpuset.mems')).toBe('0');
    expect(await hostConfig(id)).toMatchObject({
      CpuPeriod: 50_000,
      CpuQuota: 20_000,
      MemoryReservation: 24 * MB,
      CpusetMems: '0',
    });
    await docker.ok(['update', '--cpu-quota', '-1', id]);
    expect(await cgroupFile(id, 'cpu/cpu.cfs_quota_us')).toBe('-1');
    expect((await hostConfig(id)).CpuQuota).toBe(-1);
  });

  it("answers dockerd's warnings for what the host's cgroups cannot apply, and keeps none of it", async () => {
    const id = await running();
    const r = await update(id, { BlkioWeight: 300, CpuPercent: 30 });
    expect(r.status, r.text).toBe(200);
    const weight = existsSync('/sys/fs/cgroup/blkio/blkio.weight');
    expect(r.json.Warnings).toEqual([
      'linux does not support CPU percent. Percent discarded.',
      ...(weight
        ? []
        : ['Your kernel does not support Block I/O weight or the cgroup is not mounted. Weight discarded.']),
    ]);
    expect(await hostConfig(id)).toMatchObject({ BlkioWeight: weight ? 300 : 0, CpuPercent: 0 });
    if (weight) expect(await cgroupFile(id, 'blkio/blkio.weight')).toBe('300');
  });

  it('is an update event', async () => {
    const id = await running();
    const since = Math.floor(Date.now() / 1000) - 1;
    expect((await update(id, { CpuShares: 256 })).status).toBe(200);
    const until = Math.floor(Date.now() / 1000) + 1;
    const filters = encodeURIComponent(JSON.stringify({ container: [id], event: ['update'] }));
    const events = (await d.request('GET', `/events?since=${since}&until=${until}&filters=${filters}`)).text
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(events).toEqual([expect.objectContaining({ Type: 'container', Action: 'update', id })]);
  });

  it('updates a paused container too', async () => {
    const id = await running({ Memory: 64 * MB });
    expect((await d.request('POST', `/containers/${id}/pause`)).status).toBe(204);
    expect((await update(id, { Memory: 48 * MB })).status).toBe(200);
    expect((await d.request('POST', `/containers/${id}/unpause`)).status).toBe(204);
    expect(await cgroupFile(id, 'memory/memory.limit_in_bytes')).toBe(String(48 * MB));
  });
});

describe('docker update, applied later', () => {
  it('takes effect at its next start', async () => {
    const id = await create({}, ['cat', '/sys/fs/cgroup/memory/memory.limit_in_bytes']);
    expect((await update(id, { Memory: 40 * MB, MemorySwap: 80 * MB })).status).toBe(200);
    expect((await d.request('POST', `/containers/${id}/start`)).status).toBe(204);
    expect((await d.request('POST', `/containers/${id}/wait`)).json.StatusCode).toBe(0);
    const logs = await d.request('GET', `/containers/${id}/logs?stdout=1`);
    expect(demux(logs.body)).toEqual([[1, `${40 * MB}\n`]]);
  });

  it('restarts a container under the policy an update gave it, from its next exit', async () => {
    const id = await create({}, ['sh', '-c', 'sleep 2; exit 3']);
    expect((await d.request('POST', `/containers/${id}/start`)).status).toBe(204);
    expect((await update(id, { RestartPolicy: { Name: 'on-failure', MaximumRetryCount: 2 } })).status).toBe(200);
    await waitFor(async () => {
      const c = (await d.request('GET', `/containers/${id}/json`)).json;
      return c.RestartCount === 2 && c.State.Status === 'exited';
    }, 'two restarts, then exited');
  });
});

describe("docker update's refusals", () => {
  it("refuses what dockerd refuses, in dockerd's words and statuses", async () => {
    const id = await running({ Memory: 64 * MB });
    const tooBig = await update(id, { Memory: 256 * MB });
    expect([tooBig.status, tooBig.json.message]).toEqual([
      409,
      `Cannot update container ${id}: Memory limit should be smaller than already set memoryswap limit, update the memoryswap at the same time`,
    ]);
    expect((await update(id, { Memory: 256 * MB, MemorySwap: 512 * MB })).status).toBe(200);
    const withCpus = await running({ NanoCpus: 1e9 });
    for (const [field, name] of [
      ['CpuQuota', 'CPU Quota'],
      ['CpuPeriod', 'CPU Period'],
    ] as const) {
      const r = await update(withCpus, { [field]: 20_000 });
      expect([r.status, r.json.message]).toEqual([
        409,
        `Cannot update container ${withCpus}: Conflicting options: ${name} cannot be updated as NanoCPUs has already been set`,
      ]);
    }
    const withQuota = await running({ CpuQuota: 20_000 });
    const nano = await update(withQuota, { NanoCpus: 1e9 });
    expect([nano.status, nano.json.message]).toEqual([
      409,
      `Cannot update container ${withQuota}: Conflicting options: Nano CPUs cannot be updated as CPU Quota has already been set`,
    ]);
    const period = await update(id, { CpuPeriod: 100 });
    expect([period.status, period.json.message]).toEqual([
      400,
      'CPU cfs period can not be less than 1ms (i.e. 1000) or larger than 1s (i.e. 1000000)',
    ]);
    const qos = await update(id, { IOMaximumIOps: 3 });
    expect([qos.status, qos.json.message]).toEqual([
      400,
      'Invalid QoS settings: linux does not support Maximum IO Bandwidth or Maximum IO IOps',
    ]);
    const small = await update(id, { Memory: 1024 });
    expect([small.status, small.json.message]).toEqual([400, 'Minimum memory limit allowed is 6MB']);
    const swap = await update(id, { Memory: 64 * MB, MemorySwap: 32 * MB });
    expect([swap.status, swap.json.message]).toEqual([
      400,
      'Minimum memoryswap limit should be larger than memory limit, see usage',
    ]);
    const policy = await update(id, { RestartPolicy: { Name: 'sometimes' } });
    expect([policy.status, policy.json.message]).toEqual([400, "invalid restart policy 'sometimes'"]);
    const missing = await update('no-such-container', { CpuShares: 2 });
    expect([missing.status, missing.json.message]).toEqual([404, 'No such container: no-such-container']);

    const removed = await running({ AutoRemove: true });
    const autoRemove = await update(removed, { RestartPolicy: { Name: 'always' } });
    expect([autoRemove.status, autoRemove.json.message]).toEqual([
      409,
      `Cannot update container ${removed}: Restart policy cannot be updated because AutoRemove is enabled for the container`,
    ]);
    // Nothing of a refused update was kept.
    expect((await hostConfig(id)).Memory).toBe(256 * MB);
  });

  it('refuses what dockerd would keep and berth does not change, takes what dockerd ignores, and the zeros the docker CLI sends', async () => {
    const id = await running();
    const value = 10_000;
    const refused = await update(id, { CpuRealtimeRuntime: value });
    expect([refused.status, refused.json.message]).toEqual([
      400,
      `UpdateConfig.CpuRealtimeRuntime is not supported by berth yet (asked: ${value})`,
    ]);
    // dockerd's update keeps neither (container.UpdateContainer): taken, and nothing changes.
    const before = (await d.request('GET', `/containers/${id}/json`)).json.HostConfig;
    for (const body of [
      { BlkioDeviceReadBps: [{ Path: '/dev/null', Rate: 1 }] },
      { Ulimits: [{ Name: 'nofile', Soft: 10, Hard: 10 }] },
      { OomKillDisable: true },
    ]) {
      const r = await update(id, body);
      expect(r.status, JSON.stringify(body)).toBe(200);
    }
    const after = (await d.request('GET', `/containers/${id}/json`)).json.HostConfig;
    expect([after.BlkioDeviceReadBps, after.Ulimits, after.OomKillDisable]).toEqual([
      before.BlkioDeviceReadBps,
      before.Ulimits,
      before.OomKillDisable,
    ]);
    // The CLI's `docker update --cpu-shares 128`: every other field zero or null.
    const cli = await update(id, {
      BlkioWeight: 0,
      CpuPeriod: 0,
      CpuQuota: 0,
      CpuRealtimePeriod: 0,
      CpuRealtimeRuntime: 0,
      CpuShares: 128,
      CpusetCpus: '',
      CpusetMems: '',
      KernelMemory: 0,
      Memory: 0,
      MemoryReservation: 0,
      MemorySwap: 0,
      NanoCpus: 0,
      PidsLimit: null,
      RestartPolicy: { Name: '', MaximumRetryCount: 0 },
    });
    expect(cli.status, cli.text).toBe(200);
    expect(await cgroupFile(id, 'cpu/cpu.shares')).toBe('128');
  });

  it('reads no PidsLimit from a client older than API 1.40, as dockerd', async () => {
    const id = await running({ PidsLimit: 10 });
    expect((await update(id, { PidsLimit: 30 }, '/v1.39')).status).toBe(200);
    expect((await hostConfig(id)).PidsLimit).toBe(10);
  });
});
