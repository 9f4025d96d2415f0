// Health checks through the API, as dockerd runs them: State.Health in
// inspect (starting, healthy, unhealthy, the failing streak, the last five
// results), the list's Status and its health filter, health_status events,
// NONE and the image's check, a check past its timeout, and the checks'
// lifecycle (stop, pause, berthd's restart).
import { readdir } from 'node:fs/promises';
import path from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { waitFor, type Daemon } from '../harness/daemon.js';
import { pull, removeAllContainers, useEnv, type Env } from '../harness/env.js';
import { busyboxImage, pushImage } from '../harness/images.js';

const ctx = useEnv();
let env: Env;
let d: Daemon;
beforeAll(() => {
  ({ env, daemon: d } = ctx);
});

const MS = 1_000_000;
const q = (v: unknown) => encodeURIComponent(JSON.stringify(v));

async function create(body: Record<string, unknown>): Promise<string> {
  const c = await d.request('POST', '/containers/create', {
    body: { Image: env.busybox, Cmd: ['sleep', '300'], ...body },
  });
  expect(c.status, c.text).toBe(201);
  return c.json.Id;
}

async function run(body: Record<string, unknown>): Promise<string> {
  const id = await create(body);
  const s = await d.request('POST', `/containers/${id}/start`);
  expect(s.status, s.text).toBe(204);
  return id;
}

/** A container checked every 100 ms with `test`. */
const checked = (test: string[], more: Record<string, unknown> = {}) =>
  run({ Healthcheck: { Test: test, Interval: 100 * MS, ...more } });

const inspect = async (id: string) => (await d.request('GET', `/containers/${id}/json`)).json;
const health = async (id: string) => (await inspect(id)).State.Health;

/** Waits until the container's health satisfies `ok`; resolves with it. */
const healthWhen = (id: string, ok: (h: any) => boolean, what: string) =>
  waitFor(async () => {
    const h = await health(id);
    return h && ok(h) ? h : undefined;
  }, what);

const listed = async (filters: Record<string, string[]>) => {
  const r = await d.request('GET', `/containers/json?all=1&filters=${q(filters)}`);
  expect(r.status, r.text).toBe(200);
  return r.json as { Id: string; Status: string }[];
};

const RFC3339_NANO = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?Z$/;

