// The real docker CLI (v28, DOCKER_HOST=unix://…) against berthd: pull, images,
// run in the foreground and in the background, ps, logs, stop, rm, inspect,
// tag and rmi, events, and the errors a user reads.
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { dockerCli, type Cli } from '../harness/cli.js';
import { pushFreshImage } from '../harness/clients.js';
import { waitFor } from '../harness/daemon.js';
import { useEnv } from '../harness/env.js';

const ctx = useEnv();
let docker: Cli;
let image: string;

beforeAll(() => {
  docker = dockerCli(ctx.daemon);
  image = ctx.env.busybox;
});

/** Runs docker and fails with its stderr unless it exits 0; resolves with stdout. */
async function ok(args: string[]): Promise<string> {
  const r = await docker(args);
  expect(r.code, `docker ${args.join(' ')}: ${r.stderr}`).toBe(0);
  return r.stdout;
}

const psNames = async (...flags: string[]) =>
  (await ok(['ps', ...flags, '--format', '{{.Names}} {{.Status}}'])).split('\n').filter(Boolean);

describe('images', () => {
  it('pulls from the registry and lists the image', async () => {
    const { ref, digest } = await pushFreshImage(ctx.env.registry, 'cli-pull');
    const pulled = await ok(['pull', ref]);
    expect(pulled).toMatch(/Pull complete/);
    expect(pulled).toContain(`Digest: ${digest}`);
    expect(pulled).toContain(`Status: Downloaded newer image for ${ref}`);
    const images = await ok(['images', '--format', '{{.Repository}}:{{.Tag}} {{.ID}} {{.Size}}']);
    expect(images).toMatch(new RegExp(`^${ref} [0-9a-f]{12} [\\d.]+MB$`, 'm'));
    expect(images).toMatch(new RegExp(`^${image} `, 'm'));
    // The pulled layer is there for a container.
    expect(await docker(['run', '--rm', ref, 'cat', '/etc/berth-image'])).toEqual({
      code: 0,
      stdout: 'cli-pull\n',
      stderr: '',
    });
  });

  it('tags and removes, refusing while a container uses the only name', async () => {
    const { ref } = await pushFreshImage(ctx.env.registry, 'cli-tag');
    await ok(['pull', '-q', ref]);
    const id = (await ok(['images', '-q', ref])).trim();
    await ok(['tag', ref, 'mine/tagged:v1']);
    expect(await ok(['images', '-q', 'mine/tagged:v1'])).toBe(`${id}\n`);
    expect(await ok(['rmi', 'mine/tagged:v1'])).toBe('Untagged: mine/tagged:v1\n');

    // A stopped container pins the image's last name, as with dockerd.
    const ctr = (await ok(['create', ref, 'true'])).trim();
    const refused = await docker(['rmi', ref]);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(
      /^Error response from daemon: conflict: unable to remove repository reference ".*" \(must force\) - container [0-9a-f]{12} is using its referenced image [0-9a-f]{12}$/m,
    );
    await ok(['rm', ctr]);
    const removed = await ok(['rmi', ref]);
    expect(removed).toContain(`Untagged: ${ref}`);
    expect(removed).toMatch(/^Deleted: sha256:[0-9a-f]{64}$/m);
    expect(await ok(['images', '-q', ref])).toBe('');
  });

  it('inspects an image', async () => {
    const out = await ok([
      'image',
      'inspect',
      '--format',
      '{{.Os}}/{{.Architecture}} {{json .Config.Cmd}} {{json .RepoTags}}',
      image,
    ]);
    expect(out).toBe(`linux/amd64 ["sh"] ["${image}"]\n`);
  });
});

