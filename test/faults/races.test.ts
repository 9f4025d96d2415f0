// A container's exit races every verb that acts on a running container: the
// process can end between berthd's look at its state and the signal. Whatever
// comes first, a forced removal removes, a stop stops, and a container whose
// monitor died can still be stopped and removed.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { waitFor } from '../harness/daemon.js';
import { useEnv } from '../harness/env.js';
import { expectNoLeaks, holdings } from '../harness/leaks.js';

const ctx = useEnv();

async function run(cmd: string[]): Promise<string> {
  const d = ctx.daemon;
  const c = await d.request('POST', '/containers/create', { body: { Image: ctx.env.busybox, Cmd: cmd } });
  expect(c.status, c.text).toBe(201);
  const s = await d.request('POST', `/containers/${c.json.Id}/start`);
  expect(s.status, s.text).toBe(204);
  return c.json.Id as string;
}

/** Short-lived containers, each acted on around the moment it exits. */
async function aroundExits(act: (id: string) => Promise<void>): Promise<void> {
  const sleeps = Array.from({ length: 16 }, (_, i) => (i % 8) * 0.01);
  for (let i = 0; i < sleeps.length; i += 4) {
    await Promise.all(
      sleeps.slice(i, i + 4).map(async (s) => {
        const id = await run(s ? ['sleep', String(s)] : ['true']);
        await act(id);
      }),
    );
  }
}

// Each case runs 16 containers: room for a loaded machine.
describe('a container exiting while it is acted on', { timeout: 180_000 }, () => {
  it('a forced removal always removes', async () => {
    const before = holdings(ctx.daemon);
    await aroundExits(async (id) => {
      const r = await ctx.daemon.request('DELETE', `/containers/${id}?force=1`);
      expect(r.status, r.text).toBe(204);
      expect((await ctx.daemon.request('GET', `/containers/${id}/json`)).status).toBe(404);
    });
    await expectNoLeaks(ctx.daemon, before);
  });

  it('a stop answers 204 or 304, and leaves the container exited', async () => {
    await aroundExits(async (id) => {
      const r = await ctx.daemon.request('POST', `/containers/${id}/stop?t=1`);
      expect([204, 304], r.text).toContain(r.status);
      const state = (await ctx.daemon.request('GET', `/containers/${id}/json`)).json.State;
      expect(state.Status).toBe('exited');
      await ctx.daemon.request('DELETE', `/containers/${id}`);
    });
  });

  it("a kill answers 204, or 409 with dockerd's words, never anything else", async () => {
    await aroundExits(async (id) => {
      const r = await ctx.daemon.request('POST', `/containers/${id}/kill`);
      if (r.status !== 204) {
        expect(r.status, r.text).toBe(409);
        expect(r.json.message).toMatch(/is not running/);
      }
      await waitFor(
        async () => (await ctx.daemon.request('GET', `/containers/${id}/json`)).json.State.Status === 'exited',
        'the exit',
      );
      await ctx.daemon.request('DELETE', `/containers/${id}`);
    });
  });

  it('a restart starts the container again whichever came first', async () => {
    await aroundExits(async (id) => {
      const r = await ctx.daemon.request('POST', `/containers/${id}/restart?t=1`);
      expect(r.status, r.text).toBe(204);
      const r2 = await ctx.daemon.request('DELETE', `/containers/${id}?force=1`);
      expect(r2.status, r2.text).toBe(204);
    });
  });
});

describe('a container whose conmon died', () => {
  it('is stopped and removed all the same, with an exit recorded', async () => {
    const d = ctx.daemon;
    const id = await run(['sleep', '600']);
    const conmon = Number(readFileSync(path.join(d.dataRoot, 'containers', id, 'conmon.pid'), 'utf8'));
    process.kill(conmon, 'SIGKILL');
    const r = await d.request('POST', `/containers/${id}/stop?t=0`);
    expect(r.status, r.text).toBe(204);
    const state = (await d.request('GET', `/containers/${id}/json`)).json.State;
    expect(state).toMatchObject({ Status: 'exited', Running: false, ExitCode: 255 });
    expect(state.Error).toMatch(/conmon/);
    expect((await d.request('DELETE', `/containers/${id}`)).status).toBe(204);
  });
});
