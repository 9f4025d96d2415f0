// A pod as cri-dockerd makes one (issue 28): a sandbox container, and
// containers that join its network, IPC and PID namespaces
// (`container:<sandbox>`), each field as dockerd 20.10 answers it.
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import type { Daemon } from '../harness/daemon.js';
import { type Env, execOnTty, removeAllContainers, useEnv } from '../harness/env.js';

const ctx = useEnv();
let env: Env;
let d: Daemon;
beforeAll(() => {
  ({ env, daemon: d } = ctx);
});

type Body = Record<string, any>;

async function start(body: Body): Promise<string> {
  const c = await d.request('POST', '/v1.41/containers/create', {
    body: { Image: env.busybox, Cmd: ['sleep', '300'], ...body },
  });
  expect(c.status, c.text).toBe(201);
  const s = await d.request('POST', `/containers/${c.json.Id}/start`);
  expect(s.status, s.text).toBe(204);
  return c.json.Id;
}

const inspect = async (id: string) => (await d.request('GET', `/containers/${id}/json`)).json;
const sh = async (id: string, script: string) => (await execOnTty(d, id, ['sh', '-c', script])).out.trim();
/** The OCI spec berth wrote for a container, in its bundle (beside its log). */
const specOf = (i: Body) => JSON.parse(readFileSync(path.join(path.dirname(i.LogPath), 'config.json'), 'utf8'));
const UNPRIVILEGED_PORTS = 'net.ipv4.ip_unprivileged_port_start';
const PING = 'net.ipv4.ping_group_range';

/** A pod's app container as cri-dockerd creates it: in the sandbox's network, IPC and PID namespaces. */
const joiner = (sandbox: string, extra: Body = {}) => ({
  HostConfig: {
    NetworkMode: `container:${sandbox}`,
    IpcMode: `container:${sandbox}`,
    PidMode: `container:${sandbox}`,
    ...extra,
  },
});

describe('a container in the sandbox network namespace (NetworkMode container:<sandbox>)', () => {
  it("has the sandbox's Hostname and Domainname, and its hostname, hosts and resolv.conf files", async () => {
    const sandbox = await start({
      Hostname: 'podhost',
      Domainname: 'pods.example',
      HostConfig: { NetworkMode: 'none', IpcMode: 'shareable' },
    });
    const app = await start(joiner(sandbox));
    const [a, s] = [await inspect(app), await inspect(sandbox)];
    expect([a.Config.Hostname, a.Config.Domainname]).toEqual(['podhost', 'pods.example']);
    for (const k of ['HostnamePath', 'HostsPath', 'ResolvConfPath']) expect(a[k], k).toBe(s[k]);
    expect(await sh(app, 'hostname; cat /etc/hostname /proc/sys/kernel/domainname; echo $HOSTNAME')).toBe(
      'podhost\r\npodhost\r\npods.example\r\npodhost',
    );
    // cri-dockerd writes the pod's DNS into the sandbox's file after CNI ran: every container reads it.
    writeFileSync(s.ResolvConfPath, 'nameserver 10.96.0.10\nsearch default.svc.cluster.local\n');
    expect(await sh(app, 'cat /etc/resolv.conf')).toBe('nameserver 10.96.0.10\r\nsearch default.svc.cluster.local');
  });

  it('records the sandbox by id, as dockerd does: renaming the sandbox keeps the pod together', async () => {
    const sandbox = await start({ HostConfig: { NetworkMode: 'none', IpcMode: 'shareable' } });
    const named = (await inspect(sandbox)).Name.slice(1);
    const c = await d.request('POST', '/containers/create', {
      body: { Image: env.busybox, Cmd: ['sleep', '300'], ...joiner(named) },
    });
    expect(c.status, c.text).toBe(201);
    const h = (await inspect(c.json.Id)).HostConfig;
    expect([h.NetworkMode, h.IpcMode, h.PidMode]).toEqual(Array(3).fill(`container:${sandbox}`));
    expect((await d.request('POST', `/containers/${sandbox}/rename?name=renamed-sandbox`)).status).toBe(204);
    const s = await d.request('POST', `/containers/${c.json.Id}/start`);
    expect(s.status, s.text).toBe(204);
  });

  it("is refused at start while the sandbox does not run, in dockerd's words", async () => {
    const c = await d.request('POST', '/containers/create', { body: { Image: env.busybox, Cmd: ['true'] } });
    const app = await d.request('POST', '/containers/create', {
      body: { Image: env.busybox, Cmd: ['true'], HostConfig: { NetworkMode: `container:${c.json.Id}` } },
    });
    const s = await d.request('POST', `/containers/${app.json.Id}/start`);
    expect([s.status, s.json.message]).toEqual([409, `cannot join network of a non running container: ${c.json.Id}`]);
  });

  it("gets no network sysctls of its own: they are the sandbox's (dockerd sets them only in a namespace a container made)", async () => {
    const sandbox = await start({ HostConfig: { NetworkMode: 'none', IpcMode: 'shareable' } });
    expect(specOf(await inspect(sandbox)).linux.sysctl).toMatchObject({ [UNPRIVILEGED_PORTS]: '0' });
    const app = await start(joiner(sandbox));
    const sysctl = specOf(await inspect(app)).linux.sysctl ?? {};
    expect([sysctl[UNPRIVILEGED_PORTS], sysctl[PING]]).toEqual([undefined, undefined]);
    expect(await sh(app, 'cat /proc/sys/net/ipv4/ip_unprivileged_port_start')).toBe('0');
  });
});