describe('a container with a health check', () => {
  it('goes from starting to healthy, logging each result', async () => {
    const id = await checked(['CMD-SHELL', 'echo ok; echo err >&2']);
    const h = await healthWhen(id, (x) => x.Status === 'healthy', 'healthy');
    expect(h.FailingStreak).toBe(0);
    const last = h.Log.at(-1);
    expect(last).toMatchObject({ ExitCode: 0, Output: 'ok\nerr\n' });
    expect(last.Start).toMatch(RFC3339_NANO);
    expect(last.End).toMatch(RFC3339_NANO);
    expect(Date.parse(last.End)).toBeGreaterThanOrEqual(Date.parse(last.Start));
  });

  it('becomes unhealthy after Retries failures in a row, keeping the last five results', async () => {
    const id = await checked(['CMD-SHELL', 'echo bad; exit 3'], { Retries: 2 });
    const h = await healthWhen(id, (x) => x.Status === 'unhealthy', 'unhealthy');
    expect(h.FailingStreak).toBeGreaterThanOrEqual(2);
    expect(h.Log.at(-1)).toMatchObject({ ExitCode: 3, Output: 'bad\n' });
    const later = await healthWhen(id, (x) => x.FailingStreak >= 7, 'seven failures');
    expect(later.Log).toHaveLength(5);
    expect(later.Status).toBe('unhealthy');
  });

  it('runs CMD as an argv, with the container environment, user and directory', async () => {
    const id = await run({
      User: 'app',
      WorkingDir: '/tmp',
      Env: ['GREETING=hi there'],
      Healthcheck: { Test: ['CMD', 'sh', '-c', 'echo "$GREETING $(id -un) $(pwd)"'], Interval: 100 * MS },
    });
    const h = await healthWhen(id, (x) => x.Status === 'healthy', 'healthy');
    expect(h.Log.at(-1).Output).toBe('hi there app /tmp\n');
  });

  it('counts a command that cannot start as a failure with the reason', async () => {
    const id = await checked(['CMD', '/no/such/probe'], { Retries: 1 });
    const h = await healthWhen(id, (x) => x.Status === 'unhealthy', 'unhealthy');
    expect(h.Log.at(-1).ExitCode).toBe(-1);
    expect(h.Log.at(-1).Output).toContain('/no/such/probe');
  });

  it('kills a check that outlives its timeout and counts it as failed', async () => {
    const id = await checked(['CMD-SHELL', 'echo started; sleep 600; echo never'], { Timeout: 300 * MS, Retries: 1 });
    const h = await healthWhen(id, (x) => x.Status === 'unhealthy', 'unhealthy');
    expect(h.Log.at(-1)).toMatchObject({
      ExitCode: -1,
      Output: 'Health check exceeded timeout (300ms): started\n',
    });
    await healthWhen(id, (x) => x.FailingStreak >= 3, 'three timeouts');
    // The hung checks are gone from the container, the shell's children too (not left running
    // beside the next ones).
    const top = await d.request('GET', `/containers/${id}/top`);
    expect(top.status, top.text).toBe(200);
    const running = (top.json.Processes as string[][]).filter((p) => p.join(' ').includes('sleep 600'));
    expect(running.length).toBeLessThanOrEqual(1); // at most the next check, never a pile
  });

  it('keeps at most 4096 bytes of output, marking the cut', async () => {
    const id = await checked(['CMD-SHELL', 'head -c 5000 /dev/zero | tr "\\0" x']);
    const h = await healthWhen(id, (x) => x.Status === 'healthy', 'healthy');
    expect(h.Log.at(-1).Output).toBe(`${'x'.repeat(4096)}...`);
  });
});

describe('where the check comes from', () => {
  let image: string;
  beforeAll(async () => {
    const config = { Healthcheck: { Test: ['CMD-SHELL', 'echo from-image'], Interval: 100 * MS, Retries: 4 } };
    await pushImage(env.registry, 'health-image', 'latest', await busyboxImage({ config }));
    image = `${env.registry.host}/health-image:latest`;
    await pull(d, image);
  });

  it("inherits the image's check", async () => {
    const id = await run({ Image: image });
    expect((await inspect(id)).Config.Healthcheck).toEqual({
      Test: ['CMD-SHELL', 'echo from-image'],
      Interval: 100 * MS,
      Retries: 4,
    });
    const h = await healthWhen(id, (x) => x.Status === 'healthy', 'healthy');
    expect(h.Log.at(-1).Output).toBe('from-image\n');
  });

  it('checks at StartInterval and stays starting while failures fall in the start period', async () => {
    // An hour's Interval: only StartInterval can bring these results.
    const config = {
      Healthcheck: {
        Test: ['CMD', 'false'],
        Interval: 3600e9,
        StartPeriod: 3600e9,
        StartInterval: 100 * MS,
        Retries: 1,
      },
    };
    await pushImage(env.registry, 'health-starting', 'latest', await busyboxImage({ config }));
    await pull(d, `${env.registry.host}/health-starting:latest`);
    const id = await run({ Image: `${env.registry.host}/health-starting:latest` });
    const h = await healthWhen(id, (x) => x.Log.length >= 3, 'three results');
    expect(h).toMatchObject({ Status: 'starting', FailingStreak: 0 });
    expect(h.Log.every((r: { ExitCode: number }) => r.ExitCode === 1)).toBe(true);
  });

  it("takes the image's test and settings where the request's are empty or zero", async () => {
    const id = await create({ Image: image, Healthcheck: { Test: [], Timeout: 5e9, Retries: 0 } });
    expect((await inspect(id)).Config.Healthcheck).toEqual({
      Test: ['CMD-SHELL', 'echo from-image'],
      Interval: 100 * MS,
      Timeout: 5e9,
      Retries: 4,
    });
  });

  it('reads StartInterval from API 1.44 on, as dockerd', async () => {
    const healthcheck = async (version: string) => {
      const c = await d.request('POST', `/v${version}/containers/create`, {
        body: { Image: env.busybox, Cmd: ['true'], Healthcheck: { Test: ['CMD', 'true'], StartInterval: 2e9 } },
      });
      expect(c.status, c.text).toBe(201);
      return (await inspect(c.json.Id)).Config.Healthcheck;
    };
    expect(await healthcheck('1.43')).toEqual({ Test: ['CMD', 'true'] });
    expect(await healthcheck('1.44')).toEqual({ Test: ['CMD', 'true'], StartInterval: 2e9 });
  });

  it('runs none with NONE, and a container without a check has no Health', async () => {
    const none = await run({ Image: image, Healthcheck: { Test: ['NONE'] } });
    const plain = await run({});
    for (const id of [none, plain]) {
      const s = (await inspect(id)).State;
      expect(s.Status).toBe('running');
      expect(s).not.toHaveProperty('Health');
    }
    expect((await listed({ id: [plain] }))[0]!.Status).toMatch(/^Up .*(second|minute)s?$/);
    expect((await listed({ health: ['none'] })).map((c) => c.Id)).toEqual(expect.arrayContaining([none, plain]));
  });
});