describe('docker run in the foreground', () => {
  it('prints the output and exits 0, and --rm leaves nothing behind', async () => {
    const r = await docker(['run', '--rm', image, 'echo', 'hi']);
    expect(r).toEqual({ code: 0, stdout: 'hi\n', stderr: '' });
    expect(await ok(['ps', '-aq'])).toBe('');
  });

  it("returns the container's exit code, with stdout and stderr apart", async () => {
    const r = await docker(['run', '--rm', image, 'sh', '-c', 'echo out; echo err >&2; exit 3']);
    expect(r.code).toBe(3);
    expect(r.stdout).toBe('out\n');
    expect(r.stderr).toBe('err\n');
  });

  it('passes env, working dir, user and hostname', async () => {
    const r = await docker([
      'run',
      '--rm',
      '-e',
      'GREETING=hello',
      '-w',
      '/tmp',
      '-u',
      '1000:1000',
      '--hostname',
      'boxy',
      image,
      'sh',
      '-c',
      'echo $GREETING; pwd; id -u; hostname',
    ]);
    expect(r).toEqual({ code: 0, stdout: 'hello\n/tmp\n1000\nboxy\n', stderr: '' });
  });

  it('reads a seccomp profile file given with --security-opt', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'berth-seccomp-'));
    const file = path.join(dir, 'profile.json');
    writeFileSync(
      file,
      JSON.stringify({
        defaultAction: 'SCMP_ACT_ALLOW',
        syscalls: [{ names: ['mkdir', 'mkdirat'], action: 'SCMP_ACT_ERRNO', errnoRet: 1 }],
      }),
    );
    const r = await docker(['run', '--rm', '--security-opt', `seccomp=${file}`, image, 'mkdir', '/x']);
    expect(r).toMatchObject({ code: 1, stderr: "mkdir: can't create directory '/x': Operation not permitted\n" });
    expect(await ok(['info', '--format', '{{json .SecurityOptions}}'])).toBe('["name=seccomp,profile=builtin"]\n');
  });

  it('pulls an image it does not have yet', async () => {
    const { ref } = await pushFreshImage(ctx.env.registry, 'cli-autopull');
    const r = await docker(['run', '--rm', ref, 'echo', 'pulled and ran']);
    expect(r.code, r.stderr).toBe(0);
    // The pull's progress goes to stderr, as with dockerd; the container's output to stdout.
    expect(r.stderr).toContain(`Unable to find image '${ref}' locally`);
    expect(r.stderr).toContain(`Status: Downloaded newer image for ${ref}`);
    expect(r.stdout).toBe('pulled and ran\n');
  });

  it('exits 127 for a missing command, and --rm still removes the container', async () => {
    const r = await docker(['run', '--rm', image, '/no/such/binary'], { timeoutMs: 20_000 });
    expect(r.code).toBe(127);
    expect(r.stderr).toMatch(/no such file or directory/);
    expect(await ok(['ps', '-aq'])).toBe('');
  });

  it('keeps a stopped container without --rm, listed by ps -a', async () => {
    const r = await docker(['run', '--name', 'fg-kept', image, 'sh', '-c', 'exit 2']);
    expect(r.code).toBe(2);
    expect(await psNames()).not.toContainEqual(expect.stringMatching(/^fg-kept /));
    expect(await psNames('-a')).toContainEqual(expect.stringMatching(/^fg-kept Exited \(2\) /));
    expect(await ok(['rm', 'fg-kept'])).toBe('fg-kept\n');
  });
});

