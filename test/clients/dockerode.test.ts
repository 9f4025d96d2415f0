// dockerode (docker-modem over the unix socket) against berthd: the foreground
// and background sequences, demultiplexed logs, pull with followProgress, the
// image list; health checks, kill signals, execs, PidMode, GroupAdd,
// DeviceCgroupRules and a refused log driver.
import Docker from 'dockerode';
import { readFileSync } from 'node:fs';
import { PassThrough } from 'node:stream';
import { beforeAll, describe, expect, it } from 'vitest';
import { pushFreshImage } from '../harness/clients.js';
import { waitFor } from '../harness/daemon.js';
import { useEnv } from '../harness/env.js';

const ctx = useEnv();
let docker: Docker;

beforeAll(() => {
  docker = new Docker({ socketPath: ctx.daemon.socket });
});

/** Splits a multiplexed log stream with docker-modem's demuxStream, as dockerode's users do. */
async function demuxed(stream: NodeJS.ReadableStream): Promise<{ stdout: string; stderr: string }> {
  const out = new PassThrough();
  const err = new PassThrough();
  const text = { stdout: '', stderr: '' };
  out.on('data', (c: Buffer) => (text.stdout += c.toString()));
  err.on('data', (c: Buffer) => (text.stderr += c.toString()));
  const ended = new Promise((resolve, reject) => {
    stream.on('end', resolve);
    stream.on('error', reject);
  });
  docker.modem.demuxStream(stream, out, err);
  await ended;
  return text;
}

/** The whole log so far, read as a followed stream that ends by itself once the container has stopped. */
const logsOf = async (c: Docker.Container) => demuxed(await c.logs({ stdout: true, stderr: true, follow: true }));

describe('the foreground sequence', () => {
  it('create → start → wait → logs', async () => {
    const c = await docker.createContainer({ Image: ctx.env.busybox, Cmd: ['echo', 'hello world'] });
    expect(c.id).toMatch(/^[0-9a-f]{64}$/);
    await c.start();
    expect(await c.wait()).toEqual({ StatusCode: 0, Error: null });
    expect(await logsOf(c)).toEqual({ stdout: 'hello world\n', stderr: '' });
    // Without follow, dockerode hands back the raw multiplexed bytes.
    const raw = (await c.logs({ stdout: true })) as unknown as Buffer;
    expect(raw).toEqual(Buffer.concat([Buffer.from([1, 0, 0, 0, 0, 0, 0, 12]), Buffer.from('hello world\n')]));
  });

  it('reports the exit code and keeps stderr apart', async () => {
    const c = await docker.createContainer({
      Image: ctx.env.busybox,
      Cmd: ['sh', '-c', 'echo out; echo err >&2; exit 3'],
    });
    await c.start();
    expect((await c.wait()).StatusCode).toBe(3);
    expect(await logsOf(c)).toEqual({ stdout: 'out\n', stderr: 'err\n' });
    expect((await c.inspect()).State).toMatchObject({ Status: 'exited', ExitCode: 3, Running: false });
  });

  it('runs with docker.run, attached before the start', async () => {
    const sink = () => {
      const s = new PassThrough();
      const text = { value: '' };
      s.on('data', (c: Buffer) => (text.value += c.toString()));
      return [s, text] as const;
    };
    // Without a TTY, dockerode demultiplexes the attach stream into two streams.
    const [out, outText] = sink();
    const [err, errText] = sink();
    const [result, container] = (await docker.run(
      ctx.env.busybox,
      ['sh', '-c', 'echo via run; echo oops >&2; exit 4'],
      [out, err],
      { Tty: false },
    )) as [{ StatusCode: number }, Docker.Container];
    expect(result.StatusCode).toBe(4);
    expect([outText.value, errText.value]).toEqual(['via run\n', 'oops\n']);
    await container.remove();
    // dockerode's default is a TTY: raw bytes, with the terminal's CRLF.
    const [tty, ttyText] = sink();
    const [ttyResult, ttyContainer] = (await docker.run(ctx.env.busybox, ['echo', 'on a tty'], tty)) as [
      { StatusCode: number },
      Docker.Container,
    ];
    expect(ttyResult.StatusCode).toBe(0);
    expect(ttyText.value).toBe('on a tty\r\n');
    await ttyContainer.remove();
  });
});