describe('a CNI pod sandbox (NetworkMode none) given its pod port mappings', () => {
  it('reports no ports: the none network has no endpoint that would report them (dockerd: {} and [])', async () => {
    const sandbox = await start({
      ExposedPorts: { '80/tcp': {} },
      HostConfig: { NetworkMode: 'none', PortBindings: { '80/tcp': [{ HostIp: '', HostPort: '18080' }] } },
    });
    expect((await inspect(sandbox)).NetworkSettings.Ports).toEqual({});
    // No address to name it on: libnetwork writes no line of its own (kubelet gives the pod its own hosts file).
    expect(await sh(sandbox, 'grep -c "$(hostname)" /etc/hosts')).toBe('0');
    const list = await d.request('GET', `/containers/json?filters=${encodeURIComponent(`{"id":["${sandbox}"]}`)}`);
    expect(list.json[0].Ports).toEqual([]);
  });
});

describe('a host-network pod (sandbox NetworkMode host; containers container:<sandbox>, UTSMode host)', () => {
  it("the sandbox's hostname file says the Hostname it was given (cri-dockerd sends the pod's)", async () => {
    const sandbox = await start({ Hostname: 'nodename', HostConfig: { NetworkMode: 'host', IpcMode: 'shareable' } });
    expect(await sh(sandbox, 'hostname; cat /etc/hostname')).toBe('nodename\r\nnodename');
  });

  it("starts, with the host's name and the host's network sysctls untouched", async () => {
    const before = readFileSync('/proc/sys/net/ipv4/ip_unprivileged_port_start', 'utf8');
    const sandbox = await start({ HostConfig: { NetworkMode: 'host', IpcMode: 'shareable' } });
    const app = await start(joiner(sandbox, { UTSMode: 'host' }));
    const a = await inspect(app);
    expect(a.Config.Hostname).toBe(os.hostname());
    expect(a.HostnamePath).toBe((await inspect(sandbox)).HostnamePath);
    expect(await sh(app, 'hostname; cat /etc/hostname')).toBe(`${os.hostname()}\r\n${os.hostname()}`);
    expect(readFileSync('/proc/sys/net/ipv4/ip_unprivileged_port_start', 'utf8')).toBe(before);
  });
});

describe('bind propagation (kubelet: HostToContainer is rslave, Bidirectional rshared)', () => {
  /** A tmpfs of its own, with the propagation asked, so the test does not depend on how the host mounted /. */
  async function withSourceMount(propagation: 'private' | 'shared', fn: (dir: string) => Promise<void>) {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'berth-prop-'));
    execFileSync('mount', ['-t', 'tmpfs', 'tmpfs', dir]);
    try {
      execFileSync('mount', [`--make-${propagation}`, dir]);
      await fn(dir);
    } finally {
      await removeAllContainers(d);
      execFileSync('umount', ['-R', dir]);
      rmSync(dir, { recursive: true });
    }
  }
  const startFailure = async (bind: string) => {
    const c = await d.request('POST', '/containers/create', {
      body: { Image: env.busybox, Cmd: ['true'], HostConfig: { Binds: [bind] } },
    });
    expect(c.status, c.text).toBe(201);
    const s = await d.request('POST', `/containers/${c.json.Id}/start`);
    return [s.status, s.json?.message];
  };

  it("is refused at start, in dockerd's words, when the source's mount does not propagate", async () => {
    await withSourceMount('private', async (dir) => {
      expect(await startFailure(`${dir}:/data:rslave`)).toEqual([
        500,
        `path ${dir} is mounted on ${dir} but it is not a shared or slave mount`,
      ]);
      expect(await startFailure(`${dir}:/data:ro,rshared`)).toEqual([
        500,
        `path ${dir} is mounted on ${dir} but it is not a shared mount`,
      ]);
    });
  });

  it('on a shared mount: a mount made on the host later appears in the container', async () => {
    await withSourceMount('shared', async (dir) => {
      const id = await start({ HostConfig: { Binds: [`${dir}:/data:rslave`] } });
      mkdirSync(path.join(dir, 'later'));
      execFileSync('mount', ['-t', 'tmpfs', 'tmpfs', path.join(dir, 'later')]);
      writeFileSync(path.join(dir, 'later', 'note'), 'propagated');
      expect(await sh(id, 'cat /data/later/note')).toBe('propagated');
    });
  });

  it("a source holding berthd's data root (a hostPath of /, as node agents mount it) is rslave unless asked otherwise", async () => {
    const root = (await d.request('GET', '/info')).json.DockerRootDir as string;
    const holder = path.dirname(root);
    const id = await start({ HostConfig: { Binds: [`${holder}:/host:ro`] } });
    const i = await inspect(id);
    expect(i.Mounts.find((m: Body) => m.Destination === '/host')).toMatchObject({
      Source: holder,
      Propagation: 'rslave',
    });
    expect(await sh(id, 'test -d /host && echo seen')).toBe('seen');
    const asked = await d.request('POST', '/containers/create', {
      body: { Image: env.busybox, Cmd: ['true'], HostConfig: { Binds: [`${holder}:/host:rprivate`] } },
    });
    expect([asked.status, asked.json.message]).toEqual([
      400,
      `invalid mount config: must use either propagation mode "rslave" or "rshared" when mount source is within the daemon root, daemon root: "${root}", bind mount source: "${holder}", propagation: "rprivate"`,
    ]);
  });
});
