// What changes between API 1.43 and 1.47 on the routes berth serves (moby's
// api/docs/CHANGELOG.md and its router), each tried at both ends: a client
// gets the shapes and meanings of the version it asks for.
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Daemon } from '../harness/daemon.js';
import { pull, useEnv, type Env } from '../harness/env.js';
import { busyboxImage, pushImage, pushIndex } from '../harness/images.js';

const ctx = useEnv();
let env: Env;
let d: Daemon;
beforeAll(() => {
  ({ env, daemon: d } = ctx);
});

const q = (o: unknown) => encodeURIComponent(JSON.stringify(o));

/** POST /vX/containers/create with busybox; the raw answer. */
const createAt = (v: string, body: Record<string, unknown>) =>
  d.request('POST', `/v${v}/containers/create`, { body: { Image: env.busybox, Cmd: ['true'], ...body } });

async function created(v: string, body: Record<string, unknown>): Promise<string> {
  const r = await createAt(v, body);
  expect(r.status, r.text).toBe(201);
  return r.json.Id;
}

/** Creates, starts and waits through API `v`; the exit code. */
async function exitCodeAt(v: string, body: Record<string, unknown>): Promise<number> {
  const id = await created(v, body);
  const s = await d.request('POST', `/v${v}/containers/${id}/start`);
  expect(s.status, s.text).toBe(204);
  return (await d.request('POST', `/v${v}/containers/${id}/wait`)).json.StatusCode;
}

const summaryOf = async (v: string, id: string, query = '') =>
  ((await d.request('GET', `/v${v}/images/json${query}`)).json as Record<string, unknown>[]).find((i) => i.Id === id)!;

const inspectImage = async (v: string, ref: string) => (await d.request('GET', `/v${v}/images/${ref}/json`)).json;