describe('docker run -d and the background sequence', () => {
  it('run -d → ps → logs → stop → ps -a → inspect → rm', async () => {
    const run = await ok([
      'run',
      '-d',
      '--name',
      'bg-web',
      image,
      'sh',
      '-c',
      'trap "echo bye; exit 0" TERM; echo started; echo warn >&2; while true; do sleep 0.1; done',
    ]);
    expect(run).toMatch(/^[0-9a-f]{64}\n$/);
    const id = run.trim();

    const ps = await ok(['ps', '--no-trunc', '--format', '{{.ID}}|{{.Image}}|{{.Command}}|{{.Status}}|{{.Names}}']);
    expect(ps).toContain(
      `${id}|${image}|"sh -c 'trap \\"echo bye; exit 0\\" TERM; echo started; echo warn >&2; while true; do sleep 0.1; done'"|Up `,
    );
    expect(ps).toMatch(/\|bg-web\n/);

    // docker logs writes the container's stdout to stdout and its stderr to stderr.
    const logs = await waitFor(async () => {
      const r = await docker(['logs', 'bg-web']);
      return r.stdout === 'started\n' && r.stderr === 'warn\n' && r;
    }, 'the first lines in docker logs');
    expect(logs.code).toBe(0);

    expect(await ok(['stop', '-t', '5', 'bg-web'])).toBe('bg-web\n');
    expect(await ok(['inspect', '-f', '{{.State.ExitCode}}', 'bg-web'])).toBe('0\n'); // the TERM trap ended it, not a KILL (137)
    expect((await docker(['logs', 'bg-web'])).stdout).toBe('started\nbye\n');

    expect(await psNames()).not.toContainEqual(expect.stringMatching(/^bg-web /));
    expect(await psNames('-a')).toContainEqual(expect.stringMatching(/^bg-web Exited \(0\) .* ago$/));

    const inspected = JSON.parse(await ok(['inspect', 'bg-web']));
    expect(inspected).toHaveLength(1);
    expect(inspected[0]).toMatchObject({
      Id: id,
      Name: '/bg-web',
      Path: 'sh',
      State: { Status: 'exited', Running: false, ExitCode: 0 },
      Config: { Image: image },
    });
    expect(
      await ok(['inspect', '-f', '{{.State.Status}} {{.State.ExitCode}} {{.Config.Image}}', id.slice(0, 12)]),
    ).toBe(`exited 0 ${image}\n`);

    expect(await ok(['rm', 'bg-web'])).toBe('bg-web\n');
    expect(await psNames('-a')).not.toContainEqual(expect.stringMatching(/^bg-web /));
  });

  it('rm refuses a running container and rm -f removes it', async () => {
    const id = (await ok(['run', '-d', image, 'sleep', '100'])).trim();
    const refused = await docker(['rm', id]);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain(`Error response from daemon: You cannot remove a running container ${id}.`);
    expect(await ok(['rm', '-f', id])).toBe(`${id}\n`);
    expect(await ok(['ps', '-aq'])).not.toContain(id.slice(0, 12));
  });
});

describe('docker events', () => {
  it('replays a run from --since and returns at --until', async () => {
    const since = (Date.now() / 1000).toFixed(3);
    await ok(['run', '--rm', '--name', 'evented', image, 'true']);
    // A few times, each with an --until still ahead when the request arrives: the stream
    // must end by itself every time (a timer firing as the clock reaches --until once hung it).
    for (let i = 0; i < 5; i++) {
      const until = ((Date.now() + 200 + i) / 1000).toFixed(3);
      const r = await docker(
        [
          'events',
          '--since',
          since,
          '--until',
          until,
          '--filter',
          'container=evented',
          '--format',
          '{{.Type}} {{.Action}}',
        ],
        { timeoutMs: 10_000 },
      );
      expect(r.code, r.stderr).toBe(0);
      const lifecycle = r.stdout.split('\n').filter((l) => /^container (create|start|die|destroy)$/.test(l));
      expect(lifecycle).toEqual(['container create', 'container start', 'container die', 'container destroy']);
    }
  });
});

describe('health checks', () => {
  it('runs --health-cmd: ps shows (healthy), inspect the status, and ps filters by it', async () => {
    await ok([
      'run',
      '-d',
      '--name',
      'checked',
      '--health-cmd',
      'true',
      '--health-interval',
      '1s',
      image,
      'sleep',
      '300',
    ]);
    await waitFor(
      async () => (await ok(['inspect', '--format', '{{.State.Health.Status}}', 'checked'])) === 'healthy\n',
      'docker inspect to show healthy',
    );
    expect(await psNames('--filter', 'name=checked')).toEqual([expect.stringMatching(/^checked Up .* \(healthy\)$/)]);
    expect(await ok(['ps', '--filter', 'health=healthy', '--format', '{{.Names}}'])).toContain('checked\n');
    expect(await ok(['inspect', '--format', '{{json .Config.Healthcheck}}', 'checked'])).toBe(
      '{"Test":["CMD-SHELL","true"],"Interval":1000000000}\n',
    );
    const failing = await docker(['run', '-d', '--health-cmd', 'exit 1', '--health-interval', '500us', image]);
    expect(failing.code).toBe(125);
    expect(failing.stderr).toContain('Interval in Healthcheck cannot be less than 1ms');
    await ok(['rm', '-f', 'checked']);
  });
});

