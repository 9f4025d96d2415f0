// Debian's python3-docker (5.0.3, run by /usr/bin/python3) against berthd:
// containers.run in the foreground and detached, list, stop, logs, the errors
// it raises, and images.pull / images.list.
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
c = client.containers.run(${JSON.stringify(ctx.env.busybox)}, ["sh", "-c", 'echo started; trap "echo bye; exit 0" TERM; while true; do sleep 0.1; done'], detach=True, name="py-bg")
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
});
