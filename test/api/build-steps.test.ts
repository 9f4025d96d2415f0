// POST /build, the engine side (test/api/build.test.ts is the stream and client side) against a real berthd and runc: the classic builder's stream as
// dockerd 20.10 writes it (notes captured from a real dockerd), stages and
// --target, COPY --from, the cache, ARG/ENV, ONBUILD, failing RUNs and a
// build its client abandons.
import http from 'node:http';
import { beforeAll, describe, expect, it } from 'vitest';
import type { Daemon } from '../harness/daemon.js';
import { pull, useEnv, type Env } from '../harness/env.js';
import { demuxText } from '../harness/streams.js';
import { busyboxImage, pushImage } from '../harness/images.js';
import { type TarEntry, tarOf } from '../harness/tar.js';

const ctx = useEnv();
let env: Env;
let d: Daemon;

beforeAll(() => {
  env = ctx.env;
  d = ctx.daemon;
});

type Msg = { stream?: string; aux?: { ID: string }; error?: string; errorDetail?: { code?: number; message: string } };

/** A context tar of `files` (name → content). */
const context = (files: Record<string, string>): Promise<Buffer> =>
  tarOf(Object.entries(files).map(([name, body]): TarEntry => ({ name, body, mode: 0o644 })));

async function build(
  files: Record<string, string>,
  params: Record<string, string | string[]> = {},
): Promise<{ status: number; messages: Msg[]; text: string; out: string; id?: string }> {
  const sp = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) for (const x of Array.isArray(v) ? v : [v]) sp.append(k, x);
  const r = await d.request('POST', `/v1.41/build?${sp}`, {
    raw: await context(files),
    headers: { 'Content-Type': 'application/x-tar' },
  });
  const messages: Msg[] =
    r.status === 200
      ? r.text
          .split('\n')
          .filter(Boolean)
          .map((l) => JSON.parse(l) as Msg)
      : [];
  const out = messages.map((m) => m.stream ?? '').join('');
  const id = [...messages].reverse().find((m) => m.aux)?.aux?.ID;
  return { status: r.status, messages, text: r.text, out, ...(id ? { id } : {}) };
}

const df = (lines: string[]) => lines.join('\n').replace('FROM busybox', `FROM ${env.busybox}`);
const inspect = async (image: string) => (await d.request('GET', `/v1.41/images/${image}/json`)).json;
const containerCount = async () => (await d.request('GET', '/containers/json?all=1')).json.length as number;

async function runImage(image: string, cmd?: string[]): Promise<string> {
  const c = await d.request('POST', '/containers/create', { body: { Image: image, ...(cmd ? { Cmd: cmd } : {}) } });
  expect(c.status, c.text).toBe(201);
  const id = c.json.Id as string;
  await d.request('POST', `/containers/${id}/start`);
  await d.request('POST', `/containers/${id}/wait`);
  const logs = await d.request('GET', `/containers/${id}/logs?stdout=1&stderr=1`);
  await d.request('DELETE', `/containers/${id}?force=1`);
  return demuxText(logs.body);
}

