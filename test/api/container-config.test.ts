// A create's Config and HostConfig fields as dockerd takes them (issue 27):
// each applied one is seen inside the container and in inspect; each refusal
// is a 400 with dockerd's words; what dockerd takes and ignores in a context
// is taken, and the container runs.
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { MASKED_PATHS, READONLY_PATHS } from '../../src/engine/containers/spec/paths.js';
import type { Daemon } from '../harness/daemon.js';
import { type Env, useEnv } from '../harness/env.js';
import { demuxText } from '../harness/streams.js';

const ctx = useEnv();
let env: Env;
let d: Daemon;
beforeAll(() => {
  ({ env, daemon: d } = ctx);
});

type Body = Record<string, unknown>;

async function create(body: Body, at = '/v1.47'): Promise<{ id: string; warnings: string[] }> {
  const r = await d.request('POST', `${at}/containers/create`, {
    body: { Image: env.busybox, Cmd: ['true'], ...body },
  });
  expect(r.status, r.text).toBe(201);
  return { id: r.json.Id, warnings: r.json.Warnings };
}

/** Runs `sh -c script` to its end: its output (stdout and stderr) and its inspect. */
async function run(script: string, body: Body = {}): Promise<{ out: string; inspect: Record<string, any> }> {
  const { id } = await create({ Cmd: ['sh', '-c', script], ...body });
  const s = await d.request('POST', `/containers/${id}/start`);
  expect(s.status, s.text).toBe(204);
  const w = await d.request('POST', `/containers/${id}/wait`);
  const logs = demuxText((await d.request('GET', `/containers/${id}/logs?stdout=1&stderr=1`)).body).trim();
  expect(w.json.StatusCode, logs).toBe(0);
  return { out: logs, inspect: await inspect(id) };
}

const inspect = async (id: string) => (await d.request('GET', `/containers/${id}/json`)).json;

/** The answer to a create that is refused: its status and message. */
async function refusal(body: Body, query = ''): Promise<[number, string]> {
  const r = await d.request('POST', `/v1.47/containers/create${query}`, {
    body: { Image: env.busybox, Cmd: ['true'], ...body },
  });
  return [r.status, r.json?.message];
}

/** The OCI spec berth wrote for a container (its bundle holds config.json beside the hostname file). */
const specOf = (i: Record<string, any>) =>
  JSON.parse(readFileSync(path.join(path.dirname(i.HostnamePath), 'config.json'), 'utf8'));

// A masked file is /dev/null bound over it (a character device); a read-only path is a read-only mount.
const PROBE =
  'for p in /proc/keys /proc/cpuinfo; do [ -c $p ] && echo "$p masked" || echo "$p plain"; done; ' +
  'for m in /proc/sys /etc; do awk -v m=$m \'$5 == m { split($6, o, ","); print m, o[1] }\' /proc/self/mountinfo | tail -1; done';

describe('MaskedPaths and ReadonlyPaths', () => {
  it("none given: dockerd's defaults, listed by inspect and applied", async () => {
    const { out, inspect: i } = await run(PROBE);
    expect(i.HostConfig.MaskedPaths).toEqual([...MASKED_PATHS]);
    expect(i.HostConfig.ReadonlyPaths).toEqual([...READONLY_PATHS]);
    expect(out.split('\n')).toEqual(['/proc/keys masked', '/proc/cpuinfo plain', '/proc/sys ro']);
  });

  it('custom ones (as kubelet sends them) are applied and listed; empty lists are none', async () => {
    const custom = await run(PROBE, { HostConfig: { MaskedPaths: ['/proc/cpuinfo'], ReadonlyPaths: ['/etc'] } });
    expect(custom.inspect.HostConfig.MaskedPaths).toEqual(['/proc/cpuinfo']);
    expect(custom.inspect.HostConfig.ReadonlyPaths).toEqual(['/etc']);
    expect(custom.out.split('\n')).toEqual(['/proc/keys plain', '/proc/cpuinfo masked', '/etc ro']);
    const none = await run(PROBE, { HostConfig: { MaskedPaths: [], ReadonlyPaths: [] } });
    expect([none.inspect.HostConfig.MaskedPaths, none.inspect.HostConfig.ReadonlyPaths]).toEqual([[], []]);
    expect(none.out.split('\n')).toEqual(['/proc/keys plain', '/proc/cpuinfo plain']);
  });

  it('privileged: none by default (inspect null), the given ones still applied', async () => {
    const { inspect: i } = await run('true', { HostConfig: { Privileged: true } });
    expect([i.HostConfig.MaskedPaths, i.HostConfig.ReadonlyPaths]).toEqual([null, null]);
    expect(specOf(i).linux.maskedPaths).toEqual([]);
    const given = await run(PROBE, { HostConfig: { Privileged: true, MaskedPaths: ['/proc/cpuinfo'] } });
    expect(given.out.split('\n')[1]).toBe('/proc/cpuinfo masked');
  });
});

