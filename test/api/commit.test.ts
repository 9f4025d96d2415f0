// docker commit, diff and export against a real berthd, runc and registry:
// over plain HTTP (as curl would), the docker CLI, the Python SDK and
// dockerode. The committed image must hold exactly the container's changes.
import { existsSync, readdirSync, rmSync } from 'node:fs';
import path from 'node:path';
import { Readable } from 'node:stream';
import Docker from 'dockerode';
import * as tarStream from 'tar-stream';
import { beforeAll, describe, expect, it } from 'vitest';
import { dockerCli } from '../harness/cli.js';
import { runPython } from '../harness/clients.js';
import { startDaemon, waitFor, type Daemon } from '../harness/daemon.js';
import { pull, useEnv, type Env } from '../harness/env.js';
import { multiLayerImage, pushImage } from '../harness/images.js';
import { demuxText } from '../harness/streams.js';

const ctx = useEnv();
let env: Env;
let d: Daemon;
/** busybox + a layer adding /data + a layer changing it (see fixtures/images.mjs). */
let multi: string;

beforeAll(async () => {
  env = ctx.env;
  d = ctx.daemon;
  multi = `${env.registry.host}/multi:latest`;
  await pushImage(env.registry, 'multi', 'latest', await multiLayerImage());
  await pull(d, multi);
});

const q = encodeURIComponent;

async function create(image: string, cmd: string[], extra: Record<string, unknown> = {}): Promise<string> {
  const r = await d.request('POST', '/v1.43/containers/create', { body: { Image: image, Cmd: cmd, ...extra } });
  expect(r.status, r.text).toBe(201);
  return r.json.Id;
}

/** Runs a command to its end; returns the container id. */
async function run(image: string, script: string, extra: Record<string, unknown> = {}): Promise<string> {
  const id = await create(image, ['sh', '-c', script], extra);
  expect((await d.request('POST', `/containers/${id}/start`)).status).toBe(204);
  const w = await d.request('POST', `/containers/${id}/wait`);
  expect(w.json.StatusCode, await output(id)).toBe(0);
  return id;
}

/** A container's stdout and stderr. */
const output = async (id: string) =>
  demuxText((await d.request('GET', `/containers/${id}/logs?stdout=1&stderr=1`)).body);

/** What `script` prints in a fresh container of `image`. */
const outputOf = async (image: string, script: string) => output(await run(image, script));

async function commit(params: string, body?: unknown): Promise<string> {
  const r = await d.request('POST', `/v1.43/commit?${params}`, body === undefined ? {} : { body });
  expect(r.status, r.text).toBe(201);
  expect(r.json).toEqual({ Id: expect.stringMatching(/^sha256:[0-9a-f]{64}$/) });
  return r.json.Id;
}

const inspect = async (image: string) => (await d.request('GET', `/images/${image}/json`)).json;
/** The directory (under <data-root>/layers) of an image's top layer: its chain id's hex, as GraphDriver shows it. */
const layerDirOf = (img: { GraphDriver: { Data: Record<string, string> } }) =>
  path.basename(path.dirname(img.GraphDriver.Data.UpperDir!));
const imageCount = async () => (await d.request('GET', '/images/json?all=1')).json.length;

/** The container's changes, as the new image must show them. */
const CHANGES = [
  'set -e',
  'mkdir -p /added/sub && echo new > /added/sub/f.txt && chown 1000:1000 /added/sub/f.txt && chmod 640 /added/sub/f.txt',
  'ln -s sub/f.txt /added/link && ln /added/sub/f.txt /added/hard',
  'echo modified >> /data/keep.txt', // a file from a lower layer, changed
  'rm /data/added.txt /etc/motd /bin/sed', // files from three different lower layers, deleted
  'rm -rf /data/replace && mkdir /data/replace && echo fresh > /data/replace/fresh.txt', // a directory replaced
  'rm -rf /usr', // a directory deleted
  'rm -rf /var/tmp && echo now-a-file > /var/tmp', // a directory replaced by a file
].join('\n');

