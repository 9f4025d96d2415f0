// dockerode (docker-modem over the unix socket) against berthd: the foreground
// and background sequences, demultiplexed logs, pull with followProgress, and
// the image list.
import Docker from 'dockerode';
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
      Cmd: ['sh', '-c', 'echo started; trap "echo bye; exit 0" TERM; while true; do sleep 0.1; done'],
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
