// Volumes through the API: create (named, generated, DriverOpts), list and its
// filters, inspect, remove (in use, force), prune by API version, events;
// containers' mounts: Binds of named and anonymous volumes, Mounts of type
// volume and tmpfs, HostConfig.Tmpfs, a volume with DriverOpts mounted at
// start, Mounts in inspect and in the list, the volume filter, and removal
// with v=1.
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import type { Daemon } from '../harness/daemon.js';
import { useEnv, type Env } from '../harness/env.js';

const ctx = useEnv();
let env: Env;
let d: Daemon;
beforeAll(() => {
  ({ env, daemon: d } = ctx);
});

const q = (v: unknown) => encodeURIComponent(JSON.stringify(v));

async function create(body: Record<string, unknown>, status = 201) {
  const r = await d.request('POST', '/volumes/create', { body });
  expect(r.status, r.text).toBe(status);
  return r.json;
}

async function container(hostConfig: Record<string, unknown>, cmd = ['true'], extra: Record<string, unknown> = {}) {
  const c = await d.request('POST', '/containers/create', {
    body: { Image: env.busybox, Cmd: cmd, HostConfig: hostConfig, ...extra },
  });
  expect(c.status, c.text).toBe(201);
  return c.json.Id as string;
}

/** Starts a container and waits for it to end; its output (no tty). */
async function runToEnd(id: string): Promise<string> {
  const s = await d.request('POST', `/containers/${id}/start`);
  expect(s.status, s.text).toBe(204);
  const w = await d.request('POST', `/containers/${id}/wait`);
  expect(w.json.StatusCode).toBe(0);
  const logs = await d.request('GET', `/containers/${id}/logs?stdout=1&stderr=1`);
  // Strip the multiplexing headers (8 bytes per frame).
  const buf = logs.body;
  let out = '';
  for (let i = 0; i + 8 <= buf.length; ) {
    const n = buf.readUInt32BE(i + 4);
    out += buf.subarray(i + 8, i + 8 + n).toString();
    i += 8 + n;
  }
  return out;
}

const remove = (id: string, v = false) => d.request('DELETE', `/containers/${id}?force=1${v ? '&v=1' : ''}`);