/** Prints what a container of the committed image sees. */
const CHECK = [
  'cat /data/keep.txt /added/sub/f.txt /data/replace/fresh.txt /var/tmp',
  'readlink /added/link; stat -c "%u:%g %a %h" /added/sub/f.txt; [ /added/hard -ef /added/sub/f.txt ] && echo hardlinked',
  'ls -A /data/replace',
  'for p in /data/added.txt /etc/motd /bin/sed /usr /data/replace/new.txt /etc/hosts.commit-stub; do [ -e $p ] || [ -L $p ] && echo "present $p" || echo "absent $p"; done',
  'cat /data/change.txt; readlink /bin/cat', // untouched lower content is still there
].join('\n');

const EXPECTED = [
  'kept\nmodified\nnew\nfresh\nnow-a-file\n',
  'sub/f.txt\n1000:1000 640 2\nhardlinked\n',
  'fresh.txt\n',
  'absent /data/added.txt\nabsent /etc/motd\nabsent /bin/sed\nabsent /usr\nabsent /data/replace/new.txt\nabsent /etc/hosts.commit-stub\n',
  'after\nbusybox\n',
].join('');

describe('POST /commit over plain HTTP', () => {
  it('makes an image holding exactly the added, modified and deleted files and directories', async () => {
    const ctr = await run(multi, CHANGES);
    const since = Math.floor(Date.now() / 1000);
    const id = await commit(
      `container=${ctr.slice(0, 12)}&repo=mine/changed&tag=v1&comment=${q('all kinds')}&author=${q('Ann <ann@example.com>')}`,
    );
    expect(await outputOf('mine/changed:v1', CHECK)).toBe(EXPECTED);
    const events = await d.request(
      'GET',
      `/events?since=${since}&until=${Math.floor(Date.now() / 1000) + 1}&filters=${q(JSON.stringify({ event: ['commit', 'tag'] }))}`,
    );
    expect(
      events.text
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l)),
    ).toEqual([
      expect.objectContaining({
        Type: 'image',
        Action: 'tag',
        Actor: { ID: id, Attributes: { name: 'mine/changed:v1' } },
      }),
      expect.objectContaining({
        Type: 'container',
        Action: 'commit',
        Actor: {
          ID: ctr,
          Attributes: expect.objectContaining({ comment: 'all kinds', imageID: id, imageRef: 'mine/changed:v1' }),
        },
      }),
    ]);

    const parent = await inspect(multi);
    // Container and ContainerConfig are shown up to API 1.44 (gone from 1.45, test/api/versions.test.ts).
    const img = (await d.request('GET', '/v1.44/images/mine/changed:v1/json')).json;
    expect(img).toMatchObject({
      Id: id,
      RepoTags: ['mine/changed:v1'],
      Parent: parent.Id,
      Comment: 'all kinds',
      Author: 'Ann <ann@example.com>',
      Container: ctr,
      ContainerConfig: { Cmd: ['sh', '-c', CHANGES] },
      Architecture: parent.Architecture,
      Os: 'linux',
      Config: { Cmd: ['sh', '-c', CHANGES], Labels: { 'berth.test': 'multilayer' } },
    });
    expect(img.RootFS.Layers).toEqual([...parent.RootFS.Layers, expect.stringMatching(/^sha256:/)]);
    const listed = (await d.request('GET', '/images/json')).json.find((i: { Id: string }) => i.Id === id);
    expect(listed).toMatchObject({ ParentId: parent.Id, RepoTags: ['mine/changed:v1'] });
    const history = (await d.request('GET', '/images/mine/changed:v1/history')).json;
    expect(history).toHaveLength(parent.RootFS.Layers.length + 1);
    expect(history[0]).toMatchObject({
      Id: id,
      CreatedBy: `sh -c ${CHANGES}`,
      Comment: 'all kinds',
      Tags: ['mine/changed:v1'],
    });
    expect(history[0].Size).toBeGreaterThan(0);
    expect(history[1].Id).toBe(parent.Id);
  });

  it('lists the changes (kinds 0, 1, 2) without the mount points the runtime made', async () => {
    const ctr = await run(multi, CHANGES);
    const r = await d.request('GET', `/containers/${ctr}/changes`);
    expect(r.status).toBe(200);
    const kinds = Object.fromEntries((r.json as { Path: string; Kind: number }[]).map((c) => [c.Path, c.Kind]));
    expect(kinds).toMatchObject({
      '/added': 1,
      '/added/sub/f.txt': 1,
      '/data': 0,
      '/data/keep.txt': 0,
      '/data/added.txt': 2,
      '/etc/motd': 2,
      '/bin/sed': 2,
      '/usr': 2,
      '/data/replace': 2,
      '/var/tmp': 0,
    });
    // /etc/hosts, /etc/hostname and /etc/resolv.conf are bind-mount points, not changes (dockerd keeps them in an init layer).
    expect(Object.keys(kinds).filter((p) => p.startsWith('/etc/host') || p === '/etc/resolv.conf')).toEqual([]);
    const untouched = await run(env.busybox, 'true');
    expect((await d.request('GET', `/containers/${untouched}/changes`)).json).toBeNull();
    expect((await d.request('GET', '/containers/nope/changes')).status).toBe(404);
  });

  it('applies changes, a body Config, and leaves an untagged image without repo', async () => {
    const ctr = await run(env.busybox, 'echo hi > /hello');
    const changes = [
      'CMD ["cat", "/hello"]',
      'ENV A=1 B="two words"',
      'ENV C=$A-${B}',
      'WORKDIR /srv',
      'WORKDIR sub',
      'LABEL team=berth "with space"=yes',
      'EXPOSE 8080 53/udp',
      'USER app',
      'VOLUME /data',
      'STOPSIGNAL SIGINT',
      'ONBUILD RUN echo later',
    ];
    const id = await commit(`container=${ctr}&${changes.map((c) => `changes=${q(c)}`).join('&')}`);
    const cfg = (await inspect(id)).Config;
    expect(cfg).toMatchObject({
      Cmd: ['cat', '/hello'],
      Env: expect.arrayContaining(['A=1', 'B=two words', 'C=1-two words']),
      WorkingDir: '/srv/sub',
      Labels: { team: 'berth', 'with space': 'yes' },
      ExposedPorts: { '8080/tcp': {}, '53/udp': {} },
      User: 'app',
      Volumes: { '/data': {} },
      StopSignal: 'SIGINT',
      OnBuild: ['RUN echo later'],
    });
    // Without repo: untagged, listed with no names (<none>:<none> before API 1.43).
    const listed = (await d.request('GET', '/images/json')).json.find((i: { Id: string }) => i.Id === id);
    expect(listed.RepoTags).toEqual([]);
    expect(await outputOf(id, 'cat /hello; pwd; id -un')).toBe('hi\n/srv/sub\napp\n');

    // A body Config replaces the container's; what it leaves out comes from the container (dockerd's merge).
    const fromBody = await commit(`container=${ctr}&changes=${q('ENV FROM_CHANGE=1')}`, {
      Cmd: ['echo', 'body'],
      Env: ['FROM_BODY=1'],
    });
    const bodyCfg = (await inspect(fromBody)).Config;
    expect(bodyCfg.Cmd).toEqual(['echo', 'body']);
    expect(bodyCfg.Env).toEqual(['FROM_BODY=1', 'FROM_CHANGE=1', expect.stringMatching(/^PATH=/)]);
    expect(bodyCfg.Hostname).toBe('');
  });

  it('commits a running container, pausing it only while reading, and it keeps running', async () => {
    const id = await create(env.busybox, [
      'sh',
      '-c',
      'echo live > /live.txt; while true; do date > /tick; sleep 0.05; done',
    ]);
    await d.request('POST', `/containers/${id}/start`);
    await waitFor(
      async () =>
        ((await d.request('GET', `/containers/${id}/changes`)).json ?? []).some(
          (c: { Path: string }) => c.Path === '/live.txt',
        ),
      '/live.txt',
    );
    const paused = await commit(`container=${id}&repo=mine/live`);
    const state = (await d.request('GET', `/containers/${id}/json`)).json.State;
    expect(state).toMatchObject({ Running: true, Paused: false, Status: 'running' });
    expect(await outputOf('mine/live', 'cat /live.txt')).toBe('live\n');
    const unpaused = await commit(`container=${id}&pause=0`);
    expect(await outputOf(unpaused, 'cat /live.txt')).toBe('live\n');
    expect(paused).not.toBe(unpaused);
    // A container the user paused stays paused.
    await d.request('POST', `/containers/${id}/pause`);
    await commit(`container=${id}`);
    expect((await d.request('GET', `/containers/${id}/json`)).json.State.Status).toBe('paused');
    await d.request('POST', `/containers/${id}/unpause`);
    expect((await d.request('GET', `/containers/${id}/json`)).json.State.Running).toBe(true);
    await d.request('DELETE', `/containers/${id}?force=1`);
  });

  it('gives the same layer digest for the same container committed twice', async () => {
    const ctr = await run(multi, CHANGES);
    const blobs = path.join(d.dataRoot, 'content/blobs/sha256');
    const layers = path.join(d.dataRoot, 'layers');
    const a = await commit(`container=${ctr}`);
    // The layer's tree is made from its blob after the commit has answered.
    const tree = path.join(layers, layerDirOf(await inspect(a)), 'diff');
    await waitFor(() => existsSync(tree), "the committed layer's tree", 20_000);
    const blobsAfterFirst = readdirSync(blobs).length;
    const layersAfterFirst = readdirSync(layers).length;
    const b = await commit(`container=${ctr}&comment=again`);
    expect(a).not.toBe(b); // a new config (created, comment)...
    expect((await inspect(b)).RootFS.Layers).toEqual((await inspect(a)).RootFS.Layers);
    // ...but the same layer: one new blob (the config), no new layer directory.
    expect(readdirSync(blobs).length).toBe(blobsAfterFirst + 1);
    expect(readdirSync(layers).length).toBe(layersAfterFirst);
    // Two containers with the same changes give the same layer too. mtimes are part
    // of a layer, so they are pinned here: the same script a second later differs.
    const same = 'echo same > /same.txt && touch -d @1700000000 /same.txt';
    const x = await commit(`container=${await run(multi, same)}`);
    const y = await commit(`container=${await run(multi, same)}`);
    expect((await inspect(y)).RootFS.Layers.at(-1)).toBe((await inspect(x)).RootFS.Layers.at(-1));
  });

  it('adds no layer for a container that changed nothing, as dockerd', async () => {
    const ctr = await run(env.busybox, 'true');
    const id = await commit(`container=${ctr}`);
    const parent = await inspect(env.busybox);
    expect((await inspect(id)).RootFS.Layers).toEqual(parent.RootFS.Layers);
    const history = (await d.request('GET', `/images/${id}/history`)).json;
    expect(history[0]).toMatchObject({ Id: id, Size: 0 });
    expect(await outputOf(id, 'echo ok')).toBe('ok\n');
  });

  it('refuses bad input and creates nothing', async () => {
    const ctr = await run(env.busybox, 'echo x > /x');
    const before = await imageCount();
    const bad = async (params: string, status: number, message: RegExp) => {
      const r = await d.request('POST', `/v1.43/commit?${params}`);
      expect(r.status, r.text).toBe(status);
      expect(r.json.message).toMatch(message);
    };
    await bad('container=nope', 404, /^No such container: nope$/);
    await bad(`container=${ctr}&repo=${q('Bad Repo')}`, 400, /^invalid reference format/);
    await bad(`container=${ctr}&repo=UPPER`, 400, /^invalid reference format: repository name .*must be lowercase/);
    await bad(`container=${ctr}&repo=ok&tag=${q('bad tag')}`, 400, /^invalid tag format$/);
    await bad(`container=${ctr}&repo=${q(`ok@sha256:${'a'.repeat(64)}`)}`, 400, /digest/);
    await bad(`container=${ctr}&changes=${q('RUN echo no')}`, 400, /^run is not a valid change command$/);
    await bad(`container=${ctr}&changes=${q('EXPOSE notaport')}`, 400, /invalid containerPort/);
    await bad(`container=${ctr}&changes=${q('STOPSIGNAL SIGNOPE')}`, 400, /Invalid signal/);
    const notJson = await d.request('POST', `/commit?container=${ctr}`, {
      raw: '{}',
      headers: { 'Content-Type': 'text/plain' },
    });
    expect(notJson.status).toBe(400);
    expect(await imageCount()).toBe(before);
    expect(readdirSync(path.join(d.dataRoot, 'layers/tmp'))).toEqual([]);
  });
});

