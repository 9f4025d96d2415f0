// The docker CLI's volume verbs and mounts: volume create/ls/inspect/rm/prune,
// run -v name:/data (data kept across containers and a berthd restart), an
// image's VOLUME filled from the image (copy-up), --mount type=volume and
// type=tmpfs, --tmpfs, --volumes-from, and rm -v.
import { beforeAll, describe, expect, it } from 'vitest';
import { dockerCli, type Cli } from '../harness/cli.js';
import { useEnv } from '../harness/env.js';

const ctx = useEnv();
let docker: Cli;
beforeAll(() => {
  docker = dockerCli(ctx.daemon);
});
const ok = (args: string[]) => docker.ok(args);
const run = (args: string[]) => ok(['run', '--rm', ...args]);

describe('docker volume', () => {
  let image: string;
  beforeAll(() => {
    image = ctx.env.busybox;
  });

  it('create, ls, inspect, rm, prune', async () => {
    expect((await ok(['volume', 'create', '--label', 'k=v', 'v1'])).trim()).toBe('v1');
    const anon = (await ok(['volume', 'create'])).trim();
    expect(anon).toMatch(/^[0-9a-f]{64}$/);
    expect(await ok(['volume', 'ls', '--format', '{{.Driver}} {{.Name}}'])).toMatch(/^local v1$/m);
    expect((await ok(['volume', 'ls', '-q', '--filter', 'label=k=v'])).trim()).toBe('v1');
    const [info] = JSON.parse(await ok(['volume', 'inspect', 'v1']));
    expect(info).toMatchObject({ Name: 'v1', Driver: 'local', Scope: 'local', Labels: { k: 'v' } });
    expect(info.Mountpoint).toBe(`${ctx.daemon.dataRoot}/volumes/v1/_data`);
    expect(Number.isNaN(Date.parse(info.CreatedAt))).toBe(false);
    const bad = await docker(['volume', 'create', 'a/b']);
    expect(bad.stderr).toContain('includes invalid characters for a local volume name');
    expect((await ok(['volume', 'rm', 'v1', anon])).trim().split('\n')).toEqual(['v1', anon]);
    expect((await docker(['volume', 'inspect', 'v1'])).stderr).toContain('no such volume');
    // prune: anonymous volumes only, unless --all.
    await ok(['volume', 'create', 'named']);
    await ok(['run', '--name', 'anon-user', image, 'true']);
    await ok(['rm', 'anon-user']);
    const pruned = await ok(['volume', 'prune', '-f']);
    expect(pruned).not.toContain('named');
    expect(await ok(['volume', 'prune', '-f', '--all'])).toContain('named');
    expect((await ok(['volume', 'ls', '-q'])).trim()).toBe('');
  });

  it('run --rm -v /path: the anonymous volume goes with the container', async () => {
    expect(await run(['-v', '/scratch', image, 'sh', '-c', 'grep -c " /scratch " /proc/mounts'])).toBe('1\n');
    expect((await ok(['volume', 'ls', '-q'])).trim()).toBe('');
  });

  it('keeps a named volume across containers; refuses to remove it in use', async () => {
    await run(['-v', 'data:/data', image, 'sh', '-c', 'echo kept > /data/f']);
    expect(await run(['-v', 'data:/data:ro', image, 'cat', '/data/f'])).toBe('kept\n');
    const ro = await docker(['run', '--rm', '-v', 'data:/data:ro', image, 'touch', '/data/g']);
    expect(ro.code).not.toBe(0);
    await ok(['create', '--name', 'holder', '-v', 'data:/data', image, 'true']);
    const busy = await docker(['volume', 'rm', 'data']);
    expect(busy.stderr).toMatch(/remove data: volume is in use - \[[0-9a-f]{64}\]/);
    expect((await ok(['ps', '-a', '-q', '--filter', 'volume=data'])).trim()).not.toBe('');
    const [mount] = JSON.parse(await ok(['inspect', '-f', '{{json .Mounts}}', 'holder']));
    expect(mount).toMatchObject({ Type: 'volume', Name: 'data', Destination: '/data', Driver: 'local', RW: true });
    // rm -v never takes a named volume.
    await ok(['rm', '-v', 'holder']);
    await ctx.daemon.restart();
    expect(await run(['-v', 'data:/data', image, 'cat', '/data/f'])).toBe('kept\n');
    await ok(['volume', 'rm', 'data']);
  });

  it("fills a new volume from the image's content, ownership and modes kept, unless nocopy", async () => {
    await ok([
      'run',
      '--name',
      'seed',
      image,
      'sh',
      '-c',
      'mkdir -p /seed && echo s > /seed/f && chown -R 7:8 /seed && chmod 750 /seed',
    ]);
    const img = (await ok(['commit', '--change', 'VOLUME /seed', 'seed', 'berth-test/volimg:1'])).trim();
    await ok(['rm', 'seed']);
    // An image's VOLUME is an anonymous volume, filled from the image.
    expect(await run([img, 'sh', '-c', 'cat /seed/f; stat -c "%u:%g %a" /seed'])).toBe('s\n7:8 750\n');
    await ok(['run', '--name', 'c1', '-v', 'filled:/seed', img, 'true']);
    expect(await run(['-v', 'filled:/x', image, 'cat', '/x/f'])).toBe('s\n');
    expect(await run(['-v', 'empty:/seed:nocopy', img, 'ls', '-A', '/seed'])).toBe('');
    // rm -v removes the anonymous volume of a container, not its named one.
    await ok(['run', '--name', 'c2', img, 'true']);
    const [anon] = JSON.parse(await ok(['inspect', '-f', '{{json .Mounts}}', 'c2']));
    expect(anon).toMatchObject({ Type: 'volume', Destination: '/seed' });
    await ok(['rm', '-v', 'c1', 'c2']);
    const left = (await ok(['volume', 'ls', '-q'])).trim().split('\n');
    expect(left).toContain('filled');
    expect(left).not.toContain(anon.Name);
    await ok(['volume', 'rm', 'filled', 'empty']);
    await ok(['rmi', img]);
  });

  it("copies up from inside the container's root, whatever symlink the image has at the path", async () => {
    // /seed a symlink climbing out of the root: it resolves to the image's own /etc, never the host's.
    await ok(['run', '--name', 'linker', image, 'ln', '-s', '../../../../../../../../etc', '/seed']);
    const img = (await ok(['commit', '--change', 'VOLUME /seed', 'linker', 'berth-test/volsym:1'])).trim();
    await ok(['rm', 'linker']);
    await ok(['run', '--name', 'c3', img, 'true']);
    const [m] = JSON.parse(await ok(['inspect', '-f', '{{json .Mounts}}', 'c3']));
    const copied = await run(['-v', `${m.Name}:/v`, image, 'ls', '/v']);
    expect(copied.split('\n')).toContain('passwd');
    // The host's /etc has an os-release; the image's has none.
    expect(copied.split('\n')).not.toContain('os-release');
    await ok(['rm', '-v', 'c3']);
    await ok(['rmi', img]);
  });

  it('--mount type=volume and type=tmpfs, --tmpfs', async () => {
    const out = await run([
      '--mount',
      'type=volume,source=mv,target=/m,volume-label=a=b',
      '--mount',
      'type=tmpfs,target=/t,tmpfs-size=1048576,tmpfs-mode=1770',
      '--tmpfs',
      '/run2:size=2m',
      image,
      'sh',
      '-c',
      'touch /m/x && stat -c %a /t && grep -E " /(t|run2) " /proc/mounts | cut -d" " -f2,3,4 | sort',
    ]);
    const [mode, run2, t] = out.trim().split('\n');
    expect(mode).toBe('1770');
    expect(run2).toMatch(/^\/run2 tmpfs rw,nosuid,nodev,noexec,.*size=2048k/);
    expect(t).toMatch(/^\/t tmpfs rw,nosuid,nodev,noexec,.*size=1024k/);
    expect(JSON.parse(await ok(['volume', 'inspect', '-f', '{{json .Labels}}', 'mv']))).toEqual({ a: 'b' });
    await ok(['volume', 'rm', 'mv']);
  });

  it('--mount volume-subpath= mounts part of a volume; one that is not there fails the run', async () => {
    await run(['-v', 'subvol:/v', image, 'sh', '-c', 'mkdir -p /v/sub && echo part > /v/sub/f && echo whole > /v/f']);
    expect(await run(['--mount', 'type=volume,src=subvol,dst=/m,volume-subpath=sub', image, 'cat', '/m/f'])).toBe(
      'part\n',
    );
    const missing = await docker([
      'run',
      '--rm',
      '--mount',
      'type=volume,src=subvol,dst=/m,volume-subpath=nope',
      image,
      'true',
    ]);
    expect(missing.code).not.toBe(0);
    expect(missing.stderr).toContain('cannot access path');
    const escaping = await docker([
      'run',
      '--rm',
      '--mount',
      'type=volume,src=subvol,dst=/m,volume-subpath=../x',
      image,
      'true',
    ]);
    expect(escaping.stderr).toContain('subpath must be a relative path within the volume');
    await ok(['volume', 'rm', 'subvol']);
  });

  it('volume prune takes a volume created without a name (anonymous), and --all the named ones too', async () => {
    const unnamed = (await ok(['volume', 'create'])).trim();
    await ok(['volume', 'create', 'pruned-named']);
    expect(JSON.parse(await ok(['volume', 'inspect', '-f', '{{json .Labels}}', unnamed]))).toEqual({
      'com.docker.volume.anonymous': '',
    });
    const pruned = await ok(['volume', 'prune', '-f']);
    expect(pruned).toContain(unnamed);
    expect(pruned).not.toContain('pruned-named');
    expect(await ok(['volume', 'prune', '-f', '--all'])).toContain('pruned-named');
    expect((await ok(['volume', 'ls', '-q'])).trim()).toBe('');
  });

  it('--volumes-from takes the volumes and binds of another container, read-only when asked', async () => {
    await ok(['create', '--name', 'donor', '-v', 'shared:/shared', '-v', '/tmp:/hosttmp:ro', image, 'true']);
    await run(['--volumes-from', 'donor', image, 'sh', '-c', 'echo from > /shared/f']);
    expect(
      await run(['--volumes-from', 'donor:ro', image, 'sh', '-c', 'cat /shared/f; touch /shared/g || echo ro']),
    ).toBe('from\nro\n');
    const mounts = JSON.parse(
      await ok(['create', '--volumes-from', 'donor', image, 'true']).then((id) =>
        ok(['inspect', '-f', '{{json .Mounts}}', id.trim()]),
      ),
    );
    expect(mounts.map((m: { Destination: string }) => m.Destination).sort()).toEqual(['/hosttmp', '/shared']);
    await ok(['rm', '-f', ...(await ok(['ps', '-a', '-q'])).trim().split('\n')]);
    await ok(['volume', 'rm', 'shared']);
  });
});