describe('the background sequence', () => {
  it('create → start → list → logs → stop → logs', async () => {
    const c = await docker.createContainer({
      Image: ctx.env.busybox,
      name: 'dockerode-bg',
      Cmd: ['sh', '-c', 'trap "echo bye; exit 0" TERM; echo started; while true; do sleep 0.1; done'],
    });
    await c.start();
    const listed = (await docker.listContainers()).find((x) => x.Id === c.id);
    expect(listed).toMatchObject({
      Names: ['/dockerode-bg'],
      Image: ctx.env.busybox,
      State: 'running',
      Status: expect.stringMatching(/^Up /),
    });

    // Logs while it runs: a non-follow read returns what is there so far.
    await waitFor(
      async () => ((await c.logs({ stdout: true })) as unknown as Buffer).includes('started\n'),
      'the first line',
    );
    await c.stop({ t: 5 });
    expect((await c.inspect()).State.ExitCode).toBe(0); // the TERM trap ended it: a KILL would read 137
    expect(await logsOf(c)).toEqual({ stdout: 'started\nbye\n', stderr: '' });

    expect((await docker.listContainers()).find((x) => x.Id === c.id)).toBeUndefined();
    expect((await docker.listContainers({ all: true })).find((x) => x.Id === c.id)).toMatchObject({
      State: 'exited',
      Status: expect.stringMatching(/^Exited \(0\) /),
    });
    // Stopping it again: dockerode reports dockerd's 304 as an error with that status.
    await expect(c.stop()).rejects.toMatchObject({ statusCode: 304 });
    await c.remove();
    await expect(c.inspect()).rejects.toMatchObject({
      statusCode: 404,
      json: { message: `No such container: ${c.id}` },
    });
  });
});

describe('images', () => {
  it('pulls with followProgress and lists the image', async () => {
    const { ref, digest } = await pushFreshImage(ctx.env.registry, 'dockerode-pull');
    const events: { status?: string; id?: string; progressDetail?: { current?: number; total?: number } }[] = [];
    const stream = await docker.pull(ref);
    const output = await new Promise<typeof events>((resolve, reject) =>
      docker.modem.followProgress(
        stream,
        (err: Error | null, out: typeof events) => (err ? reject(err) : resolve(out)),
        (e: (typeof events)[number]) => events.push(e),
      ),
    );
    expect(output).toEqual(events);
    const statuses = events.map((e) => e.status);
    expect(statuses[0]).toBe('Pulling from dockerode-pull');
    for (const s of ['Pulling fs layer', 'Downloading', 'Download complete', 'Extracting', 'Pull complete'])
      expect(statuses).toContain(s);
    expect(events.find((e) => e.status === 'Downloading')!.progressDetail).toMatchObject({
      current: expect.any(Number),
      total: expect.any(Number),
    });
    expect(statuses.slice(-2)).toEqual([`Digest: ${digest}`, `Status: Downloaded newer image for ${ref}`]);

    const images = await docker.listImages();
    const mine = images.find((i) => i.RepoTags?.includes(ref));
    expect(mine).toMatchObject({
      Id: expect.stringMatching(/^sha256:[0-9a-f]{64}$/),
      RepoDigests: [ref.replace(/:latest$/, `@${digest}`)],
      Labels: { 'berth.test': 'dockerode-pull' },
    });
    expect(await docker.getImage(ref).inspect()).toMatchObject({ Id: mine!.Id, RepoTags: [ref] });
  });

  it('reports a failed pull through followProgress', async () => {
    const stream = docker.pull(`${ctx.env.registry.host}/no-such-repo:latest`);
    await expect(stream).rejects.toMatchObject({ statusCode: 404 });
  });
});

/** Creates, starts and waits for a busybox container; its exit code, output and inspect, once removed. */
async function runToEnd(opts: Docker.ContainerCreateOptions) {
  const c = await docker.createContainer({ Image: ctx.env.busybox, ...opts });
  await c.start();
  const { StatusCode } = await c.wait();
  const output = await logsOf(c);
  const inspect = await c.inspect();
  await c.remove();
  return { code: StatusCode as number, ...output, inspect };
}

/** A started busybox container running `cmd` (a long sleep by default). */
async function started(opts: Docker.ContainerCreateOptions = {}): Promise<Docker.Container> {
  const c = await docker.createContainer({ Image: ctx.env.busybox, Cmd: ['sleep', '300'], ...opts });
  await c.start();
  return c;
}

describe('health checks', () => {
  const MS = 1_000_000;
  const healthWhen = (c: Docker.Container, status: string) =>
    waitFor(async () => {
      const h = (await c.inspect()).State.Health;
      return h?.Status === status ? h : undefined;
    }, status);

  it('shows healthy in inspect once the check passes', async () => {
    const c = await started({ Healthcheck: { Test: ['CMD-SHELL', 'echo ok'], Interval: 100 * MS } });
    const h = await healthWhen(c, 'healthy');
    expect(h.FailingStreak).toBe(0);
    expect(h.Log.at(-1)).toMatchObject({ ExitCode: 0, Output: 'ok\n' });
    await c.remove({ force: true });
  });

  it('shows unhealthy after Retries failures, with the failing streak and the log', async () => {
    const c = await started({
      Healthcheck: { Test: ['CMD-SHELL', 'echo bad; exit 3'], Interval: 100 * MS, Retries: 2 },
    });
    const h = await healthWhen(c, 'unhealthy');
    expect(h.FailingStreak).toBeGreaterThanOrEqual(2);
    expect(h.Log.at(-1)).toMatchObject({ ExitCode: 3, Output: 'bad\n' });
    await c.remove({ force: true });
  });
});