describe('GET /containers/{id}/export', () => {
  const entries = async (tar: Buffer) => {
    const out = new Map<string, { type: string; body: string; linkname: string | null }>();
    const extract = tarStream.extract();
    Readable.from([tar]).pipe(extract);
    for await (const e of extract) {
      const chunks: Buffer[] = [];
      for await (const c of e) chunks.push(c as Buffer);
      out.set(e.header.name.replace(/\/$/, ''), {
        type: e.header.type ?? '',
        body: Buffer.concat(chunks).toString(),
        linkname: e.header.linkname ?? null,
      });
    }
    return out;
  };

  it('streams the flattened filesystem of a stopped and of a running container', async () => {
    const stopped = await run(multi, CHANGES);
    const r = await d.request('GET', `/containers/${stopped}/export`);
    expect(r.status).toBe(200);
    expect(r.headers['content-type']).toBe('application/x-tar');
    const files = await entries(r.body);
    expect(files.get('data/keep.txt')?.body).toBe('kept\nmodified\n');
    expect(files.get('data/change.txt')?.body).toBe('after\n');
    expect(files.get('added/link')).toMatchObject({ type: 'symlink', linkname: 'sub/f.txt' });
    expect(files.get('bin/busybox')?.type).toBe('file');
    for (const gone of ['data/added.txt', 'etc/motd', 'bin/sed', 'usr', 'data/replace/new.txt'])
      expect(files.has(gone), gone).toBe(false);
    expect([...files.keys()].some((n) => n.includes('.wh.'))).toBe(false);
    // Nothing stays mounted after a stopped container's export.
    expect(readdirSync(path.join(d.dataRoot, 'containers', stopped)).filter((n) => n.startsWith('export-'))).toEqual(
      [],
    );

    const running = await create(env.busybox, ['sh', '-c', 'echo up > /up.txt; sleep 1000']);
    await d.request('POST', `/containers/${running}/start`);
    await waitFor(
      async () => (await d.request('GET', `/containers/${running}/changes`)).json !== null,
      'the container to write',
    );
    const live = await entries((await d.request('GET', `/containers/${running}/export`)).body);
    expect(live.get('up.txt')?.body).toBe('up\n');
    await d.request('DELETE', `/containers/${running}?force=1`);
    expect((await d.request('GET', '/containers/nope/export')).status).toBe(404);
  });
});