describe('API 1.44', () => {
  it('/info lists CDISpecDirs (empty: no CDI) from 1.44 only', async () => {
    expect((await d.request('GET', '/v1.43/info')).json).not.toHaveProperty('CDISpecDirs');
    expect((await d.request('GET', '/v1.44/info')).json.CDISpecDirs).toEqual([]);
    expect((await d.request('GET', '/info')).json.CDISpecDirs).toEqual([]);
  });

  it('drops VirtualSize from the image list and inspect', async () => {
    const id = (await inspectImage('1.43', env.busybox)).Id;
    const old = await summaryOf('1.43', id);
    expect(old.VirtualSize).toBe(old.Size);
    expect(await summaryOf('1.44', id)).not.toHaveProperty('VirtualSize');
    const inspected = await inspectImage('1.43', env.busybox);
    expect(inspected.VirtualSize).toBe(inspected.Size);
    expect(await inspectImage('1.44', env.busybox)).not.toHaveProperty('VirtualSize');
  });

  it("shows an image config without a creation time as Go's zero time before 1.44, without Created from 1.44", async () => {
    const ref = `${env.registry.host}/undated:latest`;
    await pushImage(env.registry, 'undated', 'latest', await busyboxImage({ created: null }));
    await pull(d, ref);
    expect((await inspectImage('1.43', ref)).Created).toBe('0001-01-01T00:00:00Z');
    expect(await inspectImage('1.44', ref)).not.toHaveProperty('Created');
    // A dated image keeps its time at both.
    expect((await inspectImage('1.44', env.busybox)).Created).toBe('2024-01-01T00:00:00Z');
    // No time, nothing before `until` (dockerd's rule).
    const undatedId = (await inspectImage('1.44', ref)).Id;
    const listed = await d.request('GET', `/v1.44/images/json?filters=${q({ until: ['1h'] })}`);
    expect(listed.json.map((i: { Id: string }) => i.Id)).not.toContain(undatedId);
  });

  it('filters the image list by until (unversioned, as in dockerd): created before that time', async () => {
    const id = (await inspectImage('1.44', env.busybox)).Id;
    const ids = async (v: string, until: string) => {
      const r = await d.request('GET', `/v${v}/images/json?filters=${q({ until: [until] })}`);
      expect(r.status, r.text).toBe(200);
      return r.json.map((i: { Id: string }) => i.Id);
    };
    // busybox here was made at 2024-01-01T00:00:00Z.
    for (const v of ['1.43', '1.44']) {
      expect(await ids(v, '2024-01-01T00:00:00Z')).not.toContain(id);
      expect(await ids(v, '2024-01-01T00:00:01Z')).toContain(id);
      expect(await ids(v, '1704067200.5')).toContain(id);
      expect(await ids(v, '1h30m')).toContain(id);
    }
    const bad = await d.request('GET', `/v1.44/images/json?filters=${q({ until: ['yesterday'] })}`);
    expect(bad.status).toBe(400);
    expect(bad.json.message).toBe("invalid filter 'until=yesterday'");
  });

  it('gives each network endpoint its DNSNames from 1.44, in inspect and in the list', async () => {
    // This daemon runs without a default bridge (the harness's --bridge none): a plain container is on none.
    const id = await created('1.44', {});
    const at = async (v: string) => (await d.request('GET', `/v${v}/containers/${id}/json`)).json;
    expect((await at('1.43')).NetworkSettings.Networks.none).not.toHaveProperty('DNSNames');
    expect((await at('1.44')).NetworkSettings.Networks.none.DNSNames).toBeNull();
    const listed = async (v: string) =>
      ((await d.request('GET', `/v${v}/containers/json?all=1`)).json as { Id: string; NetworkSettings: any }[]).find(
        (c) => c.Id === id,
      )!.NetworkSettings.Networks.none;
    expect(await listed('1.43')).not.toHaveProperty('DNSNames');
    expect((await listed('1.47')).DNSNames).toBeNull();
  });

  it('refuses several endpoints before 1.44; from 1.44 several bridge networks only', async () => {
    const two = { NetworkingConfig: { EndpointsConfig: { none: {}, host: {} } } };
    const old = await createAt('1.43', two);
    expect(old.status).toBe(400);
    expect(old.json.message).toBe('Container cannot be created with multiple network endpoints: none, host');
    const now = await createAt('1.44', two);
    expect(now.status).toBe(400);
    expect(now.json.message).toBe('Container cannot be connected to network endpoints: none, host');
    const unknown = await createAt('1.44', { NetworkingConfig: { EndpointsConfig: { backend: {} } } });
    expect(unknown.status).toBe(404);
    expect(unknown.json.message).toBe('network backend not found');
  });

  it('accepts the empty endpoint the docker CLI sends from 1.44; a MAC or alias only on a bridge network', async () => {
    // The endpoint the CLI 28 sends for a plain `docker run`, as captured (operational fields and all).
    const empty = JSON.parse(
      '{"IPAMConfig":null,"Links":null,"Aliases":null,"MacAddress":"","DriverOpts":null,"GwPriority":0,"NetworkID":"","EndpointID":"","Gateway":"","IPAddress":"","IPPrefixLen":0,"IPv6Gateway":"","GlobalIPv6Address":"","GlobalIPv6PrefixLen":0,"DNSNames":null}',
    );
    const body = { HostConfig: { NetworkMode: 'default' }, NetworkingConfig: { EndpointsConfig: { default: empty } } };
    expect(await exitCodeAt('1.47', body)).toBe(0);
    const host = { HostConfig: { NetworkMode: 'host' }, NetworkingConfig: { EndpointsConfig: { host: empty } } };
    expect(await exitCodeAt('1.44', host)).toBe(0);
    // A MAC (the endpoint's from 1.44, container-wide before) has no interface to go to on none.
    const mac = '02:42:ac:11:00:04';
    const endpoint = await createAt('1.47', {
      NetworkingConfig: { EndpointsConfig: { default: { ...empty, MacAddress: mac } } },
    });
    expect(endpoint.status).toBe(400);
    expect(endpoint.json.message).toBe('network-scoped aliases, addresses and MACs apply to bridge networks, not none');
    const wide = await createAt('1.43', { MacAddress: mac });
    expect(wide.status).toBe(400);
    const aliases = await createAt('1.44', { NetworkingConfig: { EndpointsConfig: { none: { Aliases: ['web'] } } } });
    expect(aliases.status).toBe(400);
  });

  describe('read-only binds', () => {
    // A host directory with a mount inside it: whether the container can write there is the question.
    let dir: string;
    beforeAll(() => {
      dir = mkdtempSync(path.join(os.tmpdir(), 'berth-rro-'));
      mkdirSync(path.join(dir, 'sub'));
      execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=1m', 'tmpfs', path.join(dir, 'sub')]);
    });
    afterAll(() => {
      if (!dir) return;
      execFileSync('umount', [path.join(dir, 'sub')]);
      rmSync(dir, { recursive: true, force: true });
    });
    const writeSub = { Cmd: ['sh', '-c', 'touch /mnt/sub/x'] };
    const bind = (extra: Record<string, unknown> = {}) => ({
      ...writeSub,
      HostConfig: { Mounts: [{ Type: 'bind', Source: dir, Target: '/mnt', ReadOnly: true, ...extra }] },
    });

    it('are recursively read-only from 1.44, and only the mount itself before', async () => {
      const binds = { ...writeSub, HostConfig: { Binds: [`${dir}:/mnt:ro`] } };
      expect(await exitCodeAt('1.43', binds)).toBe(0);
      expect(await exitCodeAt('1.44', binds)).toBe(1);
      expect(await exitCodeAt('1.43', bind())).toBe(0);
      expect(await exitCodeAt('1.47', bind())).toBe(1);
      // The top stays read-only either way.
      expect(await exitCodeAt('1.43', { ...binds, Cmd: ['sh', '-c', 'touch /mnt/top'] })).toBe(1);
    });

    it('follow BindOptions.ReadOnlyNonRecursive, and ReadOnlyForceRecursive from 1.44 only', async () => {
      expect(await exitCodeAt('1.44', bind({ BindOptions: { ReadOnlyNonRecursive: true } }))).toBe(0);
      expect(await exitCodeAt('1.44', bind({ BindOptions: { ReadOnlyForceRecursive: true } }))).toBe(1);
      const old = await createAt('1.43', bind({ BindOptions: { ReadOnlyForceRecursive: true } }));
      expect(old.status).toBe(400);
      expect(old.json.message).toBe('BindOptions.ReadOnlyForceRecursive needs API v1.44 or newer');
      // Asked of a writable mount, or both at once: dockerd's conflicts, refused at create.
      for (const [extra, message] of [
        [
          { ReadOnly: false, BindOptions: { ReadOnlyNonRecursive: true } },
          'mount options conflict: !ReadOnly && BindOptions.ReadOnlyNonRecursive',
        ],
        [
          { BindOptions: { ReadOnlyNonRecursive: true, ReadOnlyForceRecursive: true } },
          'mount options conflict: ReadOnlyNonRecursive && BindOptions.ReadOnlyForceRecursive',
        ],
      ] as const) {
        const r = await createAt('1.44', bind(extra));
        expect(r.status).toBe(400);
        expect(r.json.message).toBe(message);
      }
    });

    it('keep the version they were created through across a restart of berthd', async () => {
      const binds = { ...writeSub, HostConfig: { Binds: [`${dir}:/mnt:ro`] } };
      const [old, now] = [await created('1.43', binds), await created('1.44', binds)];
      await d.stop();
      await d.restart();
      const codes: number[] = [];
      for (const id of [old, now]) {
        expect((await d.request('POST', `/v1.47/containers/${id}/start`)).status).toBe(204);
        codes.push((await d.request('POST', `/v1.47/containers/${id}/wait`)).json.StatusCode);
      }
      expect(codes).toEqual([0, 1]);
    });
  });
});