describe('commit', () => {
  const commit = async (id: string, query = '') => {
    const r = await d.request('POST', `/commit?container=${id}${query}`);
    expect(r.status, r.text).toBe(201);
    return (await d.request('GET', `/images/${r.json.Id}/json`)).json.Config.Healthcheck;
  };

  it("keeps the container's check in the image, and takes a HEALTHCHECK change", async () => {
    const id = await checked(['CMD-SHELL', 'echo committed'], { Retries: 2 });
    expect(await commit(id)).toEqual({ Test: ['CMD-SHELL', 'echo committed'], Interval: 100 * MS, Retries: 2 });
    // A commit pauses the container: as with dockerd, its checks stop meanwhile and then go on.
    await healthWhen(id, (x) => x.Status === 'healthy', 'healthy after the commit');

    // Zero fields of the change come from the container's check, as dockerd's merge.
    const changed = await commit(id, `&changes=${encodeURIComponent('HEALTHCHECK --interval=5s CMD echo changed')}`);
    expect(changed).toEqual({ Test: ['CMD-SHELL', 'echo changed'], Interval: 5e9, Retries: 2 });
    const none = await d.request(
      'POST',
      `/commit?container=${id}&repo=health-none&tag=v1&changes=${encodeURIComponent('HEALTHCHECK NONE')}`,
    );
    expect(none.status, none.text).toBe(201);
    const fromNone = await run({ Image: 'health-none:v1' });
    expect((await inspect(fromNone)).State).not.toHaveProperty('Health');
  });
});

describe('create refuses what dockerd refuses', () => {
  it.each([
    [{ Interval: -1 }, 'Interval in Healthcheck cannot be less than 1ms'],
    [{ Timeout: 999_999 }, 'Timeout in Healthcheck cannot be less than 1ms'],
    [{ StartPeriod: 5 }, 'StartPeriod in Healthcheck cannot be less than 1ms'],
    [{ Retries: -1 }, 'Retries in Healthcheck cannot be negative'],
    [{ Test: ['HTTP', 'localhost'] }, "Unknown healthcheck type 'HTTP' (expected 'CMD', 'CMD-SHELL' or 'NONE')"],
  ])('%j', async (hc, message) => {
    const r = await d.request('POST', '/containers/create', {
      body: { Image: env.busybox, Cmd: ['true'], Healthcheck: { Test: ['CMD', 'true'], ...hc } },
    });
    expect(r.status).toBe(400);
    expect(r.json).toEqual({ message });
  });
});

