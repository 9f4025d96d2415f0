// A deep exec root (testcontainers-node puts berth's under its own temp
// folder) must not cost a byte of output: conmon's attach sockets sit under
// it, and a unix socket path is limited to 108 bytes. Paths no socket could
// ever be bound at are refused when berthd starts.
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dockerCli } from '../harness/cli.js';
import { BERTHD } from '../harness/daemon.js';
import { useEnv } from '../harness/env.js';
import { demuxText } from '../harness/streams.js';

const base = mkdtempSync(path.join(os.tmpdir(), 'berth-long-'));
// With a 64-hex id and /attach after it, any exec root past 28 bytes puts the socket over the limit.
const execRoot = path.join(base, 'an-exec-root-as-deep-as-a-test-framework-makes-it', 'exec');
mkdirSync(path.dirname(execRoot), { recursive: true });
const ctx = useEnv({ execRoot });
afterAll(() => rmSync(base, { recursive: true, force: true }));

describe('an exec root far past the socket path limit', () => {
  beforeAll(() => {
    expect(path.join(execRoot, 'conmon', 'f'.repeat(64), 'attach').length).toBeGreaterThan(108);
  });

  it('docker run prints what the container prints', async () => {
    const r = await dockerCli(ctx.daemon)(['run', '--rm', ctx.env.busybox, 'sh', '-c', 'echo out; echo err >&2']);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toBe('out\n');
    expect(r.stderr).toBe('err\n');
  });

  it('an exec answers with its output', async () => {
    const d = ctx.daemon;
    const c = await d.request('POST', '/containers/create', { body: { Image: ctx.env.busybox, Cmd: ['sleep', '60'] } });
    expect(c.status).toBe(201);
    expect((await d.request('POST', `/containers/${c.json.Id}/start`)).status).toBe(204);
    const x = await d.request('POST', `/containers/${c.json.Id}/exec`, {
      body: { Cmd: ['echo', 'from exec'], AttachStdout: true, AttachStderr: true },
    });
    const out = await d.request('POST', `/exec/${x.json.Id}/start`, { body: { Detach: false, Tty: false } });
    expect(out.status).toBe(200);
    expect(demuxText(out.body)).toBe('from exec\n');
    await d.request('DELETE', `/containers/${c.json.Id}?force=1`);
  });
});

describe('paths that cannot work', () => {
  it('a socket path over the limit is refused at start with the reason', () => {
    const socket = path.join(base, 'x'.repeat(120), 'berth.sock');
    const r = spawnSync(
      process.execPath,
      [
        BERTHD,
        '-H',
        `unix://${socket}`,
        '--data-root',
        path.join(base, 'd'),
        '--exec-root',
        path.join(base, 'e'),
        '--config-file',
        '/dev/null',
        // Nothing on the host's network from a daemon that is to fail its start.
        '--bridge',
        'none',
        '--iptables=false',
      ],
      {
        encoding: 'utf8',
        timeout: 20_000,
      },
    );
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(/unix socket path .* is \d+ bytes long; the limit is 107/);
  });
});