describe('kill', () => {
  it('SIGKILL leaves it exited 137, not running', async () => {
    const c = await started();
    await c.kill({ signal: 'SIGKILL' });
    expect((await c.inspect()).State).toMatchObject({ Status: 'exited', Running: false, ExitCode: 137 });
    expect((await c.wait()).StatusCode).toBe(137);
    await c.remove();
  });

  it('SIGTERM reaches a shell that traps it', async () => {
    const c = await started({
      Cmd: ['sh', '-c', 'trap "echo got TERM; exit 42" TERM; echo ready; while :; do sleep 0.1; done'],
    });
    await waitFor(async () => (await c.logs({ stdout: true })).includes('ready\n'), 'the trap set');
    await c.kill({ signal: 'SIGTERM' });
    expect((await c.wait()).StatusCode).toBe(42);
    expect(await logsOf(c)).toEqual({ stdout: 'ready\ngot TERM\n', stderr: '' });
    await c.remove();
  });
});

describe('exec', () => {
  /** Runs an exec to its end as dockerode's users do (hijacked); its output and inspect. */
  async function execRun(c: Docker.Container, Cmd: string[], Tty: boolean) {
    const exec = await c.exec({ Cmd, AttachStdout: true, AttachStderr: true, Tty });
    const stream = await exec.start({ hijack: true, stdin: false, Tty });
    let output: { stdout: string; stderr: string };
    if (Tty) {
      // With a TTY the stream is the terminal's raw bytes.
      let raw = '';
      stream.on('data', (chunk: Buffer) => (raw += chunk.toString()));
      await new Promise((resolve, reject) => stream.on('end', resolve).on('error', reject));
      output = { stdout: raw, stderr: '' };
    } else {
      output = await demuxed(stream);
    }
    const { ExitCode, Running } = await exec.inspect();
    return { ...output, ExitCode, Running };
  }

  it('with Tty, the terminal ends lines with \\r\\n', async () => {
    const c = await started();
    expect(await execRun(c, ['sh', '-c', 'echo one; echo two'], true)).toEqual({
      stdout: 'one\r\ntwo\r\n',
      stderr: '',
      ExitCode: 0,
      Running: false,
    });
    await c.remove({ force: true });
  });

  // Docker 27 (API 1.47) records 126 for any exec that cannot start, a missing command included.
  it('a command that cannot start exits 126: missing, or not executable', async () => {
    const c = await started();
    const missing = await execRun(c, ['no-such-command'], false);
    expect(missing).toMatchObject({ ExitCode: 126, Running: false });
    expect(missing.stdout).toMatch(/"no-such-command": executable file not found in \$PATH/);
    const notExecutable = await execRun(c, ['/etc/passwd'], false);
    expect(notExecutable).toMatchObject({ ExitCode: 126, Running: false });
    expect(notExecutable.stdout).toMatch(/permission denied/);
    await c.remove({ force: true });
  });
});

describe('HostConfig', () => {
  it("PidMode host: the container's pid 1 is the host's init, not its own command", async () => {
    const host = await runToEnd({ Cmd: ['cat', '/proc/1/comm'], HostConfig: { PidMode: 'host' } });
    expect([host.stdout, host.inspect.HostConfig.PidMode]).toEqual([readFileSync('/proc/1/comm', 'utf8'), 'host']);
    const own = await runToEnd({ Cmd: ['cat', '/proc/1/comm'] });
    expect(own.stdout).toBe('cat\n');
  });

  it('GroupAdd: id -G shows the extra groups', async () => {
    const r = await runToEnd({ Cmd: ['id', '-G'], HostConfig: { GroupAdd: ['app', '4242'] } });
    expect(r.stdout.trim().split(' ').sort()).toEqual(['0', '1000', '4242']);
    expect(r.inspect.HostConfig.GroupAdd).toEqual(['app', '4242']);
  });

  it('DeviceCgroupRules: inspect echoes them; a node is usable only with a rule that allows it', async () => {
    // /dev/fuse's numbers. mknod is allowed for any node (dockerd's default rules); opening it is what a rule grants.
    const probe = 'mknod /dev/f c 10 229 && echo made; (: > /dev/f) 2>/dev/null && echo opened || echo refused';
    const allowed = await runToEnd({ Cmd: ['sh', '-c', probe], HostConfig: { DeviceCgroupRules: ['c 10:229 rwm'] } });
    expect([allowed.stdout, allowed.inspect.HostConfig.DeviceCgroupRules]).toEqual([
      'made\nopened\n',
      ['c 10:229 rwm'],
    ]);
    const denied = await runToEnd({ Cmd: ['sh', '-c', probe] });
    expect(denied.stdout).toBe('made\nrefused\n');
  });

  it('refuses an unknown log driver with 400', async () => {
    const create = docker.createContainer({
      Image: ctx.env.busybox,
      HostConfig: { LogConfig: { Type: 'nope', Config: {} } },
    });
    await expect(create).rejects.toMatchObject({
      statusCode: 400,
      json: { message: "logger: no log driver named 'nope' is registered" },
    });
  });
});