describe('the list', () => {
  it('shows the health in Status and filters by it', async () => {
    const healthy = await checked(['CMD', 'true']);
    const unhealthy = await checked(['CMD', 'false'], { Retries: 1 });
    const starting = await checked(['CMD', 'false'], { StartPeriod: 3600e9 });
    await healthWhen(healthy, (x) => x.Status === 'healthy', 'healthy');
    await healthWhen(unhealthy, (x) => x.Status === 'unhealthy', 'unhealthy');
    const status = async (id: string) => (await listed({ id: [id] }))[0]!.Status;
    expect(await status(healthy)).toMatch(/^Up .* \(healthy\)$/);
    expect(await status(unhealthy)).toMatch(/^Up .* \(unhealthy\)$/);
    expect(await status(starting)).toMatch(/^Up .* \(health: starting\)$/);

    const ids = async (value: string) => (await listed({ health: [value] })).map((c) => c.Id);
    expect(await ids('healthy')).toContain(healthy);
    expect(await ids('healthy')).not.toContain(unhealthy);
    expect(await ids('unhealthy')).toContain(unhealthy);
    expect(await ids('unhealthy')).not.toContain(healthy);
    expect(await ids('starting')).toEqual(expect.arrayContaining([starting]));
    expect(await ids('starting')).not.toContain(healthy);
    expect(await ids('none')).not.toContain(healthy);

    const bad = await d.request('GET', `/containers/json?filters=${q({ health: ['sick'] })}`);
    expect(bad.status).toBe(400);
    expect(bad.json.message).toBe(
      "invalid filter 'health=sick': invalid value for health (sick): must be one of none, starting, healthy, unhealthy",
    );
  });
});

describe('events', () => {
  it('reports health_status changes and the checks as execs', async () => {
    const since = (Date.now() / 1000).toFixed(3);
    const id = await checked(['CMD', 'true']);
    await healthWhen(id, (x) => x.Status === 'healthy', 'healthy');
    await d.request('POST', `/containers/${id}/kill`);
    await d.request('POST', `/containers/${id}/wait`);
    const until = ((Date.now() + 200) / 1000).toFixed(3);
    const r = await d.request('GET', `/events?since=${since}&until=${until}&filters=${q({ container: [id] })}`);
    expect(r.status).toBe(200);
    const events = r.text
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    const actions = events.map((e) => e.Action as string);
    const healthy = events.find((e) => e.Action === 'health_status: healthy');
    expect(healthy).toMatchObject({ Type: 'container', Actor: { ID: id, Attributes: { image: env.busybox } } });
    expect(actions.filter((a) => a.startsWith('health_status'))).toEqual(['health_status: healthy']);
    // Each check is an exec, as dockerd's: created, started, and its exit.
    expect(actions).toContain('exec_create: true');
    expect(actions).toContain('exec_start: true');
    expect(events.find((e) => e.Action === 'exec_die')?.Actor.Attributes.exitCode).toBe('0');
  });

  it('reports the change to unhealthy', async () => {
    const since = (Date.now() / 1000).toFixed(3);
    const id = await checked(['CMD', 'false'], { Retries: 1 });
    await healthWhen(id, (x) => x.Status === 'unhealthy', 'unhealthy');
    const until = ((Date.now() + 200) / 1000).toFixed(3);
    const filters = q({ container: [id], event: ['health_status: unhealthy'] });
    const r = await d.request('GET', `/events?since=${since}&until=${until}&filters=${filters}`);
    expect(
      r.text
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l).Action),
    ).toEqual(['health_status: unhealthy']);
  });
});