describe('Config.Domainname', () => {
  // The FQDN's line in /etc/hosts needs an address to name: networks.test.ts (this daemon has no bridge).
  it('is the NIS domain; /etc/hostname stays the bare name', async () => {
    const { out, inspect: i } = await run(
      'cat /proc/sys/kernel/hostname /proc/sys/kernel/domainname /etc/hostname; grep -c foobar /etc/hosts || true',
      { Hostname: 'foobar', Domainname: 'baz.example.com' },
    );
    expect(out.split('\n')).toEqual(['foobar', 'baz.example.com', 'foobar', '0']);
    expect([i.Config.Hostname, i.Config.Domainname]).toEqual(['foobar', 'baz.example.com']);
  });

  it("cannot be set in the host's UTS namespace", async () => {
    expect(await refusal({ Domainname: 'x.org', HostConfig: { UTSMode: 'host' } })).toEqual([
      400,
      'conflicting options: domainname and the UTS mode',
    ]);
  });
});

describe('Config.User and HostConfig.GroupAdd', () => {
  it("give dockerd's supplementary groups: the primary group first (a uid:gid of no entry too), then GroupAdd's", async () => {
    // The process's own list (id would add its gid anyway).
    const groups = async (User: string, GroupAdd: string[] = []) =>
      (await run("sed -n 's/^Groups:[[:space:]]*//p' /proc/self/status", { User, HostConfig: { GroupAdd } })).out;
    expect(await groups('')).toBe('0');
    expect(await groups('1000:2000')).toBe('2000');
    expect(await groups('app')).toBe('1000');
    expect(await groups('0:0', ['12'])).toBe('0 12');
    expect(await groups('nobody:nogroup', ['app'])).toBe('1000 65534'); // the kernel keeps them sorted
  });
});

describe('IpcMode of an older client', () => {
  it('is shareable below API 1.40 when not given (with a HostConfig), private otherwise', async () => {
    const modeOf = async (at: string, body: Body) => (await inspect((await create(body, at)).id)).HostConfig.IpcMode;
    expect(await modeOf('/v1.39', { HostConfig: {} })).toBe('shareable');
    expect(await modeOf('/v1.39', {})).toBe('private');
    expect(await modeOf('/v1.39', { HostConfig: { IpcMode: 'private' } })).toBe('private');
    expect(await modeOf('/v1.40', { HostConfig: {} })).toBe('private');
  });

  it('a shareable one (the old default) can be joined', async () => {
    const { id } = await create(
      { Cmd: ['sh', '-c', 'echo hi > /dev/shm/note; exec sleep 60'], HostConfig: {} },
      '/v1.39',
    );
    expect((await d.request('POST', `/containers/${id}/start`)).status).toBe(204);
    const { out } = await run(
      'for i in $(seq 50); do [ -f /dev/shm/note ] && break; sleep 0.1; done; cat /dev/shm/note',
      {
        HostConfig: { IpcMode: `container:${id}` },
      },
    );
    expect(out).toBe('hi');
    await d.request('DELETE', `/containers/${id}?force=1`);
  });
});

describe('HostConfig.Runtime', () => {
  it("is the default runtime's name when not given; one the daemon does not have is refused in dockerd's words", async () => {
    expect((await run('true')).inspect.HostConfig.Runtime).toBe('runc');
    expect((await run('true', { HostConfig: { Runtime: 'runc' } })).inspect.HostConfig.Runtime).toBe('runc');
    expect(await refusal({ HostConfig: { Runtime: 'nope' } })).toEqual([400, 'Unknown runtime specified nope']);
  });
});

describe('HostConfig.Annotations', () => {
  it("go into the OCI spec's annotations and inspect (API 1.43), are not read below", async () => {
    const { inspect: i } = await run('true', { HostConfig: { Annotations: { 'com.example/team': 'berth' } } });
    expect(i.HostConfig.Annotations).toEqual({ 'com.example/team': 'berth' });
    expect(specOf(i).annotations).toMatchObject({ 'com.example/team': 'berth' });
    const old = await create({ HostConfig: { Annotations: { 'com.example/team': 'berth' } } }, '/v1.42');
    expect((await inspect(old.id)).HostConfig.Annotations).toBeUndefined();
    expect(await refusal({ HostConfig: { Annotations: { '': 'x' } } })).toEqual([
      400,
      'invalid Annotations: the empty string is not permitted as an annotation key',
    ]);
  });
});