describe('clients', () => {
  it('docker CLI: commit with --change, -m, -a; run the result; diff; history', async () => {
    const docker = dockerCli(d);
    const ctr = await run(env.busybox, 'echo hello from commit > /hello; mkdir /srv');
    const c = await docker([
      'commit',
      '-c',
      'CMD ["cat", "/hello"]',
      '-c',
      'ENV GREETING=hi',
      '-c',
      'WORKDIR /srv',
      '-c',
      'LABEL made.by=cli',
      '-m',
      'from the cli',
      '-a',
      'Cli Author',
      ctr,
      'cli/committed:v1',
    ]);
    expect(c.code, c.stderr).toBe(0);
    expect(c.stdout.trim()).toMatch(/^sha256:[0-9a-f]{64}$/);
    const runDefault = await docker(['run', '--rm', 'cli/committed:v1']);
    expect(runDefault.stdout, runDefault.stderr).toBe('hello from commit\n');
    const runScript = await docker(['run', '--rm', 'cli/committed:v1', 'sh', '-c', 'echo $GREETING; pwd']);
    expect(runScript.stdout, runScript.stderr).toBe('hi\n/srv\n');
    const fmt = await docker([
      'image',
      'inspect',
      '--format',
      '{{.Comment}}|{{.Author}}|{{index .Config.Labels "made.by"}}',
      'cli/committed:v1',
    ]);
    expect(fmt.stdout.trim()).toBe('from the cli|Cli Author|cli');
    const diff = await docker(['diff', ctr]);
    expect(diff.stdout.split('\n').filter(Boolean).sort()).toEqual(['A /hello', 'A /srv']);
    const history = await docker(['history', '--no-trunc', '--format', '{{.Comment}}', 'cli/committed:v1']);
    expect(history.stdout.split('\n')[0]).toBe('from the cli');
    const bad = await docker(['commit', 'nope-no-such']);
    expect(bad.code).not.toBe(0);
    expect(bad.stderr).toMatch(/No such container: nope-no-such/);
  });

  it('Python SDK: container.commit(repository=..., changes=...)', async () => {
    const ctr = await run(env.busybox, 'echo py > /py.txt');
    const { values, result } = await runPython(
      d,
      `
img = client.containers.get(${JSON.stringify(ctr.slice(0, 12))}).commit(repository='py/committed', tag='v2', message='from python', author='Py', changes=['LABEL via=python', 'EXPOSE 9000'])
emit('image', {'tags': img.tags, 'comment': img.attrs['Comment'], 'author': img.attrs['Author'], 'labels': img.labels, 'ports': img.attrs['Config']['ExposedPorts']})
`,
    );
    expect(result.code, result.stderr).toBe(0);
    expect(values.image).toEqual({
      tags: ['py/committed:v2'],
      comment: 'from python',
      author: 'Py',
      labels: { via: 'python' },
      ports: { '9000/tcp': {} },
    });
    expect(await outputOf('py/committed:v2', 'cat /py.txt')).toBe('py\n');
  });

  it('dockerode: container.commit()', async () => {
    const docker = new Docker({ socketPath: d.socket });
    const ctr = await run(env.busybox, 'echo node > /node.txt && rm /bin/vi');
    const res = await docker.getContainer(ctr).commit({
      repo: 'node/committed',
      tag: 'v3',
      comment: 'from dockerode',
      author: 'Node',
      changes: 'ENV FROM=dockerode',
    });
    expect(res).toEqual({ Id: expect.stringMatching(/^sha256:/) });
    const img = await docker.getImage('node/committed:v3').inspect();
    expect(img).toMatchObject({ Comment: 'from dockerode', Author: 'Node', Parent: (await inspect(env.busybox)).Id });
    expect(img.Config.Env).toContain('FROM=dockerode');
    expect(await outputOf('node/committed:v3', 'cat /node.txt; [ -e /bin/vi ] || echo no-vi')).toBe('node\nno-vi\n');
    const changes = await docker.getContainer(ctr).changes();
    expect(changes).toEqual(
      expect.arrayContaining([
        { Path: '/node.txt', Kind: 1 },
        { Path: '/bin/vi', Kind: 2 },
      ]),
    );
  });
});

