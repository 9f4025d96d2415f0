// The official Go SDK (Debian's golang-github-docker-docker-dev, API 1.41) with
// API version negotiation against berthd: test/clients/go/main.go, built
// once per run, drives the foreground and background sequences and a pull.
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
      warnings: null,
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
});
