// Debian's python3-docker (5.0.3, run by /usr/bin/python3) against berthd:
// containers.run in the foreground and detached, list, stop, logs, the errors
// it raises, images.pull / images.list, and what docker-py's own integration
// tests rely on (exec framing and detach keys, update_container, prune).
import { existsSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { pushFreshImage, runPython } from '../harness/clients.js';
import { useEnv } from '../harness/env.js';

const ctx = useEnv();

/** Runs a script (see runPython) and fails with its traceback unless it exits 0. */
async function python(script: string): Promise<Record<string, any>> {
  const { values, result } = await runPython(ctx.daemon, script);
  expect(result.code, result.stderr).toBe(0);
  return values;
}

const bytes = (s: string) => ({ bytes: s });

describe('containers', () => {
  it('run in the foreground returns the output as bytes', async () => {
    const v = await python(`
emit('out', client.containers.run(${JSON.stringify(ctx.env.busybox)}, "echo hello world"))
emit('removed', client.containers.run(${JSON.stringify(ctx.env.busybox)}, ["sh", "-c", "echo bye"], remove=True))
emit('left', [c.name for c in client.containers.list(all=True)])
emit('fromEnv', docker.from_env().containers.run(${JSON.stringify(ctx.env.busybox)}, "echo from env", remove=True))
`);
    expect(v.out).toEqual(bytes('hello world\n'));
    expect(v.removed).toEqual(bytes('bye\n'));
    expect(v.left).toHaveLength(1); // the first run's container; remove=True took the second away
    expect(v.fromEnv).toEqual(bytes('from env\n'));
  });

  it('raises ContainerError with the exit status and stderr', async () => {
    const v = await python(`
try:
    client.containers.run(${JSON.stringify(ctx.env.busybox)}, ["sh", "-c", "echo out; echo failed >&2; exit 3"])
    emit('raised', False)
except docker.errors.ContainerError as e:
    emit('raised', True)
    emit('status', e.exit_status)
    emit('stderr', e.stderr)
try:
    client.containers.get("no-such-container")
except docker.errors.NotFound as e:
    emit('notFound', e.explanation)
`);
    expect(v).toEqual({
      raised: true,
      status: 3,
      stderr: bytes('failed\n'),
      notFound: 'No such container: no-such-container',
    });
  });

  it('run detached → list → logs → stop → logs', async () => {
    const v = await python(`
import time
c = client.containers.run(${JSON.stringify(ctx.env.busybox)}, ["sh", "-c", 'trap "echo bye; exit 0" TERM; echo started; while true; do sleep 0.1; done'], detach=True, name="py-bg")
emit('id', c.id)
emit('listed', [(x.id, x.name, x.status) for x in client.containers.list()])
deadline = time.time() + 10
while b"started" not in c.logs() and time.time() < deadline:
    time.sleep(0.05)
emit('logsRunning', c.logs())
c.stop(timeout=5)
c.reload()
emit('state', [c.status, c.attrs["State"]["ExitCode"]])
emit('logsStopped', c.logs())
emit('stdoutOnly', c.logs(stdout=True, stderr=False, timestamps=False, tail=1))
emit('running', [x.id for x in client.containers.list()])
emit('all', [x.id for x in client.containers.list(all=True, filters={"name": "py-bg"})])
c.remove()
`);
    expect(v.id).toMatch(/^[0-9a-f]{64}$/);
    expect(v.listed).toContainEqual([v.id, 'py-bg', 'running']);
    expect(v.logsRunning).toEqual(bytes('started\n'));
    expect(v.state).toEqual(['exited', 0]);
    expect(v.logsStopped).toEqual(bytes('started\nbye\n'));
    expect(v.stdoutOnly).toEqual(bytes('bye\n'));
    expect(v.running).not.toContain(v.id);
    expect(v.all).toEqual([v.id]);
  });

  // docker-py's LogsTest and test_attach_no_stream read the output right after wait (or start):
  // once wait has answered, every line the container wrote must be in the log, as with dockerd.
  it('once wait returns, logs and attach(logs, no stream) hold all of the output; a follow from start gets it all', async () => {
    const v = await python(`
api = client.api
img = ${JSON.stringify(ctx.env.busybox)}
cmd = ["sh", "-c", 'i=0; while [ $i -lt 300 ]; do echo out $i; echo err $i >&2; i=$((i+1)); done']
out = b"".join(b"out %d\\n" % i for i in range(300))
err = b"".join(b"err %d\\n" % i for i in range(300))
rounds = []
for _ in range(5):
    c = api.create_container(img, cmd)
    api.start(c)
    followed = b"".join(api.logs(c, stream=True, follow=True, stderr=False))
    code = api.wait(c)["StatusCode"]
    d = api.create_container(img, cmd)
    api.start(d)
    api.wait(d)
    attached = api.attach(d, stream=False, logs=True)
    rounds.append([code, followed == out, api.logs(d, stderr=False) == out, api.logs(d, stdout=False) == err,
                   sorted(attached.splitlines()) == sorted((out + err).splitlines())])
    api.remove_container(c)
    api.remove_container(d)
emit('rounds', rounds)
`);
    expect(v.rounds).toEqual(Array.from({ length: 5 }, () => [0, true, true, true, true]));
  });
});

describe('images', () => {
  it('pulls and lists', async () => {
    const { ref, digest } = await pushFreshImage(ctx.env.registry, 'python-pull');
    const [repo, tag] = [ref.slice(0, ref.lastIndexOf(':')), ref.slice(ref.lastIndexOf(':') + 1)];
    const v = await python(`
img = client.images.pull(${JSON.stringify(repo)}, tag=${JSON.stringify(tag)})
emit('pulled', [img.id, img.tags, img.labels])
emit('listed', [[i.id, i.tags] for i in client.images.list()])
emit('byName', [i.id for i in client.images.list(name=${JSON.stringify(repo)})])
emit('digest', client.images.get(${JSON.stringify(ref)}).attrs["RepoDigests"])
emit('ran', client.containers.run(img, ["cat", "/etc/berth-image"], remove=True))
`);
    const [id, tags, labels] = v.pulled;
    expect(id).toMatch(/^sha256:[0-9a-f]{64}$/);
    expect(tags).toEqual([ref]);
    expect(labels).toEqual({ 'berth.test': 'python-pull' });
    expect(v.listed).toContainEqual([id, [ref]]);
    expect(v.listed).toContainEqual([expect.any(String), [ctx.env.busybox]]);
    expect(v.byName).toEqual([id]);
    expect(v.digest).toEqual([`${repo}@${digest}`]);
    expect(v.ran).toEqual(bytes('python-pull\n'));
  });

  it('pushes, streamed and not, and the registry serves what it pushed', async () => {
    const repo = `${ctx.env.registry.host}/python-push`;
    const v = await python(`
img = client.images.get(${JSON.stringify(ctx.env.busybox)})
img.tag(${JSON.stringify(repo)}, tag="v1")
emit('text', client.images.push(${JSON.stringify(repo)}, tag="v1"))
emit('stream', [m for m in client.api.push(${JSON.stringify(repo)}, tag="v1", stream=True, decode=True)])
emit('repoDigests', client.images.get(${JSON.stringify(`${repo}:v1`)}).attrs["RepoDigests"])
emit('registry', client.images.get_registry_data(${JSON.stringify(`${repo}:v1`)}).id)
`);
    const stream = v.stream as { status?: string; aux?: { Tag: string; Digest: string } }[];
    expect(stream[0]!.status).toBe(`The push refers to repository [${repo}]`);
    const digest = stream.at(-1)!.aux!.Digest;
    expect(stream.at(-1)!.aux!.Tag).toBe('v1');
    expect(stream.map((m) => m.status)).toContain('Layer already exists');
    expect(v.text).toContain(`"v1: digest: ${digest} size: `);
    expect(v.repoDigests).toContain(`${repo}@${digest}`);
    expect(v.registry).toBe(digest);
  });
});

// What docker-py 5.0.3's own integration tests rely on, in scripts of our own.
describe('exec, update and prune as docker-py uses them', () => {
  it('exec: a TTY exec started without Tty is framed, on stdout; a missing command is 126', async () => {
    const v = await python(`
api = client.api
c = client.containers.run(${JSON.stringify(ctx.env.busybox)}, "sleep 600", detach=True)
cmd = 'sh -c "echo out; echo err >&2"'
emit('tty', api.exec_start(api.exec_create(c.id, cmd, tty=True), demux=True))
chunks = list(api.exec_start(api.exec_create(c.id, cmd, tty=True), stream=True, demux=True))
emit('ttyStream', [b"".join(o for o, _ in chunks), [e for _, e in chunks if e is not None]])
emit('plain', api.exec_start(api.exec_create(c.id, cmd), demux=True))
x = api.exec_create(c.id, "no-such-command")
api.exec_start(x)
emit('missing', api.exec_inspect(x)["ExitCode"])
emit('run', c.exec_run("no-such-command").exit_code)
c.remove(force=True)
`);
    // docker-py starts with Tty false: dockerd frames the stream, the TTY's output all on stdout.
    expect(v.tty).toEqual([bytes('out\r\nerr\r\n'), null]);
    expect(v.ttyStream).toEqual([bytes('out\r\nerr\r\n'), []]);
    expect(v.plain).toEqual([bytes('out\n'), bytes('err\n')]);
    expect([v.missing, v.run]).toEqual([126, 126]);
  });

  it("exec: detach keys from the client's config file (sent as detachKeys) detach", async () => {
    const v = await python(`
import socket
api = client.api
api._general_configs["detachKeys"] = "ctrl-x,y"
c = client.containers.run(${JSON.stringify(ctx.env.busybox)}, "sleep 600", detach=True)
x = api.exec_create(c.id, "cat", stdin=True, tty=True)
emit('keys', api.exec_inspect(x)["DetachKeys"])
sock = api.exec_start(x, tty=True, socket=True)._sock
sock.settimeout(20)
sock.sendall(b"typed\\n")
seen = b""
while b"typed" not in seen:
    seen += sock.recv(4096)
sock.sendall(b"\\x18y")
rest = b""
while True:
    chunk = sock.recv(4096)
    if not chunk:
        break
    rest += chunk
emit('ended', True)
emit('running', api.exec_inspect(x)["Running"])
c.remove(force=True)
`);
    expect(v.keys).toBe('ctrl-x,y');
    // The stream ended on the keys; the exec itself goes on.
    expect([v.ended, v.running]).toEqual([true, true]);
  });

  it('update_container changes limits and the restart policy, refused where dockerd refuses', async () => {
    const v = await python(`
api = client.api
c = client.containers.run(${JSON.stringify(ctx.env.busybox)}, "sleep 600", detach=True, mem_limit="64m",
                          cpu_shares=2, restart_policy={"Name": "always"})
emit('warnings', api.update_container(c.id, mem_limit="32m",
     restart_policy={"Name": "on-failure", "MaximumRetryCount": 3}))
c.update(cpu_shares=3)
c.reload()
hc = c.attrs["HostConfig"]
emit('hostConfig', [hc["Memory"], hc["MemorySwap"], hc["CpuShares"], hc["RestartPolicy"]])
emit('cgroup', c.exec_run("cat /sys/fs/cgroup/memory/memory.limit_in_bytes /sys/fs/cgroup/cpu/cpu.shares").output)
try:
    api.update_container(c.id, mem_limit="512m")
except docker.errors.APIError as e:
    emit('conflict', [e.status_code, e.explanation])
c.remove(force=True)
later = client.containers.create(${JSON.stringify(ctx.env.busybox)}, "cat /sys/fs/cgroup/memory/memory.limit_in_bytes")
later.update(mem_limit="48m", memswap_limit="96m")
later.start()
later.wait()
emit('atStart', later.logs())
`);
    const MB = 1024 * 1024;
    expect(v.warnings).toEqual({ Warnings: null });
    expect(v.hostConfig).toEqual([32 * MB, 128 * MB, 3, { Name: 'on-failure', MaximumRetryCount: 3 }]);
    expect(v.cgroup).toEqual(bytes(`${32 * MB}\n3\n`));
    expect(v.conflict[0]).toBe(409);
    expect(v.conflict[1]).toMatch(/^Cannot update container [0-9a-f]{64}: Memory limit should be smaller than/);
    expect(v.atStart).toEqual(bytes(`${48 * MB}\n`));
  });

  it('mem_swappiness is applied on cgroup v1 and dropped with a warning on v2; prune reports the space it freed', async () => {
    const v = await python(`
api = client.api
img = ${JSON.stringify(ctx.env.busybox)}
created = api.create_container(img, "cat /sys/fs/cgroup/memory/memory.swappiness",
                               host_config=api.create_host_config(mem_swappiness=40))
emit('warnings', created["Warnings"])
emit('inspected', api.inspect_container(created)["HostConfig"]["MemorySwappiness"])
api.start(created)
api.wait(created)
emit('swappiness', api.logs(created))
wrote = client.containers.run(img, "sh -c 'head -c 200000 /dev/zero > /data'", detach=True)
wrote.wait()
pruned = client.containers.prune()
emit('pruned', [created["Id"] in pruned["ContainersDeleted"], wrote.id in pruned["ContainersDeleted"]])
emit('reclaimed', pruned["SpaceReclaimed"])
`);
    if (existsSync('/sys/fs/cgroup/cgroup.controllers')) {
      expect(v.warnings).toEqual([
        'Your kernel does not support memory swappiness capabilities or the cgroup is not mounted. Memory swappiness discarded.',
      ]);
      expect(v.inspected).toBeNull();
    } else {
      expect([v.warnings, v.inspected, v.swappiness]).toEqual([[], 40, bytes('40\n')]);
    }
    expect(v.pruned).toEqual([true, true]);
    expect(v.reclaimed).toBeGreaterThanOrEqual(200_000);
  });
});

describe('volumes', () => {
  it('volumes.create() with no name makes an anonymous volume, which volumes.prune() takes at API 1.43; named ones stay', async () => {
    const v = await python(`
newer = docker.DockerClient(base_url=${JSON.stringify(ctx.daemon.host)}, version="1.43")
unnamed = newer.volumes.create()
named = newer.volumes.create("py-named")
emit('labels', unnamed.attrs["Labels"])
pruned = newer.volumes.prune()
emit('pruned', pruned["VolumesDeleted"] == [unnamed.name])
emit('left', [v.name for v in newer.volumes.list()])
named.remove()
`);
    expect(v.labels).toEqual({ 'com.docker.volume.anonymous': '' });
    expect(v.pruned).toBe(true);
    expect(v.left).toEqual(['py-named']);
  });
});
