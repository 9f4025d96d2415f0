// berthd stops while containers run: they keep running under conmon; crashes
// simulated by hand at moments too short to hit from outside are recovered
// from; restart policies are honoured. Real SIGKILLs in the middle of
// operations, and with containers running, are in test/faults/crash.test.ts.
import Database from '../../src/engine/store/sqlite.js';
import { createHash } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { waitFor, type Daemon } from '../harness/daemon.js';
import { useEnv, type Env } from '../harness/env.js';
import { demuxText } from '../harness/streams.js';

const ctx = useEnv();
let env: Env;
let d: Daemon;
beforeAll(() => {
  ({ env, daemon: d } = ctx);
});

async function start(cmd: string[], hostConfig: Record<string, unknown> = {}): Promise<string> {
  const c = await d.request('POST', '/containers/create', {
    body: { Image: env.busybox, Cmd: cmd, HostConfig: hostConfig },
  });
  expect(c.status, c.text).toBe(201);
  const s = await d.request('POST', `/containers/${c.json.Id}/start`);
  expect(s.status, s.text).toBe(204);
  return c.json.Id;
}
const state = async (id: string) => (await d.request('GET', `/containers/${id}/json`)).json.State;
const logText = async (id: string) => demuxText((await d.request('GET', `/containers/${id}/logs?stdout=1`)).body);

describe('daemon restart', () => {
  it('keeps running containers after a clean SIGTERM shutdown', async () => {
    const id = await start(['sleep', '300']);
    expect(await d.stop()).toBe(0);
    await d.restart();
    expect(await state(id)).toMatchObject({ Status: 'running' });
    expect((await d.request('POST', `/containers/${id}/kill`)).status).toBe(204);
    expect((await d.request('POST', `/containers/${id}/wait`)).json.StatusCode).toBe(137);
  });
});

describe('a removal cut short', () => {
  it('sweeps away the directory, mount and runtime state of a container that is in no record any more', async () => {
    // remove() answers its waiters before the tear-down ends: a crash right then
    // leaves a container's directory with its rootfs mounted and no record of it.
    const id = await start(['sleep', '300']);
    const pid = (await state(id)).Pid as number;
    const dir = path.join(d.dataRoot, 'containers', id);
    const mounted = () => readFileSync('/proc/self/mountinfo', 'utf8').includes(path.join(dir, 'rootfs'));
    expect(mounted()).toBe(true);
    await d.kill();
    process.kill(pid, 'SIGKILL');
    await waitFor(
      () => !existsSync(`/proc/${pid}`) || readFileSync(`/proc/${pid}/stat`, 'utf8').split(' ')[2] === 'Z',
      'the container process to die',
    );
    const db = new Database(path.join(d.dataRoot, 'berth.db'));
    db.prepare('DELETE FROM containers WHERE id = ?').run(id);
    db.close();
    await d.restart();
    expect(existsSync(dir)).toBe(false);
    expect(mounted()).toBe(false);
    expect(existsSync(path.join(d.execRoot, 'runc', id))).toBe(false);
    expect((await d.request('GET', `/containers/${id}/json`)).status).toBe(404);
  });
});

describe('a background deletion cut short', () => {
  it("unmounts, then deletes, a removed container's renamed directory at the next start", async () => {
    // remove() renames a container's directory with its rootfs still mounted and
    // unmounts and deletes it in the background; a crash can leave it at any step.
    await d.stop();
    const doomed = path.join(d.dataRoot, 'containers', '.removing-0123456789abcdef-c0ffee');
    const outside = mkdtempSync(path.join(os.tmpdir(), 'berth-outside-'));
    writeFileSync(path.join(outside, 'precious'), "not the container's\n");
    mkdirSync(path.join(doomed, 'rootfs'), { recursive: true });
    writeFileSync(path.join(doomed, 'config.json'), '{}');
    execFileSync('mount', ['--bind', outside, path.join(doomed, 'rootfs')]);
    await d.restart();
    const mountedThere = readFileSync('/proc/self/mountinfo', 'utf8').includes(doomed);
    if (mountedThere) execFileSync('umount', ['-l', path.join(doomed, 'rootfs')]);
    expect(mountedThere).toBe(false);
    expect(existsSync(doomed)).toBe(false);
    // Unmounted before the deletion: nothing was deleted through the mount.
    expect(readFileSync(path.join(outside, 'precious'), 'utf8')).toBe("not the container's\n");
    rmSync(outside, { recursive: true, force: true });
  });
});

