// Interactive I/O against berthd with real clients: the docker CLI (under a
// tmux pseudo-terminal for -it), dockerode and python3-docker. Attach with
// stdin, TTYs and resize, exec, logs -f, detach keys, and concurrent runs.
import Docker from 'dockerode';
import { mkdtempSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { PassThrough, type Duplex } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dockerCli, type Cli } from '../harness/cli.js';
import { runPython } from '../harness/clients.js';
import { waitFor } from '../harness/daemon.js';
import { startEnv, type Env } from '../harness/env.js';
import { demux } from '../harness/streams.js';
import { openTerminal, type Terminal } from '../harness/tmux.js';

let env: Env;
let docker: Cli;
let api: Docker;
let image: string;
const terminals: Terminal[] = [];

beforeAll(async () => {
  env = await startEnv();
  docker = dockerCli(env.daemon);
  api = new Docker({ socketPath: env.daemon.socket });
  image = env.busybox;
});
afterAll(async () => {
  for (const t of terminals) await t.close();
  await env?.stop();
});

/** Runs docker and fails with its stderr unless it exits 0; resolves with stdout. */
async function ok(args: string[], input?: string): Promise<string> {
  const r = await docker(args, input === undefined ? {} : { input });
  expect(r.code, `docker ${args.join(' ')}: ${r.stderr}`).toBe(0);
  return r.stdout;
}

/** The docker CLI in a terminal of its own (with another config directory when given). */
async function terminal(args: string, width = 100, height = 30, configDir = docker.configDir): Promise<Terminal> {
  const t = await openTerminal(
    `docker ${args}`,
    { DOCKER_HOST: env.daemon.host, DOCKER_CONFIG: configDir },
    width,
    height,
  );
  terminals.push(t);
  return t;
}

/**
 * Asks the shell for its size until it reports `size`: the window change
 * travels CLI → berthd → conmon while the typed command races it, so one
 * `stty size` may still see the old size.
 */
async function untilSize(t: Terminal, size: RegExp): Promise<void> {
  for (let i = 0; ; i++) {
    await t.keys('stty size', 'Enter');
    try {
      await t.waitFor(size, String(size), 1000);
      return;
    } catch (e) {
      if (i >= 10) throw e;
    }
  }
}

const inspect = async (name: string) => JSON.parse(await ok(['inspect', name]))[0];
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

describe('docker run', () => {
  it('runs in the foreground and prints the output', async () => {
    expect(await docker(['run', '--rm', image, 'echo', 'hi'])).toEqual({ code: 0, stdout: 'hi\n', stderr: '' });
    const times: number[] = [];
    for (let i = 0; i < 7; i++) {
      const t0 = performance.now();
      expect((await docker(['run', '--rm', image, 'echo', 'hi'])).stdout).toBe('hi\n');
      times.push(performance.now() - t0);
    }
    console.log(
      `docker run --rm busybox echo hi: median ${median(times).toFixed(0)} ms, min ${Math.min(...times).toFixed(0)} ms (7 runs)`,
    );
  });

  it('exits with the container status, stdout and stderr apart', async () => {
    const r = await docker(['run', image, 'sh', '-c', 'echo out; echo err >&2; exit 3']);
    expect(r).toEqual({ code: 3, stdout: 'out\n', stderr: 'err\n' });
  });

  it('feeds piped stdin with -i and ends when it closes', async () => {
    expect(await ok(['run', '-i', '--rm', image, 'cat'], 'hello\nworld\n')).toBe('hello\nworld\n');
    // More than any pipe or socket buffer holds, both ways.
    const big = 'abcdefghijklmnopqrstuvwxyz0123456789\n'.repeat(20_000);
    expect(await ok(['run', '-i', '--rm', image, 'wc', '-c'], big)).toBe(`${big.length}\n`);
    const out = await ok(['run', '-i', '--rm', image, 'cat'], big);
    expect(out.length).toBe(big.length);
    expect(out === big).toBe(true);
  });

  it('misses none of the first output of a container started right after attaching', async () => {
    for (let i = 0; i < 5; i++) {
      expect(await ok(['run', '--rm', image, 'sh', '-c', `echo first-${i}; echo second-${i} >&2`])).toBe(
        `first-${i}\n`,
      );
    }
  });

  it('removes the container with --rm', async () => {
    await ok(['run', '--rm', '--name', 'rm-me', image, 'true']);
    await waitFor(async () => !(await ok(['ps', '-a', '--format', '{{.Names}}'])).includes('rm-me'), 'rm-me to go');
  });

  it('never mixes the bytes of ten concurrent runs', async () => {
    const lines = (k: number) => Array.from({ length: 400 }, (_, i) => `run${k}-${'x'.repeat(i % 50)}-${i}\n`).join('');
    const script = (k: number) =>
      // Shell builtins only (x grows to i % 50 characters): forks of printf and tr made the test slow.
      `i=0; x=; while [ $i -lt 400 ]; do printf "run${k}-%s-%d\\n" "$x" $i; i=$((i+1)); if [ $((i % 50)) -eq 0 ]; then x=; else x="\${x}x"; fi; done`;
    const runs = await Promise.all(
      Array.from({ length: 10 }, (_, k) => docker(['run', '--rm', image, 'sh', '-c', script(k)])),
    );
    runs.forEach((r, k) => {
      expect(r.code, r.stderr).toBe(0);
      expect(r.stdout === lines(k), `run ${k} output differs`).toBe(true);
    });
  });
});