describe('POST /build', () => {
  it('builds a 5-step Dockerfile in dockerd’s stream, then again all from the cache', async () => {
    const files = {
      Dockerfile: df([
        'FROM busybox',
        'COPY a.txt /a.txt',
        'RUN echo built > /b.txt',
        'ENV FOO=bar',
        'CMD ["cat", "/a.txt"]',
      ]),
      'a.txt': 'hello\n',
    };
    const before = await containerCount();
    const cold = await build(files, { t: 'simple:1' });
    expect(cold.status, cold.text).toBe(200);
    const s = cold.messages.map((m) => m.stream);
    expect(s[0]).toBe(`Step 1/5 : FROM ${env.busybox}`);
    expect(s[1]).toBe('\n');
    expect(s[2]).toMatch(/^ ---> [0-9a-f]{12}\n$/);
    expect(s[3]).toBe('Step 2/5 : COPY a.txt /a.txt');
    expect(cold.out).toMatch(
      /Step 3\/5 : RUN echo built > \/b.txt\n ---> Running in [0-9a-f]{12}\nRemoving intermediate container [0-9a-f]{12}\n ---> [0-9a-f]{12}\n/,
    );
    expect(cold.out).toContain('Step 5/5 : CMD ["cat", "/a.txt"]\n');
    expect(cold.id).toMatch(/^sha256:[0-9a-f]{64}$/);
    expect(cold.out).toMatch(
      new RegExp(`Successfully built ${cold.id!.slice(7, 19)}\nSuccessfully tagged simple:1\n$`),
    );
    expect(await containerCount()).toBe(before);

    const img = await inspect('simple:1');
    expect(img.Config.Cmd).toEqual(['cat', '/a.txt']);
    expect(img.Config.Env).toContain('FOO=bar');
    expect(img.ContainerConfig.Cmd).toEqual(['/bin/sh', '-c', '#(nop) ', 'CMD ["cat" "/a.txt"]']);
    const history = (await d.request('GET', '/images/simple:1/history')).json as Array<{
      CreatedBy: string;
      Size: number;
    }>;
    expect(history[0]!.CreatedBy).toBe('/bin/sh -c #(nop)  CMD ["cat" "/a.txt"]');
    expect(history[1]!.CreatedBy).toBe('/bin/sh -c #(nop)  ENV FOO=bar');
    expect(history[2]!.CreatedBy).toBe('/bin/sh -c echo built > /b.txt');
    expect(history[3]!.CreatedBy).toMatch(/^\/bin\/sh -c #\(nop\) COPY file:[0-9a-f]{64} in \/a.txt $/);
    expect(await runImage('simple:1')).toBe('hello\n');
    expect(await runImage('simple:1', ['cat', '/b.txt'])).toBe('built\n');

    const warm = await build(files, { t: 'simple:1' });
    expect(warm.out.match(/ ---> Using cache\n/g)?.length).toBe(4);
    expect(warm.id).toBe(cold.id);

    // A changed file invalidates its COPY and every step after it.
    const changed = await build({ ...files, 'a.txt': 'changed\n' });
    expect(changed.out).not.toContain('Using cache');
    expect(changed.out).toContain('Running in');
    expect(await runImage(changed.id!)).toBe('changed\n');
  });
});

describe('POST /build: stages, args, triggers, failures', () => {
  it('builds up to --target, with COPY --from an earlier stage, and emits aux after each stage', async () => {
    const r = await build(
      {
        Dockerfile: [
          `FROM ${env.busybox} AS builder`,
          'RUN echo from-builder > /out.txt',
          `FROM ${env.busybox} AS final`,
          'COPY --from=builder /out.txt /out.txt',
          'CMD ["cat", "/out.txt"]',
          'FROM final AS extra',
          'RUN echo never',
        ].join('\n'),
      },
      { t: 'multi:final', target: 'final' },
    );
    expect(r.status, r.text).toBe(200);
    expect(r.out).toContain(`Step 1/5 : FROM ${env.busybox} AS builder\n`);
    expect(r.out).toContain('Step 4/5 : COPY --from=builder /out.txt /out.txt\n');
    expect(r.out).not.toContain('never');
    expect(r.messages.filter((m) => m.aux).length).toBe(2);
    expect(await runImage('multi:final')).toBe('from-builder\n');
  });

  it('expands ARG and ENV, keys the cache on the build args used and warns of the unused ones', async () => {
    const files = {
      Dockerfile: [
        'ARG BASE=busybox',
        `FROM ${env.registry.host}/\${BASE}:latest`,
        'ARG DIR=/opt',
        'ENV APP=${DIR}/app NAME=x',
        'RUN echo "$APP $NAME $DIR" > /where',
        'WORKDIR $APP',
        'CMD cat /where; pwd',
      ].join('\n'),
    };
    const r = await build(files, { buildargs: JSON.stringify({ DIR: '/srv', UNUSED: 'u', HTTP_PROXY: 'http://p' }) });
    expect(r.status, r.text).toBe(200);
    expect(r.out).toContain('Step 1/7 : ARG BASE=busybox\nStep 2/7 : FROM ');
    expect(r.out).toContain('[Warning] One or more build-args [UNUSED] were not consumed\nSuccessfully built');
    expect(await runImage(r.id!)).toBe('/srv/app x /srv\n/srv/app\n');
    const history = (await d.request('GET', `/images/${r.id}/history`)).json as Array<{ CreatedBy: string }>;
    expect(history.map((h) => h.CreatedBy)).toContain('|1 DIR=/srv /bin/sh -c echo "$APP $NAME $DIR" > /where');
    // Another value of the arg misses the cache from where it is used on.
    const other = await build(files, { buildargs: JSON.stringify({ DIR: '/usr' }) });
    expect(other.out).toContain('Step 3/7 : ARG DIR=/opt\n ---> Using cache');
    expect(await runImage(other.id!)).toBe('/usr/app x /usr\n/usr/app\n');
  });

  it('runs a base image’s ONBUILD triggers after FROM', async () => {
    const base = await build(
      { Dockerfile: df(['FROM busybox', 'ONBUILD RUN echo one-trigger > /t1', 'ONBUILD RUN echo two']) },
      { t: 'onbase:1' },
    );
    expect(base.status, base.text).toBe(200);
    const child = await build({ Dockerfile: 'FROM onbase:1\nCMD ["cat", "/t1"]' }, { t: 'onchild:1' });
    expect(child.status, child.text).toBe(200);
    const s = child.messages.map((m) => m.stream);
    expect(s.slice(0, 5)).toEqual(['Step 1/2 : FROM onbase:1', '\n', '# Executing 2 build trigger', 's', '\n']);
    expect(child.out).toContain('two\n');
    expect(await runImage('onchild:1')).toBe('one-trigger\n');
    expect((await inspect('onchild:1')).Config.OnBuild ?? null).toBeNull();
  });

  it('reports a failing RUN with its exit code, and leaves its container unless forcerm', async () => {
    const before = await containerCount();
    const files = { Dockerfile: df(['FROM busybox', 'RUN echo out; echo err >&2; exit 3']) };
    const r = await build(files, { nocache: '1' });
    expect(r.status).toBe(200);
    const msg = "The command '/bin/sh -c echo out; echo err >&2; exit 3' returned a non-zero code: 3";
    expect(r.messages.at(-1)).toEqual({ errorDetail: { code: 3, message: msg }, error: msg });
    expect(r.out).toContain('\u001b[91merr\n\u001b[0m');
    expect(await containerCount()).toBe(before + 1);
    await removeAll();
    const forced = await build(files, { forcerm: '1' });
    expect(forced.out).toContain('Removing intermediate container');
    expect(await containerCount()).toBe(before);
  });

  it('answers errors before the build as HTTP errors in dockerd’s words', async () => {
    const cases: Array<[Record<string, string>, Record<string, string>, number, string]> = [
      [{ Dockerfile: 'FROM busybox\nFOO bar' }, {}, 400, 'dockerfile parse error line 2: unknown instruction: FOO'],
      [{ Dockerfile: 'FROM busybox' }, { target: 'nope' }, 400, 'failed to reach build target nope in Dockerfile'],
      [{ Dockerfile: 'FROM busybox' }, { dockerfile: 'nope' }, 500, 'Cannot locate specified Dockerfile: nope'],
      [{ Dockerfile: 'FROM busybox' }, { version: '2' }, 400, 'BuildKit is not supported'],
      [{ Dockerfile: 'FROM busybox' }, { platform: 'linux/s390x' }, 400, 'platform linux/s390x is not supported'],
      [
        { Dockerfile: 'FROM busybox' },
        { platform: 'foobar' },
        400,
        '"foobar": unknown operating system or architecture',
      ],
    ];
    for (const [files, params, status, message] of cases) {
      const r = await build(files, params);
      expect(r.status, r.text).toBe(status);
      expect(JSON.parse(r.text).message).toContain(message);
    }
    // FROM --platform is read once the build runs: its errors come in the stream.
    for (const [platform, message] of [
      ['linux/s390x', 'platform linux/s390x is not supported: berthd builds for linux/amd64 only'],
      ['foo/bar/baz/qux', '"foo/bar/baz/qux": cannot parse platform specifier: invalid argument'],
    ]) {
      const r = await build({ Dockerfile: `FROM --platform=${platform} busybox` });
      expect(r.messages.at(-1)).toMatchObject({ errorDetail: { message } });
    }
    const missing = await build({ Dockerfile: df(['FROM busybox', 'COPY nothere.txt /x']) });
    expect(missing.messages.at(-1)).toEqual({
      errorDetail: {
        message:
          'COPY failed: file not found in build context or excluded by .dockerignore: stat nothere.txt: file does not exist',
      },
      error:
        'COPY failed: file not found in build context or excluded by .dockerignore: stat nothere.txt: file does not exist',
    });
    expect((await d.request('POST', '/session')).status).toBe(400);
  });

  it('q prints only the id; labels add a step each; the tagged image has them', async () => {
    const r = await build(
      { Dockerfile: df(['FROM busybox', 'LABEL a=b']) },
      { q: '1', labels: JSON.stringify({ 'from.api': 'yes' }) },
    );
    expect(r.messages).toEqual([{ stream: expect.stringMatching(/^sha256:[0-9a-f]{64}\n$/) }]);
    const id = r.messages[0]!.stream!.trim();
    expect((await inspect(id)).Config.Labels).toEqual({ a: 'b', 'from.api': 'yes' });
  });

  it('COPY on a scratch stage, .dockerignore, --chown, and COPY --from of that stage', async () => {
    const imagesBefore = (await d.request('GET', '/images/json?all=1')).json.length as number;
    const r = await build({
      Dockerfile: [
        'FROM scratch AS files',
        'COPY . /ctx/',
        'FROM busybox',
        'COPY --from=files --chown=1000:10 /ctx /ctx',
        'RUN find /ctx | sort; stat -c "%u:%g %n" /ctx/a.txt',
      ]
        .join('\n')
        .replace('FROM busybox', `FROM ${env.busybox}`),
      '.dockerignore': 'secret.txt\n**/*.log\n',
      'a.txt': 'a',
      'secret.txt': 's',
      'sub/x.log': 'l',
      'sub/keep': 'k',
    });
    expect(r.status, r.text).toBe(200);
    expect(r.out).toContain(
      '/ctx\n/ctx/.dockerignore\n/ctx/Dockerfile\n/ctx/a.txt\n/ctx/sub\n/ctx/sub/keep\n1000:10 /ctx/a.txt\n',
    );
    const stage = r.messages.filter((m) => m.aux)[0]!.aux!.ID;
    expect((await inspect(stage)).Parent).toBe('');
    // Two stage images, the RUN's and the COPY's: the empty image the scratch COPY was made in is gone.
    expect((await d.request('GET', '/images/json?all=1')).json.length).toBe(imagesBefore + 3);
  });

  it('pulls a missing base image, with the X-Registry-Config given, and shows the pull', async () => {
    await pushImage(env.registry, 'tobepulled', '1', await busyboxImage());
    const raw = await context({ Dockerfile: `FROM ${env.registry.host}/tobepulled:1\nRUN true` });
    const auth = Buffer.from(JSON.stringify({ [env.registry.host]: { username: 'u', password: 'p' } })).toString(
      'base64url',
    );
    const r = await d.request('POST', '/build?nocache=1', {
      raw,
      headers: { 'Content-Type': 'application/x-tar', 'X-Registry-Config': auth },
    });
    expect(r.status, r.text).toBe(200);
    const lines = r.text
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(lines.some((l) => l.status === 'Pulling from tobepulled')).toBe(true);
    expect(lines.at(-1)).toEqual({ stream: expect.stringMatching(/^Successfully built [0-9a-f]{12}\n$/) });
    expect((await d.request('GET', `/images/${env.registry.host}/tobepulled:1/json`)).status).toBe(200);
  });

  it('cachefrom: a pulled image’s history stands for the steps it made', async () => {
    const files = {
      Dockerfile: df([
        'FROM busybox',
        'COPY a.txt /a.txt',
        'RUN echo cf > /cf.txt',
        'ENV CF=1',
        'CMD ["cat", "/cf.txt"]',
      ]),
      'a.txt': 'cachefrom\n',
    };
    const ref = `${env.registry.host}/cachefrom:1`;
    const first = await build(files, { t: ref });
    expect(first.status, first.text).toBe(200);
    const push = await d.request('POST', `/images/${ref}/push`, { headers: { 'X-Registry-Auth': 'e30=' } });
    expect(push.text).not.toContain('"error"');
    // Gone with its parent chain; pulled back, it has no parents: only its history says how it was made.
    expect((await d.request('DELETE', `/images/${ref}`)).status).toBe(200);
    await pull(d, ref);
    expect((await inspect(ref)).Parent).toBe('');
    const again = await build(files, { cachefrom: JSON.stringify([ref]) });
    expect(again.status, again.text).toBe(200);
    expect(again.out.match(/ ---> Using cache\n/g)?.length).toBe(4);
    expect(again.out).not.toContain('Running in');
    expect(await runImage(again.id!)).toBe('cf\n');
    const img = await inspect(again.id!);
    expect(img.Config.Cmd).toEqual(['cat', '/cf.txt']);
    expect(img.Config.Env).toContain('CF=1');
    expect(img.RootFS.Layers).toEqual((await inspect(ref)).RootFS.Layers);
  });

  it('WORKDIR makes a directory the image lacks (a layer), and only records one it has', async () => {
    const r = await build({ Dockerfile: df(['FROM busybox', 'WORKDIR /app/sub', 'WORKDIR /etc', 'CMD ["pwd"]']) });
    expect(r.status, r.text).toBe(200);
    const history = (await d.request('GET', `/images/${r.id}/history`)).json as Array<{
      CreatedBy: string;
      Size: number;
    }>;
    expect(history[2]).toMatchObject({ CreatedBy: '/bin/sh -c #(nop) WORKDIR /app/sub' });
    expect(history[1]).toMatchObject({ CreatedBy: '/bin/sh -c #(nop) WORKDIR /etc', Size: 0 });
    expect(await runImage(r.id!, ['ls', '-d', '/app/sub'])).toBe('/app/sub\n');
    const again = await build({ Dockerfile: df(['FROM busybox', 'WORKDIR /app/sub', 'WORKDIR /etc', 'CMD ["pwd"]']) });
    expect(again.out.match(/ ---> Using cache\n/g)?.length).toBe(3);
    expect(again.id).toBe(r.id);
  });

  it('ADD expands a local archive and downloads a URL', async () => {
    const inner = await tarOf([{ name: 'inner/x.txt', body: 'from the archive\n', mode: 0o644 }]);
    const server = http.createServer((_req, res) => {
      res.writeHead(200, { 'Content-Type': 'text/plain', 'Last-Modified': 'Mon, 01 Jan 2024 00:00:00 GMT' });
      res.end('downloaded\n');
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const port = (server.address() as { port: number }).port;
    try {
      const raw = await tarOf([
        {
          name: 'Dockerfile',
          body: df([
            'FROM busybox',
            'ADD a.tar /x/',
            `ADD http://127.0.0.1:${port}/file.txt /dl/`,
            'RUN cat /x/inner/x.txt /dl/file.txt; stat -c %a /dl/file.txt',
          ]),
          mode: 0o644,
        },
        { name: 'a.tar', body: inner, mode: 0o644 },
      ]);
      const r = await d.request('POST', '/build?nocache=1', { raw, headers: { 'Content-Type': 'application/x-tar' } });
      expect(r.status, r.text).toBe(200);
      const out = r.text
        .split('\n')
        .filter(Boolean)
        .map((l) => (JSON.parse(l) as Msg).stream ?? '')
        .join('');
      expect(out, r.text).toContain('from the archive\ndownloaded\n600\n');
    } finally {
      server.close();
    }
  });

  it('a build whose client goes away stops its RUN and leaves no container', async () => {
    const before = await containerCount();
    const body = await context({ Dockerfile: df(['FROM busybox', 'RUN echo started; sleep 60']) });
    const seen = await new Promise<string>((resolve, reject) => {
      const req = http.request(
        {
          socketPath: d.socket,
          method: 'POST',
          path: '/build?nocache=1',
          headers: { 'Content-Type': 'application/x-tar' },
        },
        (res) => {
          let text = '';
          res.on('data', (c: Buffer) => {
            text += c.toString();
            if (text.includes('{"stream":"started')) {
              req.destroy();
              resolve(text);
            }
          });
        },
      );
      req.on('error', () => undefined);
      req.end(body);
      setTimeout(() => reject(new Error('no output')), 20_000);
    });
    expect(seen).toContain('Running in');
    await waitUntil(async () => (await containerCount()) === before);
  });
});

async function removeAll(): Promise<void> {
  for (const c of (await d.request('GET', '/containers/json?all=1')).json as Array<{ Id: string }>)
    await d.request('DELETE', `/containers/${c.Id}?force=1`);
}

async function waitUntil(check: () => Promise<boolean>, ms = 15_000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > end) throw new Error('timed out');
    await new Promise((r) => setTimeout(r, 100));
  }
}