describe('a pull or commit cut short between its blob and its record', () => {
  it('leaves a blob that the next start removes, keeping every blob an image holds', async () => {
    const blobs = path.join(d.dataRoot, 'content/blobs/sha256');
    const held = readdirSync(blobs).sort();
    const orphan = Buffer.from('a blob whose image was never recorded\n');
    const hex = createHash('sha256').update(orphan).digest('hex');
    await d.stop();
    writeFileSync(path.join(blobs, hex), orphan);
    await d.restart();
    expect(readdirSync(blobs).sort()).toEqual(held);
    // The images are whole: a container of one still runs.
    const id = await start(['true']);
    expect((await d.request('POST', `/containers/${id}/wait`)).json.StatusCode).toBe(0);
  });
});

describe('restart policies', () => {
  it('restarts on-failure up to the maximum', async () => {
    const id = await start(['sh', '-c', 'echo run; exit 1'], {
      RestartPolicy: { Name: 'on-failure', MaximumRetryCount: 2 },
    });
    await waitFor(
      async () => {
        const s = await state(id);
        return s.Status === 'exited' && (await d.request('GET', `/containers/${id}/json`)).json.RestartCount === 2;
      },
      'two restarts',
      20_000,
      100,
    );
    expect(await logText(id)).toBe('run\nrun\nrun\n');
  });

  it('does not restart a container the user stopped', async () => {
    const id = await start(['sleep', '300'], { RestartPolicy: { Name: 'always' } });
    await d.request('POST', `/containers/${id}/stop?t=0`);
    await new Promise((r) => setTimeout(r, 500));
    expect(await state(id)).toMatchObject({ Status: 'exited' });
  });

  // moby's TestStopContainerWithRestartPolicyAlways, repeated: a stop that lands while berth is
  // still recording an exit (its json-file log drained first) must end the policy all the same.
  it('does not restart a container stopped while its last exit was being recorded', async () => {
    for (let round = 0; round < 10; round++) {
      const ids = [await start(['false'], { RestartPolicy: { Name: 'always' } })];
      ids.push(await start(['false'], { RestartPolicy: { Name: 'always' } }));
      for (const id of ids)
        await waitFor(async () => ['running', 'restarting'].includes((await state(id)).Status), 'up');
      for (const id of ids) expect((await d.request('POST', `/containers/${id}/stop`)).status).toBeLessThan(400);
      for (const id of ids) {
        await waitFor(async () => (await state(id)).Status === 'exited', `round ${round}: ${id} stopped`, 5000);
      }
      for (const id of ids) await d.request('DELETE', `/containers/${id}?force=1`);
    }
  });

  // moby's TestKillWithStopSignalAndRestartPolicies, widened to the table dockerd 20.10 showed: a
  // kill ends the policy only with the container's StopSignal, SIGKILL, or any signal when the
  // container has no StopSignal of its own; every kill ends unless-stopped.
  const trapping = ['sh', '-c', 'trap "exit 3" USR1 TERM HUP; echo ready; while :; do sleep 0.1; done'];
  it.each([
    ['always', undefined, 'SIGUSR1', false],
    ['always', 'SIGTERM', 'SIGUSR1', true],
    ['always', 'SIGTERM', 'TERM', false],
    ['always', 'USR1', 'SIGTERM', true],
    ['always', 'USR1', '10', false],
    ['always', 'SIGTERM', 'SIGKILL', false],
    ['unless-stopped', 'SIGTERM', 'SIGUSR1', false],
    ['on-failure', 'SIGTERM', 'SIGHUP', true],
    ['on-failure', undefined, 'SIGHUP', false],
  ] as const)('policy %s, StopSignal %s, kill with %s: restarted %s', async (policy, stopSignal, signal, restarted) => {
    const c = await d.request('POST', '/containers/create', {
      body: {
        Image: env.busybox,
        Cmd: trapping,
        StopSignal: stopSignal,
        HostConfig: { RestartPolicy: { Name: policy } },
      },
    });
    expect(c.status, c.text).toBe(201);
    const id = c.json.Id as string;
    expect((await d.request('POST', `/containers/${id}/start`)).status).toBe(204);
    await waitFor(async () => (await logText(id)).includes('ready'), 'the trap set');
    expect((await d.request('POST', `/containers/${id}/kill?signal=${signal}`)).status).toBe(204);
    // Once the exit is recorded the container is either exited for good or restarting (or
    // restarted already): no wait for something not to happen.
    const after = await waitFor(async () => {
      const j = (await d.request('GET', `/containers/${id}/json`)).json;
      return j.State.Status !== 'running' || j.RestartCount > 0 ? j : undefined;
    }, 'the exit recorded');
    expect(
      after.State.Status === 'exited' ? false : after.RestartCount > 0 || after.State.Status === 'restarting',
    ).toBe(restarted);
    if (!restarted) expect(after.State.ExitCode).toBe(signal === 'SIGKILL' ? 137 : 3);
    await d.request('DELETE', `/containers/${id}?force=1`);
  });

  it('a kill that ends the policy thaws a paused container, which then acts on the signal', async () => {
    const id = await start(['sh', '-c', 'trap "exit 3" TERM; echo ready; while :; do sleep 0.1; done']);
    await waitFor(async () => (await logText(id)).includes('ready'), 'the trap set');
    expect((await d.request('POST', `/containers/${id}/pause`)).status).toBe(204);
    expect((await d.request('POST', `/containers/${id}/kill?signal=TERM`)).status).toBe(204);
    // Left frozen, its trap would never run and the wait would not answer.
    expect((await d.request('POST', `/containers/${id}/wait`)).json.StatusCode).toBe(3);
    await d.request('DELETE', `/containers/${id}`);
  });

  it('a kill while the policy waits to restart the container ends the restart', async () => {
    const id = await start(['sh', '-c', 'exit 1'], { RestartPolicy: { Name: 'always' } });
    // From the fourth restart on the back-off is over a second: time to find it restarting.
    await waitFor(
      async () => {
        const j = (await d.request('GET', `/containers/${id}/json`)).json;
        return j.State.Status === 'restarting' && j.RestartCount >= 4;
      },
      'a restart pending',
      30_000,
      20,
    );
    const k = await d.request('POST', `/containers/${id}/kill`);
    expect(k.status, k.text).toBe(204);
    // (137 if the restart won the race to the kill: the kill then ends the new run.)
    expect(await state(id)).toMatchObject({ Status: 'exited', ExitCode: expect.toBeOneOf([1, 137]) });
    await d.request('DELETE', `/containers/${id}`);
  });

  it('refuses an unknown policy', async () => {
    const c = await d.request('POST', '/containers/create', {
      body: { Image: env.busybox, HostConfig: { RestartPolicy: { Name: 'sometimes' } } },
    });
    expect(c.status).toBe(400);
  });
});

describe('events', () => {
  it('streams container and image events with filters, since and until', async () => {
    const since = (Date.now() / 1000).toFixed(3);
    const id = await start(['true']);
    await d.request('POST', `/containers/${id}/wait`);
    await d.request('DELETE', `/containers/${id}`);
    const until = ((Date.now() + 200) / 1000).toFixed(3);
    const r = await d.request(
      'GET',
      `/events?since=${since}&until=${until}&filters=${encodeURIComponent(JSON.stringify({ container: [id] }))}`,
    );
    expect(r.status).toBe(200);
    const evs = r.text
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(evs.map((e) => e.Action)).toEqual(['create', 'start', 'die', 'destroy']);
    expect(evs[2]).toMatchObject({
      Type: 'container',
      status: 'die',
      id,
      Actor: { ID: id, Attributes: { exitCode: '0', image: env.busybox } },
    });
    const bad = await d.request('GET', `/events?filters=${encodeURIComponent('{"nope":["x"]}')}`);
    expect(bad.status).toBe(400);
  });
});