describe('a commit cut short', () => {
  it("makes a committed layer's tree from its blob when the tree is missing, when first used", async () => {
    const k = await startDaemon();
    try {
      await pull(k, env.busybox);
      const create = await k.request('POST', '/containers/create', {
        body: { Image: env.busybox, Cmd: ['sh', '-c', 'echo restored > /r.txt; rm /bin/vi'] },
      });
      await k.request('POST', `/containers/${create.json.Id}/start`);
      expect((await k.request('POST', `/containers/${create.json.Id}/wait`)).json.StatusCode).toBe(0);
      const id = (await k.request('POST', `/commit?container=${create.json.Id}`)).json.Id;
      const tree = path.join(k.dataRoot, 'layers', layerDirOf((await k.request('GET', `/images/${id}/json`)).json));
      await waitFor(() => existsSync(path.join(tree, 'diff')), "the committed layer's tree", 20_000);
      await k.stop();
      rmSync(tree, { recursive: true });
      await k.restart();

      const ctr = (
        await k.request('POST', '/containers/create', {
          body: { Image: id, Cmd: ['sh', '-c', 'cat /r.txt; [ -e /bin/vi ] || echo no-vi'] },
        })
      ).json.Id;
      expect((await k.request('POST', `/containers/${ctr}/start`)).status).toBe(204);
      expect((await k.request('POST', `/containers/${ctr}/wait`)).json.StatusCode).toBe(0);
      expect(demuxText((await k.request('GET', `/containers/${ctr}/logs?stdout=1&stderr=1`)).body)).toBe(
        'restored\nno-vi\n',
      );
      expect(existsSync(path.join(tree, 'diff', 'r.txt'))).toBe(true);
    } finally {
      const all = (await k.request('GET', '/containers/json?all=1').catch(() => undefined))?.json ?? [];
      for (const c of all) await k.request('DELETE', `/containers/${c.Id}?force=1`).catch(() => undefined);
      await k.cleanup();
    }
  });

  it('leaves no listed image and no orphaned layer after berthd is killed mid-commit', async () => {
    const k = await startDaemon();
    try {
      await pull(k, env.busybox);
      const create = await k.request('POST', '/containers/create', {
        body: { Image: env.busybox, Cmd: ['sh', '-c', 'head -c 268435456 /dev/urandom > /big.bin'] },
      });
      const ctr = create.json.Id;
      await k.request('POST', `/containers/${ctr}/start`);
      expect((await k.request('POST', `/containers/${ctr}/wait`)).json.StatusCode).toBe(0);
      const before = (await k.request('GET', '/images/json?all=1')).json;
      const layersDir = path.join(k.dataRoot, 'layers');
      const layersBefore = readdirSync(layersDir).sort();

      const ingest = path.join(k.dataRoot, 'content/ingest');
      const pending = k.request('POST', `/commit?container=${ctr}&repo=killed/commit`).catch(() => undefined);
      await waitFor(() => readdirSync(ingest).length > 0, 'the commit to write its blob', 20_000, 2);
      await k.kill();
      await pending;
      await k.restart();

      expect((await k.request('GET', '/images/json?all=1')).json).toEqual(before);
      expect(readdirSync(layersDir).sort()).toEqual(layersBefore);
      expect(readdirSync(path.join(layersDir, 'tmp'))).toEqual([]);
      expect(readdirSync(ingest)).toEqual([]);
      // The container is still there, and committing it now works.
      const id = (await k.request('POST', `/commit?container=${ctr}&repo=killed/commit`)).json.Id;
      expect((await k.request('GET', '/images/killed/commit/json')).json.Id).toBe(id);
      expect(existsSync(path.join(layersDir, 'tmp'))).toBe(true);
    } finally {
      const all = (await k.request('GET', '/containers/json?all=1').catch(() => undefined))?.json ?? [];
      for (const c of all) await k.request('DELETE', `/containers/${c.Id}?force=1`).catch(() => undefined);
      await k.cleanup();
    }
  });
});

describe('memory while busy', () => {
  it('the C heap is given back after a commit of 20 MiB, and the daemon serves on: the committed image runs', async () => {
    const trims = () =>
      d
        .stderr()
        .split('\n')
        .filter((l) => l.includes('busy: gave the C heap back')).length;
    const src = await run(multi, 'dd if=/dev/urandom of=/blob bs=1M count=20 2>/dev/null && echo 200 > /f200');
    const before = trims();
    // Its 20 MiB go to an extraction thread, and the loop collects as they go (extractor.ts): the C heap's trim follows.
    const image = await commit(`container=${src}&repo=busy/commit`);
    await d.request('DELETE', `/containers/${src}`);
    await waitFor(() => trims() > before, "the C heap's trim after a collection", 20_000, 50);
    expect(await outputOf(image, 'wc -c < /blob && cat /f200')).toBe('20971520\n200\n');
    await d.request('DELETE', `/images/${image}?force=1`);
  });
});