describe('volumes API', () => {
  it('creates, lists with filters, inspects and removes', async () => {
    const v = await create({ Name: 'alpha', Labels: { team: 'a' } });
    expect(v).toMatchObject({ Name: 'alpha', Driver: 'local', Scope: 'local', Labels: { team: 'a' }, Options: null });
    expect(v.Mountpoint).toBe(path.join(d.dataRoot, 'volumes', 'alpha', '_data'));
    // The same name again answers the volume there is.
    expect((await create({ Name: 'alpha' })).CreatedAt).toBe(v.CreatedAt);
    const gen = await create({});
    expect(gen.Name).toMatch(/^[0-9a-f]{64}$/);
    const list = await d.request('GET', '/volumes');
    expect(list.json.Warnings).toEqual([]);
    expect(list.json.Volumes.map((x: { Name: string }) => x.Name).sort()).toEqual(['alpha', gen.Name].sort());
    const names = async (filters: unknown) =>
      (await d.request('GET', `/volumes?filters=${q(filters)}`)).json.Volumes.map((x: { Name: string }) => x.Name);
    expect(await names({ label: ['team=a'] })).toEqual(['alpha']);
    expect(await names({ name: ['alp'] })).toEqual(['alpha']);
    expect(await names({ driver: ['local'] })).toHaveLength(2);
    expect(await names({ dangling: ['false'] })).toEqual([]);
    expect((await d.request('GET', `/volumes?filters=${q({ nope: ['x'] })}`)).status).toBe(400);
    expect((await d.request('GET', '/volumes/alpha')).json.Name).toBe('alpha');
    const missing = await d.request('GET', '/volumes/nope');
    expect(missing.status).toBe(404);
    expect(missing.json.message).toBe('get nope: no such volume');
    expect((await d.request('DELETE', '/volumes/nope')).status).toBe(404);
    expect((await d.request('DELETE', '/volumes/nope?force=1')).status).toBe(204);
    for (const n of ['alpha', gen.Name]) expect((await d.request('DELETE', `/volumes/${n}`)).status).toBe(204);
  });

  it("refuses dockerd's bad names, unknown drivers and options", async () => {
    expect((await create({ Name: 'a' }, 400)).message).toBe(
      'volume name is too short, names should be at least two alphanumeric characters',
    );
    expect((await create({ Name: '-x' }, 400)).message).toMatch(/includes invalid characters for a local volume name/);
    expect((await create({ Name: 'x1', Driver: 'nfs-plugin' }, 404)).message).toMatch(/plugin "nfs-plugin" not found/);
    expect((await create({ Name: 'x1', DriverOpts: { colour: 'red' } }, 400)).message).toBe('invalid option: "colour"');
    expect((await create({ Name: 'x1', DriverOpts: { type: 'tmpfs' } }, 400)).message).toBe(
      'missing required option: "device"',
    );
  });

  it('refuses to remove a volume in use, dangling otherwise; prunes anonymous ones from 1.42, all before', async () => {
    const id = await container({ Binds: ['busy:/data'] });
    const busy = await d.request('DELETE', '/volumes/busy?force=1');
    expect(busy.status).toBe(409);
    expect(busy.json.message).toBe(`remove busy: volume is in use - [${id}]`);
    const dangling = (await d.request('GET', `/volumes?filters=${q({ dangling: ['true'] })}`)).json.Volumes;
    expect(dangling.map((x: { Name: string }) => x.Name)).not.toContain('busy');
    await remove(id);
    await create({ Name: 'kept', Labels: { keep: '1' } });
    const anon = await container({}, ['true'], { Volumes: { '/scratch': {} } });
    const [m] = (await d.request('GET', `/containers/${anon}/json`)).json.Mounts;
    expect(m).toMatchObject({ Type: 'volume', Destination: '/scratch', Driver: 'local', RW: true });
    await remove(anon);
    const pruned = await d.request('POST', '/volumes/prune');
    expect(pruned.json.VolumesDeleted).toEqual([m.Name]);
    expect(pruned.json.SpaceReclaimed).toBe(0);
    const labelled = await d.request('POST', `/volumes/prune?filters=${q({ all: ['true'], 'label!': ['keep'] })}`);
    expect(labelled.json.VolumesDeleted).toEqual(['busy']);
    const old = await d.request('POST', '/v1.41/volumes/prune');
    expect(old.json.VolumesDeleted).toEqual(['kept']);
  });

  it('labels a volume created without a name anonymous, so that prune (API 1.42+) takes it', async () => {
    const unnamed = await create({ Labels: { mine: 'yes' } });
    expect(unnamed.Labels).toEqual({ mine: 'yes', 'com.docker.volume.anonymous': '' });
    const named = await create({ Name: 'not-anonymous' });
    expect(named.Labels).toEqual({});
    const pruned = await d.request('POST', '/v1.42/volumes/prune');
    expect(pruned.json.VolumesDeleted).toEqual([unnamed.Name]);
    const all = await d.request('POST', `/v1.42/volumes/prune?filters=${q({ all: ['true'] })}`);
    expect(all.json.VolumesDeleted).toEqual(['not-anonymous']);
  });

  it('publishes create, mount, unmount and destroy events', async () => {
    const since = Math.floor(Date.now() / 1000) - 1;
    const id = await container({ Binds: ['evented:/e'] });
    await runToEnd(id);
    await remove(id);
    await d.request('DELETE', '/volumes/evented');
    const until = Math.floor(Date.now() / 1000) + 1;
    const r = await d.request(
      'GET',
      `/events?since=${since}&until=${until}&filters=${q({ type: ['volume'], volume: ['evented'] })}`,
    );
    const events = r.text
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(events.map((e) => e.Action)).toEqual(['create', 'mount', 'unmount', 'destroy']);
    expect(events[1].Actor).toMatchObject({
      ID: 'evented',
      Attributes: { container: id, destination: '/e', driver: 'local', 'read/write': 'true' },
    });
  });

  it('mounts volumes and tmpfs as asked; Mounts in inspect and the list; the volume filter; v=1', async () => {
    const host = mkdtempSync(path.join(os.tmpdir(), 'berth-vol-'));
    writeFileSync(path.join(host, 'h'), 'host\n');
    const id = await container(
      {
        Binds: ['named:/n:ro', `${host}:/h`],
        Mounts: [
          { Type: 'volume', Target: '/anon' },
          { Type: 'tmpfs', Target: '/t', TmpfsOptions: { SizeBytes: 2 * 1024 * 1024, Mode: 0o700 } },
        ],
        Tmpfs: { '/mapped': 'size=1m,exec' },
      },
      ['sh', '-c', 'cat /h/h; touch /n/x 2>/dev/null || echo ro; grep -E " /(t|mapped) " /proc/mounts | sort'],
    );
    const out = await runToEnd(id);
    expect(out).toMatch(/^host\nro\n/);
    expect(out).toMatch(/\/mapped tmpfs rw,nosuid,nodev,.*size=1024k/);
    expect(out).not.toMatch(/\/mapped tmpfs [^ ]*noexec/);
    expect(out).toMatch(/\/t tmpfs rw,nosuid,nodev,noexec,.*size=2048k,mode=700/);
    const mounts = (await d.request('GET', `/containers/${id}/json`)).json.Mounts;
    const byDest = Object.fromEntries(mounts.map((m: { Destination: string }) => [m.Destination, m]));
    expect(Object.keys(byDest).sort()).toEqual(['/anon', '/h', '/n', '/t']);
    expect(byDest['/n']).toEqual({
      Type: 'volume',
      Name: 'named',
      Source: path.join(d.dataRoot, 'volumes', 'named', '_data'),
      Destination: '/n',
      Driver: 'local',
      Mode: 'ro',
      RW: false,
      Propagation: '',
    });
    expect(byDest['/h']).toMatchObject({ Type: 'bind', Source: host, RW: true, Propagation: 'rprivate' });
    expect(byDest['/t']).toMatchObject({ Type: 'tmpfs', Source: '', RW: true });
    const listed = await d.request('GET', `/containers/json?all=1&filters=${q({ volume: ['named'] })}`);
    expect(listed.json.map((c: { Id: string }) => c.Id)).toEqual([id]);
    expect(listed.json[0].Mounts).toHaveLength(4);
    expect((await d.request('GET', `/containers/json?all=1&filters=${q({ volume: ['/nowhere'] })}`)).json).toEqual([]);
    await remove(id, true);
    const left = (await d.request('GET', '/volumes')).json.Volumes.map((x: { Name: string }) => x.Name);
    expect(left).toEqual(['named']);
    await d.request('DELETE', '/volumes/named');
  });

  it('mounts a volume made with DriverOpts (a tmpfs) at start, not at create; unmounts it after the last user', async () => {
    const v = await create({ Name: 'ramvol', DriverOpts: { type: 'tmpfs', device: 'tmpfs', o: 'size=1m' } });
    expect(v.Options).toEqual({ type: 'tmpfs', device: 'tmpfs', o: 'size=1m' });
    const mounted = () => readFileSync('/proc/self/mountinfo', 'utf8').includes(` ${v.Mountpoint} `);
    const id = await container({ Binds: ['ramvol:/r'] }, ['sh', '-c', 'grep " /r " /proc/mounts | cut -d" " -f3']);
    expect(mounted()).toBe(false);
    expect(await runToEnd(id)).toBe('tmpfs\n');
    expect(mounted()).toBe(false);
    await remove(id);
    // A user running across a restart of berthd keeps it mounted until it ends.
    const long = await container({ Binds: ['ramvol:/r'] }, [
      'sh',
      '-c',
      'echo x > /r/f; trap "exit 0" TERM; while :; do sleep 1; done',
    ]);
    expect((await d.request('POST', `/containers/${long}/start`)).status).toBe(204);
    expect(mounted()).toBe(true);
    await d.restart();
    expect(mounted()).toBe(true);
    expect((await d.request('POST', `/containers/${long}/stop`)).status).toBe(204);
    expect(mounted()).toBe(false);
    await remove(long);
    expect((await d.request('DELETE', '/volumes/ramvol')).status).toBe(204);
  });

  it('binds a host directory with DriverOpts type=none o=bind; removing the volume leaves the directory', async () => {
    const host = mkdtempSync(path.join(os.tmpdir(), 'berth-bindvol-'));
    writeFileSync(path.join(host, 'kept'), 'host file\n');
    await create({ Name: 'hostdir', DriverOpts: { type: 'none', device: host, o: 'bind' } });
    const id = await container({ Binds: ['hostdir:/h'] }, ['sh', '-c', 'cat /h/kept; echo new > /h/new']);
    expect(await runToEnd(id)).toBe('host file\n');
    await remove(id);
    expect((await d.request('DELETE', '/volumes/hostdir')).status).toBe(204);
    expect(readFileSync(path.join(host, 'kept'), 'utf8')).toBe('host file\n');
    expect(readFileSync(path.join(host, 'new'), 'utf8')).toBe('new\n');
  });

  it('mounts a subdirectory or a file of a volume (VolumeOptions.Subpath), checked as dockerd checks it', async () => {
    await create({ Name: 'sub' });
    const init = await container({ Mounts: [{ Type: 'volume', Source: 'sub', Target: '/v' }] }, [
      'sh',
      '-c',
      'mkdir -p /v/dir /v/empty /v/hack && echo in-dir > /v/dir/f && echo file > /v/file && ' +
        'ln -s ../dir /v/hack/good && ln -s / /v/hack/root && ln -s root /v/hack/bad',
    ]);
    await runToEnd(init);
    await remove(init);
    const mounting = (Subpath: string, Target = '/m', cmd = ['ls', '/m']) =>
      d.request('POST', '/containers/create', {
        body: {
          Image: env.busybox,
          Cmd: cmd,
          HostConfig: { Mounts: [{ Type: 'volume', Source: 'sub', Target, VolumeOptions: { Subpath } }] },
        },
      });
    const ran: string[] = [];
    for (const [subpath, target, cmd, out] of [
      ['dir', '/m', ['cat', '/m/f'], 'in-dir\n'],
      ['hack/good', '/m', ['cat', '/m/f'], 'in-dir\n'],
      ['./dir/', '/m', ['cat', '/m/f'], 'in-dir\n'],
      ['file', '/etc/localtime', ['cat', '/etc/localtime'], 'file\n'],
      // An empty subdirectory is filled from the image, as an empty volume is.
      ['empty', '/bin', ['ls', '/bin/busybox'], '/bin/busybox\n'],
    ] as const) {
      const c = await mounting(subpath, target, [...cmd]);
      expect(c.status, c.text).toBe(201);
      ran.push(c.json.Id);
      expect(await runToEnd(c.json.Id), subpath).toBe(out);
    }
    const [m] = (await d.request('GET', `/containers/${ran[0]}/json`)).json.Mounts;
    expect(m).toMatchObject({
      Type: 'volume',
      Name: 'sub',
      Source: `${d.dataRoot}/volumes/sub/_data`,
      Destination: '/m',
    });
    // Refused at create: lexically outside, or on an anonymous volume.
    for (const bad of ['../../../etc/passwd', '/etc', 'a/../..']) {
      const r = await mounting(bad);
      expect(r.status, bad).toBe(400);
      expect(r.json.message).toBe(
        'invalid mount config for type "volume": subpath must be a relative path within the volume',
      );
    }
    const anon = await d.request('POST', '/containers/create', {
      body: {
        Image: env.busybox,
        HostConfig: { Mounts: [{ Type: 'volume', Target: '/m', VolumeOptions: { Subpath: 'x' } }] },
      },
    });
    expect(anon.json.message).toBe(
      'invalid mount config for type "volume": must not set Subpath when using anonymous volumes',
    );
    // Refused at start: not there, or a symlink that leads out.
    for (const [subpath, status, message] of [
      ['nothere', 404, `cannot access path ${d.dataRoot}/volumes/sub/_data/nothere: lstat`],
      ['hack/root', 400, 'path concatenation escapes the base directory'],
      ['hack/bad', 400, 'path concatenation escapes the base directory'],
    ] as const) {
      const c = await mounting(subpath);
      expect(c.status, c.text).toBe(201);
      ran.push(c.json.Id);
      const s = await d.request('POST', `/containers/${c.json.Id}/start`);
      expect(s.status, subpath).toBe(status);
      expect(s.json.message).toContain(message);
    }
    // docker cp sees the subpath while the container runs; stopped, it is refused rather than misplaced.
    const running = await mounting('dir', '/m', ['sleep', '60']);
    ran.push(running.json.Id);
    expect((await d.request('POST', `/containers/${running.json.Id}/start`)).status).toBe(204);
    const copied = await d.request('GET', `/containers/${running.json.Id}/archive?path=/m/f`);
    expect(copied.status).toBe(200);
    expect(copied.body.toString('latin1')).toContain('in-dir');
    await d.request('POST', `/containers/${running.json.Id}/kill`);
    await d.request('POST', `/containers/${running.json.Id}/wait`);
    const stopped = await d.request('GET', `/containers/${running.json.Id}/archive?path=/m/f`);
    expect(stopped.status).toBe(409);
    expect(stopped.json.message).toContain('only while the container runs');
    for (const id of ran) await remove(id);
    // Nothing stays bound once the containers are gone.
    expect(readFileSync('/proc/self/mountinfo', 'utf8')).not.toContain(`${d.execRoot}/volume-subpaths`);
    expect((await d.request('DELETE', '/volumes/sub')).status).toBe(204);
  });

  it('refuses bad mounts in dockerd words', async () => {
    const refused = async (h: Record<string, unknown>) => {
      const r = await d.request('POST', '/containers/create', { body: { Image: env.busybox, HostConfig: h } });
      expect(r.status, r.text).toBe(400);
      return r.json.message as string;
    };
    expect(await refused({ Binds: ['x:/a', 'y:/a'] })).toBe('Duplicate mount point: /a');
    expect(await refused({ Binds: ['a/b:/a'] })).toMatch(/includes invalid characters for a local volume name/);
    expect(await refused({ Binds: ['v1:/a:bogus'] })).toBe('invalid mode: bogus');
    expect(await refused({ Mounts: [{ Type: 'tmpfs', Source: 'x', Target: '/t' }] })).toBe(
      'invalid mount config for type "tmpfs": field Source must not be specified',
    );
    expect(await refused({ Mounts: [{ Type: 'volume', Target: '/v', BindOptions: {} }] })).toBe(
      'BindOptions must not be specified on mount type "volume"',
    );
    // Another volume driver is looked up only when a volume would be made with it, as with dockerd.
    const driverless = await container({ VolumeDriver: 'foo' });
    expect((await d.request('GET', `/containers/${driverless}/json`)).json.HostConfig.VolumeDriver).toBe('foo');
    await remove(driverless);
    const plugin = await d.request('POST', '/containers/create', {
      body: { Image: env.busybox, HostConfig: { VolumeDriver: 'foo', Binds: ['vf:/vf'] } },
    });
    expect([plugin.status, plugin.json.message]).toEqual([
      404,
      'error looking up volume plugin foo: plugin "foo" not found',
    ]);
    const donor = await d.request('POST', '/containers/create', {
      body: { Image: env.busybox, HostConfig: { VolumesFrom: ['nosuch'] } },
    });
    // dockerd's InvalidParameter, as moby's TestCreateVolumesFromNonExistingContainer reads it.
    expect(donor.status).toBe(400);
    expect(donor.json.message).toBe('No such container: nosuch');
    expect((await d.request('GET', '/volumes')).json.Volumes).toEqual([]);
  });
});