describe('docker run -it', () => {
  it('gives a shell with a prompt, TERM and the terminal size, follows resizes and exits with its status', async () => {
    const t = await terminal(`run -it --rm --name tty-shell ${image} sh`, 100, 30);
    await t.waitFor(/^\/ #\s*$/m, 'the prompt');
    await t.keys('echo answer-$((6*7))', 'Enter');
    await t.waitFor(/^answer-42$/m);
    await t.keys('stty size; echo term=$TERM; tty', 'Enter');
    await t.waitFor(/^30 100\nterm=xterm\n\/dev\/pts\/0$/m);
    await t.resize(80, 24);
    await untilSize(t, /^24 80$/m);
    // Line editing goes through the terminal: the shell sees the edited line.
    await t.keys('echo abX', 'C-h', 'c', 'Enter');
    await t.waitFor(/^abc$/m);
    await t.keys('exit 5', 'Enter');
    await t.waitFor(/\[exit 5\]$/m);
  });

  it('detaches with ctrl-p ctrl-q, leaving the container running, and docker attach re-attaches', async () => {
    const t = await terminal(`run -it --name detach-me ${image} sh`);
    await t.waitFor(/^\/ #\s*$/m);
    await t.keys('echo before-detach', 'Enter');
    await t.waitFor(/^before-detach$/m);
    await t.keys('C-p', 'C-q');
    await t.waitFor(/\[exit 0\]$/m, 'the CLI to return');
    expect((await inspect('detach-me')).State.Running).toBe(true);

    const again = await terminal('attach detach-me');
    await again.keys('echo after-attach', 'Enter');
    await again.waitFor(/^after-attach$/m);
    await again.keys('exit 6', 'Enter');
    await again.waitFor(/\[exit 6\]$/m);
    expect((await inspect('detach-me')).State).toMatchObject({ Running: false, ExitCode: 6 });
  });

  it("detaches with the keys of the CLI's config.json (detachKeys), from a run and from an exec", async () => {
    const config = mkdtempSync(path.join(os.tmpdir(), 'berth-cli-config-'));
    writeFileSync(path.join(config, 'config.json'), JSON.stringify({ detachKeys: 'ctrl-x,x' }));
    const t = await terminal(`run -it --name detach-keys ${image} sh`, 100, 30, config);
    await t.waitFor(/^\/ #\s*$/m);
    await t.keys('C-p', 'C-q', 'echo still-here', 'Enter'); // not the detach keys any more
    await t.waitFor(/^still-here$/m);
    await t.keys('C-x', 'x');
    await t.waitFor(/\[exit 0\]$/m, 'the CLI to return');
    expect((await inspect('detach-keys')).State.Running).toBe(true);
    const x = await terminal('exec -it detach-keys sh', 100, 30, config);
    await x.waitFor(/^\/ #\s*$/m);
    await x.keys('C-x', 'x');
    // What the CLI prints when an exec detaches, with dockerd too.
    await x.waitFor(/read escape sequence$/m, 'the exec to detach');
    expect((await inspect('detach-keys')).State.Running).toBe(true);
    await ok(['rm', '-f', 'detach-keys']);
  });
});

describe('docker run -d, attach and logs', () => {
  it('attaches to a running container until it exits, with its status', async () => {
    await ok(['run', '-d', '--name', 'bg-attach', image, 'sh', '-c', 'sleep 1; echo late; echo late-err >&2; exit 5']);
    const r = await docker(['attach', 'bg-attach']);
    expect(r).toEqual({ code: 5, stdout: 'late\n', stderr: 'late-err\n' });
  });

  it('follows logs with logs -f until the container stops', async () => {
    await ok(['run', '-d', '--name', 'bg-logs', image, 'sh', '-c', 'for i in 1 2 3; do echo line $i; sleep 0.3; done']);
    expect(await ok(['logs', '-f', 'bg-logs'])).toBe('line 1\nline 2\nline 3\n');
  });
});

describe('docker exec', () => {
  beforeAll(async () => {
    await ok(['run', '-d', '--name', 'ex', '-e', 'FROM_RUN=1', image, 'sleep', '600']);
  });

  it('runs a command and returns its output and exit code', async () => {
    expect(await docker(['exec', 'ex', 'echo', 'hello exec'])).toEqual({ code: 0, stdout: 'hello exec\n', stderr: '' });
    expect(await docker(['exec', 'ex', 'sh', '-c', 'echo o; echo e >&2; exit 7'])).toEqual({
      code: 7,
      stdout: 'o\n',
      stderr: 'e\n',
    });
    // Docker 27 (API 1.47) records 126 for an exec that cannot start, a missing command included.
    const missing = await docker(['exec', 'ex', 'no-such-command']);
    expect(missing.code).toBe(126);
    expect(missing.stdout).toMatch(
      /^OCI runtime exec failed: exec failed: .*"no-such-command": executable file not found in \$PATH: unknown\r?\n$/,
    );
  });

  it('takes -i stdin, -e, -u and -w, and -d', async () => {
    expect(await ok(['exec', '-i', 'ex', 'cat'], 'piped\n')).toBe('piped\n');
    expect(
      await ok([
        'exec',
        '-e',
        'FROM_EXEC=2',
        '-u',
        '1000:1000',
        '-w',
        '/tmp',
        'ex',
        'sh',
        '-c',
        'echo $FROM_RUN $FROM_EXEC $(id -u) $(pwd) ${TERM:-noterm}',
      ]),
    ).toBe('1 2 1000 /tmp noterm\n');
    await ok(['exec', '-d', 'ex', 'sh', '-c', 'echo detached > /tmp/detached']);
    await waitFor(
      async () => (await docker(['exec', 'ex', 'cat', '/tmp/detached'])).stdout === 'detached\n',
      'the detached exec',
    );
  });

  it('gives -it a terminal of the CLI size', async () => {
    const t = await terminal('exec -it ex sh', 90, 25);
    await t.waitFor(/^\/ #\s*$/m);
    await t.keys('stty size; echo term=$TERM; tty', 'Enter');
    await t.waitFor(/^25 90\nterm=xterm\n\/dev\/pts\/\d+$/m);
    await t.resize(70, 20);
    await untilSize(t, /^20 70$/m);
    await t.keys('exit 9', 'Enter');
    await t.waitFor(/\[exit 9\]$/m);
  });

  it("has a TTY if created with one; the start's Tty only makes the stream raw, as dockerd", async () => {
    const d = env.daemon;
    const start = async (tty: boolean, startBody: Record<string, unknown>) => {
      const x = await d.request('POST', '/containers/ex/exec', {
        body: { Cmd: ['sh', '-c', 'echo out; echo err >&2'], AttachStdout: true, AttachStderr: true, Tty: tty },
      });
      const r = await d.request('POST', `/exec/${x.json.Id}/start`, { body: startBody });
      return { type: r.headers['content-type'], body: r.body };
    };
    // A TTY exec started without Tty (docker-py): framed, the terminal's output all on stdout.
    const ttyFramed = await start(true, {});
    expect(ttyFramed.type).toBe('application/vnd.docker.multiplexed-stream');
    expect(demux(ttyFramed.body).flatMap(([s]) => s)).not.toContain(2);
    expect(
      demux(ttyFramed.body)
        .map(([, t]) => t)
        .join(''),
    ).toBe('out\r\nerr\r\n');
    // Both with Tty: raw.
    const ttyRaw = await start(true, { Tty: true });
    expect([ttyRaw.type, ttyRaw.body.toString()]).toEqual(['application/vnd.docker.raw-stream', 'out\r\nerr\r\n']);
    // No TTY but a raw stream: stdout alone, plain newlines; dockerd has nowhere to send stderr.
    const pipeRaw = await start(false, { Tty: true });
    expect([pipeRaw.type, pipeRaw.body.toString()]).toEqual(['application/vnd.docker.raw-stream', 'out\n']);
  });

  it('is Running from the moment its hijacked start is answered, and a resize then reaches its terminal', async () => {
    // Nomad's exec polls inspect as soon as the 101 arrives and ends at the first Running false.
    const d = env.daemon;
    const created = await d.request('POST', '/containers/ex/exec', {
      body: { Cmd: ['/bin/sh'], Tty: true, AttachStdin: true, AttachStdout: true, AttachStderr: true },
    });
    const id = created.json.Id as string;
    const sock = net.connect(d.socket);
    const body = JSON.stringify({ Detach: false, Tty: true });
    sock.write(
      `POST /exec/${id}/start HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n` +
        `Connection: Upgrade\r\nUpgrade: tcp\r\nContent-Length: ${body.length}\r\n\r\n${body}`,
    );
    let received = '';
    sock.on('data', (c: Buffer) => {
      received += c.toString('latin1');
    });
    await waitFor(() => received.includes('\r\n\r\n'), 'the 101');
    expect(received).toMatch(/^HTTP\/1.1 101 /);
    expect((await d.request('GET', `/exec/${id}/json`)).json.Running).toBe(true);
    expect((await d.request('POST', `/exec/${id}/resize?h=30&w=77`)).status).toBe(200);
    sock.write('exit $(stty size | cut -d " " -f2)\n');
    const done = await waitFor(async () => {
      const j = (await d.request('GET', `/exec/${id}/json`)).json;
      return j.Running ? undefined : j;
    }, 'the shell to exit');
    expect(done.ExitCode).toBe(77);
    sock.destroy();
  });

  it("answers dockerd's errors, and inspect shows the exec", async () => {
    const d = env.daemon;
    const ctr = (await inspect('ex')).Id as string;
    const created = await d.request('POST', `/containers/ex/exec`, {
      body: { Cmd: ['sh', '-c', 'exit 4'], AttachStdout: true },
    });
    expect(created.status).toBe(201);
    const id = created.json.Id as string;
    expect((await d.request('GET', `/exec/${id}/json`)).json).toMatchObject({
      ID: id,
      Running: false,
      ExitCode: null,
      ContainerID: ctr,
      OpenStdout: true,
      OpenStdin: false,
      Pid: 0,
      ProcessConfig: { entrypoint: 'sh', arguments: ['-c', 'exit 4'], tty: false, privileged: false },
    });
    // An exec with no user has none in its ProcessConfig (dockerd's omitempty).
    expect((await d.request('GET', `/exec/${id}/json`)).json.ProcessConfig).not.toHaveProperty('user');
    expect((await inspect('ex')).ExecIDs).toContain(id);
    // Detached start answers once it runs; the exit code follows.
    expect((await d.request('POST', `/exec/${id}/start`, { body: { Detach: true } })).status).toBe(200);
    const done = await waitFor(async () => {
      const j = (await d.request('GET', `/exec/${id}/json`)).json;
      return j.Running === false && j.ExitCode !== null ? j : undefined;
    }, 'the exec to exit');
    expect(done).toMatchObject({ ExitCode: 4 });
    expect(done.Pid).toBeGreaterThan(0);
    // Gone from the container's ExecIDs once it has exited, as in dockerd; still inspectable by id.
    expect((await inspect('ex')).ExecIDs).toBeNull();
    expect((await d.request('POST', `/exec/${id}/start`, { body: { Detach: true } })).json).toEqual({
      message: `Error: Exec command ${id} has already run`,
    });
    expect((await d.request('GET', '/exec/nope/json')).status).toBe(404);
    expect((await d.request('POST', '/containers/ex/exec', { body: { Cmd: [] } })).json).toEqual({
      message: 'No exec command specified',
    });
    await ok(['create', '--name', 'ex-stopped', image, 'true']);
    const stopped = await d.request('POST', '/containers/ex-stopped/exec', { body: { Cmd: ['true'] } });
    expect(stopped.status).toBe(409);
    expect(stopped.json.message).toMatch(/^Container [0-9a-f]{64} is not running$/);
  });
});

/** Reads a hijacked stream: what came so far, and all of it once it ends. */
function reader(stream: NodeJS.ReadableStream): { sofar(): string; done: Promise<Buffer> } {
  const chunks: Buffer[] = [];
  const done = new Promise<Buffer>((resolve, reject) => {
    stream.on('data', (c: Buffer) => chunks.push(c));
    stream.on('end', () => resolve(Buffer.concat(chunks)));
    stream.on('close', () => resolve(Buffer.concat(chunks)));
    stream.on('error', reject);
  });
  return { sofar: () => Buffer.concat(chunks).toString(), done };
}

const streamText = (frames: [number, string][], n: number) =>
  frames
    .filter(([s]) => s === n)
    .map(([, t]) => t)
    .join('');

describe('dockerode', () => {
  it('attaches with stdin before the start; closing stdin ends a StdinOnce container', async () => {
    const c = await api.createContainer({
      Image: image,
      Cmd: ['sh', '-c', 'cat; echo done >&2'],
      OpenStdin: true,
      StdinOnce: true,
      AttachStdin: true,
    });
    const stream = (await c.attach({
      stream: true,
      stdin: true,
      stdout: true,
      stderr: true,
      hijack: true,
    })) as unknown as Duplex;
    const output = reader(stream);
    await c.start();
    stream.write('one\n');
    stream.write('two\n');
    stream.end();
    const frames = demux(await output.done);
    expect([streamText(frames, 1), streamText(frames, 2)]).toEqual(['one\ntwo\n', 'done\n']);
    expect(await c.wait()).toMatchObject({ StatusCode: 0 });
  });

  it('detaches from a TTY with the detach keys, the container going on', async () => {
    const c = await api.createContainer({ Image: image, Cmd: ['sh'], Tty: true, OpenStdin: true });
    await c.start();
    const stream = (await c.attach({
      stream: true,
      stdin: true,
      stdout: true,
      hijack: true,
      detachKeys: 'ctrl-x,x',
    })) as unknown as Duplex;
    const output = reader(stream);
    // An x alone is typed; only ctrl-x then x detaches.
    stream.write('echo via-x-$((1+1))\n');
    await waitFor(() => output.sofar().includes('via-x-2'), 'the echo');
    stream.write('\x18x');
    await output.done;
    expect((await c.inspect()).State.Running).toBe(true);
    await c.kill();
  });

  it('runs an exec with its output demultiplexed, stdin, and the exit code in inspect', async () => {
    const c = await api.createContainer({ Image: image, Cmd: ['sleep', '600'] });
    await c.start();
    const exec = await c.exec({
      Cmd: ['sh', '-c', 'echo out; echo err >&2; exit 3'],
      AttachStdout: true,
      AttachStderr: true,
    });
    const stream = (await exec.start({ hijack: true, stdin: false })) as unknown as Duplex;
    const out = new PassThrough();
    const err = new PassThrough();
    const texts = { out: '', err: '' };
    out.on('data', (b: Buffer) => (texts.out += b));
    err.on('data', (b: Buffer) => (texts.err += b));
    api.modem.demuxStream(stream, out, err);
    await new Promise((r) => stream.on('end', r));
    expect(texts).toEqual({ out: 'out\n', err: 'err\n' });
    expect(await exec.inspect()).toMatchObject({ Running: false, ExitCode: 3 });

    const withStdin = await c.exec({ Cmd: ['tr', 'a-z', 'A-Z'], AttachStdin: true, AttachStdout: true });
    const duplex = (await withStdin.start({ hijack: true, stdin: true })) as unknown as Duplex;
    const upper = reader(duplex);
    duplex.end('shout\n');
    expect(demux(await upper.done)).toEqual([[1, 'SHOUT\n']]);
    expect((await withStdin.inspect()).ExitCode).toBe(0);
    await c.kill();
  });
});

describe('exec resize', () => {
  it('sent as soon as the start is hijacked (as cri-dockerd sends the first one) waits for the process and sizes it', async () => {
    const c = await api.createContainer({ Image: image, Cmd: ['sleep', '600'] });
    await c.start();
    const exec = await c.exec({ Cmd: ['sh', '-c', 'sleep 1; stty size'], Tty: true, AttachStdout: true });
    const stream = (await exec.start({ hijack: true, stdin: false, Tty: true })) as unknown as Duplex;
    const output = reader(stream);
    await exec.resize({ h: 40, w: 100 });
    expect((await output.done).toString().trim()).toBe('40 100');
    // Once it has ended, the runtime knows it no more: dockerd's 404.
    const late = await env.daemon.request('POST', `/exec/${exec.id}/resize?h=10&w=10`);
    expect(late.status).toBe(404);
    await c.kill();
  });
});

describe('python3-docker', () => {
  it('exec_run returns exit codes and output, demuxed and on a TTY; attach reads a run', async () => {
    const { values: v, result } = await runPython(
      env.daemon,
      `
c = client.containers.run(${JSON.stringify(image)}, "sleep 600", detach=True)
r = c.exec_run('sh -c "echo out; echo err >&2; exit 3"')
emit('exit', r.exit_code)
emit('out', r.output)
r = c.exec_run(["sh", "-c", "echo a; echo b >&2"], demux=True)
emit('demux', r.output)
r = c.exec_run("tty", tty=True)
emit('tty', r.output)
emit('env', c.exec_run("sh -c 'echo $X'", environment={"X": "from-python"}, user="1000").output)
c.kill()
a = client.containers.create(${JSON.stringify(image)}, ["sh", "-c", "echo attached; echo err >&2; exit 2"])
stream = a.attach(stdout=True, stderr=True, stream=True, logs=True)
a.start()
emit('attach', b"".join(stream))
emit('status', a.wait()["StatusCode"])
emit('logs', a.attach(stdout=True, stderr=False, logs=True, stream=False))
`,
    );
    expect(result.code, result.stderr).toBe(0);
    expect(v.exit).toBe(3);
    expect(v.out).toEqual({ bytes: 'out\nerr\n' });
    expect(v.demux).toEqual([{ bytes: 'a\n' }, { bytes: 'b\n' }]);
    expect(v.tty.bytes).toMatch(/^\/dev\/pts\/\d+\r\n$/);
    expect(v.env).toEqual({ bytes: 'from-python\n' });
    expect(v.attach).toEqual({ bytes: 'attached\nerr\n' });
    expect(v.status).toBe(2);
    expect(v.logs).toEqual({ bytes: 'attached\n' });
  });
});