describe('errors', () => {
  it("shows the daemon's message, not its JSON", async () => {
    for (const args of [
      ['logs', 'nope'],
      ['stop', 'nope'],
      ['rm', 'nope'],
    ]) {
      const r = await docker(args);
      expect(r.code, args.join(' ')).toBe(1);
      expect(r.stderr.trim(), args.join(' ')).toBe('Error response from daemon: No such container: nope');
    }
    const inspect = await docker(['inspect', 'nope']);
    expect(inspect.code).toBe(1);
    expect(inspect.stderr.trim()).toBe('Error: No such object: nope');
    const dup = await docker(['create', '--name', 'twice', image, 'true']);
    expect(dup.code).toBe(0);
    const again = await docker(['run', '--name', 'twice', image, 'true']);
    expect(again.code).toBe(125);
    expect(again.stderr).toContain('Conflict. The container name "/twice" is already in use by container');
  });

  it('refuses at create, as dockerd does, what the start would have refused', async () => {
    const before = await ok(['ps', '-aq', '--no-trunc']);
    const swap = await docker(['create', '--memory', '64m', '--memory-swap', '32m', image, 'true']);
    expect(swap.code).toBe(1);
    expect(swap.stderr.trim()).toBe(
      'Error response from daemon: Minimum memoryswap limit should be larger than memory limit, see usage',
    );
    const cap = await docker(['create', '--cap-add', 'FOO', image, 'true']);
    expect(cap.code).toBe(1);
    expect(cap.stderr.trim()).toBe('Error response from daemon: invalid CapAdd: unknown capability: "CAP_FOO"');
    // docker run stops at the create: exit code 125, and no container left behind.
    const run = await docker(['run', '--rm', '--cpus', '1000', image, 'true']);
    expect(run.code).toBe(125);
    expect(run.stderr).toMatch(/Range of CPUs is from 0\.01 to \d+\.00, as there are only \d+ CPUs available/);
    expect(await ok(['ps', '-aq', '--no-trunc'])).toBe(before);
  });
});