describe('API 1.45', () => {
  it('drops Container and ContainerConfig from image inspect', async () => {
    const old = await inspectImage('1.44', env.busybox);
    expect(old.Container).toBe('');
    expect(old.ContainerConfig).toMatchObject({ Hostname: '', Cmd: null });
    const now = await inspectImage('1.45', env.busybox);
    expect(now).not.toHaveProperty('Container');
    expect(now).not.toHaveProperty('ContainerConfig');
    expect(now.Config.Cmd).toEqual(['sh']);
  });

  it("refuses VolumeOptions.Subpath before 1.45, and a volume's options on a bind at any version", async () => {
    const mount = { Type: 'bind', Source: os.tmpdir(), Target: '/mnt', VolumeOptions: { Subpath: 'x' } };
    const old = await createAt('1.44', { HostConfig: { Mounts: [mount] } });
    expect(old.status).toBe(400);
    expect(old.json.message).toBe('VolumeOptions.Subpath needs API v1.45 or newer');
    const now = await createAt('1.45', { HostConfig: { Mounts: [mount] } });
    expect(now.status).toBe(400);
    expect(now.json.message).toBe('VolumeOptions must not be specified on mount type "bind"');
    const volume = await createAt('1.45', { HostConfig: { Mounts: [{ ...mount, Type: 'volume', Source: 'data' }] } });
    expect(volume.status, volume.text).toBe(201);
  });
});

