// The official Go SDK (Debian's golang-github-docker-docker-dev, API 1.41) with
// API version negotiation against berthd: test/clients/go/main.go, built
// once per run, drives the foreground and background sequences, a pull, and
// health checks, kill signals, execs, PidMode, GroupAdd, DeviceCgroupRules and
// a refused log driver.
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildGoClient, pushFreshImage, type GoClient } from '../harness/clients.js';
import { useEnv } from '../harness/env.js';

const ctx = useEnv();
let go: GoClient;

// A cold build compiles the SDK and its dependencies (about 20 s on two CPUs); later
// runs reuse the Go build cache and take a second or two.
beforeAll(async () => {
  go = await buildGoClient();
}, 300_000);
afterAll(() => go?.cleanup());

const run = async (...args: string[]) => (await go.run(ctx.daemon, args)).out;

describe('the Go SDK', () => {
  it('negotiates the API version down to its own', async () => {
    // The SDK speaks 1.41; berthd offers more, so negotiation keeps 1.41.
    expect((await run('foreground', ctx.env.busybox, 'true')).apiVersion).toBe('1.41');
  });

  it('ContainerCreate → ContainerStart → ContainerWait → ContainerLogs with stdcopy', async () => {
    const out = await run('foreground', ctx.env.busybox, 'echo', 'hello world');
    expect(out).toMatchObject({
      id: expect.stringMatching(/^[0-9a-f]{64}$/),
      // dockerd answers [] when it has nothing to warn of.
      warnings: [],
      statusCode: 0,
      stdout: 'hello world\n',
      stderr: '',
    });
  });

  it('reports the exit code and keeps stderr apart', async () => {
    const out = await run('foreground', ctx.env.busybox, 'sh', '-c', 'echo out; echo err >&2; exit 3');
    expect(out).toMatchObject({ statusCode: 3, stdout: 'out\n', stderr: 'err\n' });
  });

  it('ContainerCreate → ContainerStart → ContainerList → ContainerLogs → ContainerStop', async () => {
    const out = await run('background', ctx.env.busybox, 'go-bg');
    expect(out.listed).toEqual({
      names: ['/go-bg'],
      image: ctx.env.busybox,
      state: 'running',
      status: expect.stringMatching(/^Up /),
    });
    expect(out.stdout).toBe('started\nbye\n');
    expect(out.runningAfterStop).toBe(0);
    expect(out.listedAfterStop).toEqual({ state: 'exited', status: expect.stringMatching(/^Exited \(0\) /) });
    expect(out.exitCode).toBe(0);
  });

  it('ImagePull reads the progress stream to its end; ImageList lists the image', async () => {
    const { ref, digest } = await pushFreshImage(ctx.env.registry, 'go-pull');
    const out = await run('pull', ref);
    expect(out.statuses).toContain('Pull complete');
    expect(out.statuses.slice(-2)).toEqual([`Digest: ${digest}`, `Status: Downloaded newer image for ${ref}`]);
    expect(out.repoTags).toEqual(expect.arrayContaining([ref, ctx.env.busybox]));
  });

  it('Healthcheck: inspect shows healthy, or unhealthy with the failing streak and the log', async () => {
    const out = await run('health', ctx.env.busybox);
    expect(out.healthy).toMatchObject({ Status: 'healthy', FailingStreak: 0 });
    expect(out.healthy.Log.at(-1)).toMatchObject({ ExitCode: 0, Output: 'ok\n' });
    expect(out.unhealthy.Status).toBe('unhealthy');
    expect(out.unhealthy.FailingStreak).toBeGreaterThanOrEqual(2);
    expect(out.unhealthy.Log.at(-1)).toMatchObject({ ExitCode: 3, Output: 'bad\n' });
    // The SDK parsed the times: dockerd's RFC 3339 came through as times, not zero values.
    expect(Date.parse(out.unhealthy.Log.at(-1).End)).toBeGreaterThan(Date.parse('2000-01-01'));
  });

  it('ContainerKill: SIGKILL leaves it exited 137; SIGTERM reaches a trap', async () => {
    const out = await run('kill', ctx.env.busybox);
    expect(out.killed).toEqual({ status: 'exited', running: false, exitCode: 137 });
    expect(out.trapped).toEqual({ statusCode: 42, stdout: 'ready\ngot TERM\n' });
  });

  // Docker 27 (API 1.47) records 126 for any exec that cannot start, a missing command included.
  it('ContainerExecAttach: a TTY ends lines with \\r\\n; a command that cannot start exits 126', async () => {
    const out = await run('exec', ctx.env.busybox);
    expect(out.tty).toEqual({ stdout: 'one\r\ntwo\r\n', stderr: '', exitCode: 0, running: false });
    expect(out.missing).toMatchObject({ exitCode: 126, running: false });
    expect(out.missing.stdout).toMatch(/"no-such-command": executable file not found in \$PATH/);
    expect(out.notExecutable).toMatchObject({ exitCode: 126, running: false });
    expect(out.notExecutable.stdout).toMatch(/permission denied/);
  });

  it("PidMode host: the container's pid 1 is the host's init, not its own command", async () => {
    const out = await run('pidmode', ctx.env.busybox);
    expect(out.host).toMatchObject({
      stdout: `${readFileSync('/proc/1/comm', 'utf8')}`,
      hostConfig: { PidMode: 'host' },
    });
    expect(out.own).toMatchObject({ stdout: 'cat\n', hostConfig: { PidMode: '' } });
  });

  it('GroupAdd: id -G shows the extra groups', async () => {
    const out = await run('groupadd', ctx.env.busybox);
    expect(out.run.stdout.trim().split(' ').sort()).toEqual(['0', '1000', '4242']);
    expect(out.run.hostConfig.GroupAdd).toEqual(['app', '4242']);
  });

  it('DeviceCgroupRules: inspect echoes them; a node is usable only with a rule that allows it', async () => {
    const out = await run('devicerules', ctx.env.busybox);
    // mknod is allowed for any node (dockerd's default rules); opening it is what a rule grants.
    expect(out.allowed).toMatchObject({
      stdout: 'made\nopened\n',
      hostConfig: { DeviceCgroupRules: ['c 10:229 rwm'] },
    });
    expect(out.denied).toMatchObject({ stdout: 'made\nrefused\n', hostConfig: { DeviceCgroupRules: null } });
  });

  it('refuses an unknown log driver with 400 (errdefs.IsInvalidParameter)', async () => {
    const out = await run('logdriver', ctx.env.busybox);
    expect(out).toMatchObject({
      invalidParameter: true,
      error: "Error response from daemon: logger: no log driver named 'nope' is registered",
    });
  });
});