describe('Config.NetworkDisabled', () => {
  it('gives no network at all, even with NetworkMode host: loopback alone', async () => {
    const { out, inspect: i } = await run("awk -F: 'NR>2 {print $1}' /proc/net/dev | tr -d ' '", {
      NetworkDisabled: true,
      HostConfig: { NetworkMode: 'host' },
    });
    expect(out).toBe('lo');
    expect(i.Config.NetworkDisabled).toBe(true);
    expect(i.HostConfig.NetworkMode).toBe('host');
    // The same without it: the host's interfaces.
    const host = await run("awk -F: 'NR>2 {print $1}' /proc/net/dev | tr -d ' '", {
      HostConfig: { NetworkMode: 'host' },
    });
    expect(host.out.split('\n').length).toBeGreaterThan(1);
  });
});

describe('HostConfig.StorageOpt', () => {
  it("is refused in dockerd's words: overlay2's size needs xfs with pquota", async () => {
    expect(await refusal({ HostConfig: { StorageOpt: { size: '1G' } } })).toEqual([
      400,
      "--storage-opt is supported only for overlay over xfs with 'pquota' mount option",
    ]);
    // dockerd reads a field's name in any case.
    expect((await refusal({ HostConfig: { storageopt: { size: '1G' } } }))[0]).toBe(400);
    expect(await refusal({ HostConfig: { StorageOpt: { Foo: 'x' } } })).toEqual([400, 'Unknown option foo']);
    await create({ HostConfig: { StorageOpt: {} } });
  });
});

describe('mount refusals in dockerd words', () => {
  it('VolumesFrom naming a missing container is a 400', async () => {
    expect(await refusal({ HostConfig: { VolumesFrom: ['nosuchcontainer'] } })).toEqual([
      400,
      'No such container: nosuchcontainer',
    ]);
  });

  it('a tmpfs on / or on a relative path: HostConfig.Tmpfs and Mounts of type tmpfs', async () => {
    const root = "invalid specification: destination can't be '/'";
    expect(await refusal({ HostConfig: { Tmpfs: { '/': '' } } })).toEqual([400, root]);
    expect(await refusal({ HostConfig: { Tmpfs: { '//': '' } } })).toEqual([400, root]);
    expect(await refusal({ HostConfig: { Tmpfs: { foo: '' } } })).toEqual([
      400,
      "invalid mount path: 'foo' mount path must be absolute",
    ]);
    expect(await refusal({ HostConfig: { Mounts: [{ Type: 'tmpfs', Target: '/' }] } })).toEqual([
      400,
      `invalid mount config for type "tmpfs": ${root}`,
    ]);
    expect(await refusal({ HostConfig: { Mounts: [{ Type: 'npipe', Source: 'x', Target: '/x' }] } })).toEqual([
      400,
      'invalid mount config for type "npipe": mount type unknown',
    ]);
    expect(await refusal({ HostConfig: { Binds: ['/tmp:/'] } })).toEqual([
      400,
      `invalid volume specification: '/tmp:/': invalid mount config for type "bind": ${root}`,
    ]);
  });
});