describe('API 1.43 and 1.47: the image list', () => {
  it('shows an untagged image as <none> before 1.43, with empty lists from 1.43', async () => {
    const c = await created('1.43', {});
    const commit = await d.request('POST', `/v1.43/commit?container=${c}`);
    expect(commit.status, commit.text).toBe(201);
    const id = commit.json.Id;
    expect(await summaryOf('1.42', id)).toMatchObject({ RepoTags: ['<none>:<none>'], RepoDigests: ['<none>@<none>'] });
    expect(await summaryOf('1.43', id)).toMatchObject({ RepoTags: [], RepoDigests: [] });
    // A committed image has no manifest: no Manifests, even when asked.
    expect(await summaryOf('1.47', id, '?manifests=1')).not.toHaveProperty('Manifests');
  });

  it('lists the manifest an image was pulled with when asked (manifests=1, 1.47)', async () => {
    const img = await inspectImage('1.47', env.busybox);
    const digest = (img.RepoDigests[0] as string).split('@')[1];
    const containerId = await created('1.47', {});
    expect(await summaryOf('1.47', img.Id)).not.toHaveProperty('Manifests');
    const [m, ...more] = (await summaryOf('1.47', img.Id, '?manifests=1')).Manifests as any[];
    expect(more).toEqual([]);
    expect(m).toEqual({
      ID: digest,
      Descriptor: {
        mediaType: 'application/vnd.docker.distribution.manifest.v2+json',
        digest,
        size: expect.any(Number),
      },
      Available: true,
      Size: { Content: expect.any(Number), Total: expect.any(Number) },
      Kind: 'image',
      ImageData: {
        Platform: { architecture: 'amd64', os: 'linux' },
        Containers: expect.arrayContaining([containerId]),
        Size: { Unpacked: img.Size },
      },
    });
    // The compressed blobs (manifest, config, layer) and the unpacked layer.
    expect(m.Size.Content).toBeGreaterThan(m.Descriptor.size);
    expect(m.Size.Total).toBe(m.Size.Content + img.Size);
    // dockerd reads `manifests` from 1.47 only; berth answers an older client that asks as well.
    expect((await summaryOf('1.46', img.Id, '?manifests=1')).Manifests).toEqual([m]);
  });

  it('names the platform an image was chosen for from an index', async () => {
    const image = await busyboxImage({ config: { Labels: { from: 'index' } } });
    const indexDigest = await pushIndex(env.registry, 'indexed', 'latest', [{ image }]);
    const ref = `${env.registry.host}/indexed:latest`;
    await pull(d, ref);
    const id = (await inspectImage('1.47', ref)).Id;
    const [m] = (await summaryOf('1.47', id, '?manifests=1')).Manifests as any[];
    expect(m.ID).toBe(image.digest);
    expect(m.ID).not.toBe(indexDigest);
    expect(m.Descriptor).toEqual({
      mediaType: 'application/vnd.docker.distribution.manifest.v2+json',
      digest: image.digest,
      size: image.manifestBytes.length,
      platform: { architecture: 'amd64', os: 'linux' },
    });
    expect(m.ImageData.Containers).toBeNull();
  });
});