describe('the checks follow the container', () => {
  it('stop when it stops (unhealthy, as dockerd leaves it) and start over when it starts again', async () => {
    await removeAllContainers(d); // the other tests' checks would come and go in the count
    const before = await goroutines();
    const id = await checked(['CMD', 'true']);
    await healthWhen(id, (x) => x.Status === 'healthy', 'healthy');
    expect((await d.request('POST', `/containers/${id}/stop?t=0`)).status).toBe(204);
    const stopped = await health(id);
    expect(stopped.Status).toBe('unhealthy');
    // Nothing of the checks is left waiting: berthd waits on what it did before.
    await waitFor(async () => (await goroutines()) <= before, 'the checks to leave nothing behind');
    await new Promise((r) => setTimeout(r, 500)); // five intervals: no check runs on a stopped container
    expect((await health(id)).Log).toEqual(stopped.Log);

    expect((await d.request('POST', `/containers/${id}/start`)).status).toBe(204);
    const again = await healthWhen(id, (x) => x.Log.length > stopped.Log.length, 'a check after the start');
    expect(again.Log.slice(0, stopped.Log.length)).toEqual(stopped.Log);
    await healthWhen(id, (x) => x.Status === 'healthy', 'healthy again');
  });

  it('give each check its own result, and leave no files behind once they stop', async () => {
    await removeAllContainers(d);
    const id = await checked(['CMD-SHELL', 'cat /tmp/state || exit 3'], { Retries: 1 });
    await healthWhen(id, (x) => x.Status === 'unhealthy', 'unhealthy');
    const x = await d.request('POST', `/containers/${id}/exec`, {
      body: { Cmd: ['sh', '-c', 'echo fine > /tmp/state'] },
    });
    expect(x.status, x.text).toBe(201);
    expect((await d.request('POST', `/exec/${x.json.Id}/start`, { body: { Detach: true } })).status).toBe(200);
    const h = await healthWhen(id, (v) => v.Status === 'healthy', 'healthy');
    expect(h.Log.at(-1)).toMatchObject({ ExitCode: 0, Output: 'fine\n' });
    expect(h.Log.find((r: { ExitCode: number }) => r.ExitCode === 3)?.Output).toMatch(/No such file/);
    expect((await d.request('POST', `/containers/${id}/stop?t=0`)).status).toBe(204);
    // The checks' files (process spec, conmon's sockets and FIFOs) go with them.
    await waitFor(
      async () => (await readdir(path.join(d.execRoot, 'execs')).catch(() => [])).length === 0,
      'no exec files',
    );
  });

  it('skip a paused container', async () => {
    const id = await checked(['CMD', 'true']);
    await healthWhen(id, (x) => x.Status === 'healthy', 'healthy');
    expect((await d.request('POST', `/containers/${id}/pause`)).status).toBe(204);
    const paused = await health(id);
    expect(paused.Status).toBe('unhealthy');
    expect((await listed({ id: [id] }))[0]!.Status).toMatch(/\(Paused\)$/);
    await new Promise((r) => setTimeout(r, 500));
    expect((await health(id)).Log).toEqual(paused.Log);
    expect((await d.request('POST', `/containers/${id}/unpause`)).status).toBe(204);
    await healthWhen(id, (x) => x.Status === 'healthy', 'healthy after the unpause');
  });

  it('resume after berthd restarts, with the results kept', async () => {
    const id = await checked(['CMD-SHELL', 'echo $$'], { Interval: 500 * MS });
    const before = await healthWhen(id, (x) => x.Status === 'healthy', 'healthy');
    expect(await d.stop()).toBe(0);
    await d.restart();
    const after = await health(id);
    expect(after.Log).toContainEqual(before.Log.at(-1));
    const resumed = await healthWhen(
      id,
      (x) => x.Status === 'healthy' && x.Log.length > after.Log.length,
      'a check after the restart',
    );
    expect(resumed.Log.at(-1).ExitCode).toBe(0);
  });
});

/** /info's NGoroutines: what berthd's event loop waits on (timers included). */
async function goroutines(): Promise<number> {
  return (await d.request('GET', '/info')).json.NGoroutines as number;
}