describe('BindOptions', () => {
  it('NonRecursive binds the source alone, not the mounts under it', async () => {
    // The host's /dev has /dev/pts mounted under it.
    const bind = (BindOptions: Body) => ({
      HostConfig: { Mounts: [{ Type: 'bind', Source: '/dev', Target: '/hostdev', ReadOnly: true, BindOptions }] },
    });
    const probe = '[ -e /hostdev/pts/ptmx ] && echo submounts || echo alone';
    expect((await run(probe, bind({}))).out).toBe('submounts');
    expect((await run(probe, bind({ NonRecursive: true }))).out).toBe('alone');
  });

  it('CreateMountpoint makes a missing source at start; without it a missing source is refused', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'berth-mountpoint-'));
    try {
      const source = path.join(dir, 'made', 'here');
      const mount = (BindOptions?: Body) => ({
        HostConfig: {
          Mounts: [{ Type: 'bind', Source: source, Target: '/data', ...(BindOptions ? { BindOptions } : {}) }],
        },
      });
      expect(await refusal(mount())).toEqual([
        400,
        `invalid mount config for type "bind": bind source path does not exist: ${source}`,
      ]);
      // API 1.41 has no CreateMountpoint: dockerd does not read it.
      const old = await d.request('POST', '/v1.41/containers/create', {
        body: { Image: env.busybox, Cmd: ['true'], ...mount({ CreateMountpoint: true }) },
      });
      expect(old.status).toBe(400);
      await run('echo hi > /data/f', mount({ CreateMountpoint: true }));
      expect(readFileSync(path.join(source, 'f'), 'utf8')).toBe('hi\n');
      expect(existsSync(source)).toBe(true);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('Links on network none', () => {
  it('are checked as dockerd checks them, then do nothing: the container runs', async () => {
    const child = await create({ Cmd: ['sleep', '60'] });
    const ran = await run(
      'grep -qw db /etc/hosts && echo hosts || echo no-hosts; env | grep -q DB_ && echo env || echo no-env',
      {
        HostConfig: { NetworkMode: 'none', Links: [`${child.id}:db`] },
      },
    );
    expect(ran.out.split('\n')).toEqual(['no-hosts', 'no-env']);
    // Registered as dockerd registers them: the child is named after the link too.
    const childName = (await inspect(child.id)).Name;
    expect(ran.inspect.HostConfig.Links).toEqual([`${childName}:${ran.inspect.Name}/db`]);
    expect(await refusal({ HostConfig: { NetworkMode: 'none', Links: ['missing:db'] } })).toEqual([
      400,
      'could not get container for missing: No such container: missing',
    ]);
  });
});

describe('a create for a platform', () => {
  const host = `linux/${os.arch() === 'x64' ? 'amd64' : os.arch()}`;

  it("the image's own platform is created; another is dockerd's 404", async () => {
    const r = await d.request('POST', `/v1.47/containers/create?platform=${encodeURIComponent(host)}`, {
      body: { Image: env.busybox, Cmd: ['true'] },
    });
    expect(r.status, r.text).toBe(201);
    const [arch] = host.split('/').slice(1);
    expect(await refusal({}, `?platform=linuxDifferentOS/${arch}`)).toEqual([
      404,
      `image with reference ${env.busybox} was found but does not match the specified platform: wanted linuxdifferentos/${arch}, actual: ${host}`,
    ]);
    expect((await refusal({}, `?platform=linux/${arch}DifferentArch`))[0]).toBe(404);
    expect(await refusal({}, '?platform=a/b/c/d')).toEqual([
      400,
      '"a/b/c/d": cannot parse platform specifier: invalid argument',
    ]);
  });

  it('below API 1.41 the parameter is not read', async () => {
    const r = await d.request('POST', '/v1.40/containers/create?platform=linuxDifferentOS/amd64', {
      body: { Image: env.busybox, Cmd: ['true'] },
    });
    expect(r.status, r.text).toBe(201);
  });
});

describe('fields dockerd on Linux ignores (Windows ones among them), as it takes them', () => {
  it('CpuCount and Cgroup are ignored, CpuPercent discarded with a warning: the container runs', async () => {
    // dockerd reads HostConfig.Cgroup nowhere; CpuCount only on Windows.
    const { inspect: i } = await run('true', { HostConfig: { CpuCount: 2, Cgroup: 'container:other' } });
    expect(i.State.ExitCode).toBe(0);
    const { warnings } = await create({ HostConfig: { CpuPercent: 50 } });
    expect(warnings).toEqual(['linux does not support CPU percent. Percent discarded.']);
  });

  it('the IO maxima and an Isolation other than the default are refused', async () => {
    expect(await refusal({ HostConfig: { IOMaximumIOps: 10 } })).toEqual([
      400,
      'Invalid QoS settings: linux does not support configuration of maximum IOPs',
    ]);
    expect(await refusal({ HostConfig: { IOMaximumBandwidth: 10 } })).toEqual([
      400,
      'Invalid QoS settings: linux does not support configuration of maximum bandwidth',
    ]);
    expect(await refusal({ HostConfig: { Isolation: 'hyperv' } })).toEqual([
      400,
      `Invalid isolation: "hyperv" - linux only supports 'default'`,
    ]);
    await create({ HostConfig: { Isolation: 'Default', IOMaximumIOps: 0 } });
  });

  it("the log cache's options with json-file and local: dockerd caches only drivers that cannot be read", async () => {
    for (const Type of ['json-file', 'local']) {
      const lc = { LogConfig: { Type, Config: { 'cache-disabled': 'false', 'cache-max-size': '10m' } } };
      expect((await run('echo logged', { HostConfig: lc })).out).toBe('logged');
    }
    expect(
      await refusal({ HostConfig: { LogConfig: { Type: 'json-file', Config: { 'cache-disabled': 'maybe' } } } }),
    ).toEqual([400, 'invalid value for option cache-disabled: maybe']);
  });

  it('an AppArmor profile or SELinux label on a host without the module, as dockerd ignores them there', async () => {
    const { inspect: i } = await run('true', {
      HostConfig: { SecurityOpt: ['apparmor=docker-default', 'label=type:svirt_lxc_net_t'] },
    });
    expect(i.HostConfig.SecurityOpt).toEqual(['apparmor=docker-default', 'label=type:svirt_lxc_net_t']);
  });
});