describe('docker run flags for namespaces, groups, devices, logs and signals', () => {
  const out = async (...args: string[]) => (await ok(['run', '--rm', ...args])).trim();

  it('--pid host, --uts host, --group-add, --device-cgroup-rule, --ulimit, --sysctl', async () => {
    expect(await out('--pid', 'host', image, 'cat', '/proc/1/comm')).toBe(readFileSync('/proc/1/comm', 'utf8').trim());
    expect(await out('--uts', 'host', image, 'hostname')).toBe(os.hostname());
    expect((await out('--group-add', 'app', '--group-add', '4242', image, 'id', '-G')).split(' ').sort()).toEqual([
      '0',
      '1000',
      '4242',
    ]);
    expect(
      await out('--device-cgroup-rule', 'c 7:128 rwm', image, 'grep', '7:128', '/sys/fs/cgroup/devices/devices.list'),
    ).toBe('c 7:128 rwm');
    expect(await out('--ulimit', 'nofile=100:200', image, 'sh', '-c', 'ulimit -n')).toBe('100');
    expect(await out('--sysctl', 'net.ipv4.ip_forward=1', image, 'cat', '/proc/sys/net/ipv4/ip_forward')).toBe('1');
  });

  it('refuses what berth does not apply, with the reason, and leaves nothing behind', async () => {
    const before = await ok(['ps', '-aq', '--no-trunc']);
    const tag = await docker(['run', '--rm', '--log-opt', 'tag={{.Name}}', image, 'true']);
    expect(tag.code).toBe(125);
    expect(tag.stderr).toContain("log opt 'tag' is not supported by berth yet");
    const driver = await docker(['run', '--rm', '--log-driver', 'nope', image, 'true']);
    expect(driver.stderr).toContain("logger: no log driver named 'nope' is registered");
    const links = await docker(['run', '--rm', '--link', 'other:db', image, 'true']);
    expect(links.stderr).toContain('could not get container for other: No such container: other');
    expect(await ok(['ps', '-aq', '--no-trunc'])).toBe(before);
  });

  it('--log-opt max-size and max-file rotate the log: docker logs gives the recent lines, in order', async () => {
    const numbered = 'i=0; while true; do echo "line $i"; i=$((i+1)); sleep 0.01; done';
    const id = (
      await ok(['run', '-d', '--log-opt', 'max-size=1k', '--log-opt', 'max-file=3', image, 'sh', '-c', numbered])
    ).trim();
    const lines = async (...flags: string[]) => (await ok(['logs', ...flags, id])).split('\n').filter(Boolean);
    // The oldest lines go once three files' worth has been written.
    await waitFor(
      async () => /^line [1-9]/.test((await lines())[0] ?? ''),
      'the oldest lines rotated out',
      60_000,
      200,
    );
    await ok(['kill', id]);
    const kept = await lines();
    const first = Number(kept[0]!.split(' ')[1]);
    expect(kept.filter((l, k) => l !== `line ${first + k}`)).toEqual([]);
    expect(await lines('--tail', String(kept.length - 1))).toEqual(kept.slice(1));
    expect((await ok(['inspect', '-f', '{{json .HostConfig.LogConfig}}', id])).trim()).toBe(
      '{"Type":"json-file","Config":{"max-file":"3","max-size":"1k"}}',
    );
    await ok(['rm', id]);
  });

  it('--log-driver none: the output reaches the attached CLI, and docker logs says it cannot read', async () => {
    expect(await ok(['run', '--name', 'no-log', '--log-driver', 'none', image, 'echo', 'attached'])).toBe('attached\n');
    const logs = await docker(['logs', 'no-log']);
    expect(logs.code).toBe(1);
    expect(logs.stderr).toContain('configured logging driver does not support reading');
    await ok(['rm', 'no-log']);
  });

  it('docker kill -s sends the signal; a plain kill leaves it exited 137 at once', async () => {
    const trapped = (
      await ok(['run', '-d', image, 'sh', '-c', 'trap "exit 42" USR1; echo ready; while :; do sleep 0.1; done'])
    ).trim();
    await waitFor(async () => (await ok(['logs', trapped])).includes('ready'), 'the trap set');
    await ok(['kill', '-s', 'USR1', trapped]);
    expect((await ok(['wait', trapped])).trim()).toBe('42');
    const sleeper = (await ok(['run', '-d', image, 'sleep', '100'])).trim();
    await ok(['kill', sleeper]);
    expect((await ok(['inspect', '-f', '{{.State.Status}} {{.State.ExitCode}}', sleeper])).trim()).toBe('exited 137');
    await ok(['rm', trapped, sleeper]);
  });

  it('docker kill -s with a signal other than the stop signal leaves the restart policy to act; the stop signal ends it', async () => {
    const id = (
      await ok([
        'run',
        '-d',
        '--restart',
        'always',
        '--stop-signal',
        'USR1',
        image,
        'sh',
        '-c',
        'trap "exit 3" USR1 TERM; echo ready; while :; do sleep 0.1; done',
      ])
    ).trim();
    const ready = async (n: number) =>
      waitFor(async () => (await ok(['logs', id])).split('ready').length > n, 'the trap set');
    await ready(1);
    await ok(['kill', '-s', 'TERM', id]);
    const count = async () => (await ok(['inspect', '-f', '{{.RestartCount}} {{.State.Status}}', id])).trim();
    await waitFor(async () => (await count()) === '1 running', 'the restart');
    await ready(2);
    await ok(['kill', '-s', 'USR1', id]);
    // wait answers at the exit, recorded with the policy's decision.
    expect((await ok(['wait', id])).trim()).toBe('3');
    expect(await count()).toBe('1 exited');
    await ok(['rm', id]);
  });
});
