// POST /build on the wire, against dockerd 20.10's classic builder as
// captured from it (a session-9 recording, not kept in the tree): the records
// of the stream one by one, cache lines, q, rm=false/forcerm, labels, the
// build-arg warning, the errors and their status codes, BuildKit's
// version=2 refused, the intermediate images hidden, a build cancelled by its
// client leaving nothing behind.
import { describe, expect, it } from 'vitest';
import { buildRaw, type BuildRecord, cacheSteps, contextTar, FAILING_RUN_ERROR, failingRun } from '../harness/build.js';
import { waitFor } from '../harness/daemon.js';
import { useEnv } from '../harness/env.js';
import { holdings, expectNoLeaks } from '../harness/leaks.js';
import http from 'node:http';

const ctx = useEnv();

const ID12 = /^[0-9a-f]{12}$/;

/** The records with ids replaced by placeholders, to compare with dockerd's shape. */
function shape(records: BuildRecord[]): BuildRecord[] {
  return records.map((r) => {
    if (r.aux?.ID) return { aux: { ID: r.aux.ID.replace(/^sha256:[0-9a-f]{64}$/, 'sha256:<id>') } };
    if (typeof r.stream === 'string')
      return {
        stream: r.stream
          .replace(/^( ---> (Running in )?)[0-9a-f]{12}\n$/, '$1<id>\n')
          .replace(/^(Removing intermediate container |Successfully built )[0-9a-f]{12}\n$/, '$1<id>\n'),
      };
    return r;
  });
}

/** Without the `Running in` / `Removing intermediate container` lines of steps other than RUN. */
function withoutMetadataContainers(records: BuildRecord[]): BuildRecord[] {
  let step = '';
  return records.filter((r) => {
    if (r.stream?.startsWith('Step ')) step = r.stream.replace(/^Step \d+\/\d+ : /, '');
    const containerLine =
      r.stream === ' ---> Running in <id>\n' || r.stream === 'Removing intermediate container <id>\n';
    return !containerLine || /^RUN /i.test(step);
  });
}

const containers = async () =>
  ((await ctx.daemon.request('GET', '/containers/json?all=1')).json as { Id: string; Command: string }[]) ?? [];

describe('the stream', () => {
  it('a 5-step build, then the same from the cache, record by record', async () => {
    const files = { ...cacheSteps(ctx.env.busybox), 'a.txt': 'api-stream\n' };
    const tar = await contextTar(files);
    const cold = await buildRaw(ctx.daemon, tar, { t: 'api-stream:1' });
    expect(cold.status).toBe(200);
    expect(cold.response.headers['content-type']).toBe('application/json');
    const run = shape(cold.records);
    // dockerd makes a container for every metadata step (CMD here) too; berth makes none: those lines may go.
    const noMetaContainers = withoutMetadataContainers(run);
    expect(noMetaContainers).toEqual([
      { stream: `Step 1/5 : FROM ${ctx.env.busybox}` },
      { stream: '\n' },
      { stream: ' ---> <id>\n' },
      { stream: 'Step 2/5 : COPY a.txt /a.txt' },
      { stream: '\n' },
      { stream: ' ---> <id>\n' },
      { stream: 'Step 3/5 : RUN cat /a.txt > /ran.txt' },
      { stream: '\n' },
      { stream: ' ---> Running in <id>\n' },
      { stream: 'Removing intermediate container <id>\n' },
      { stream: ' ---> <id>\n' },
      { stream: 'Step 4/5 : COPY b.txt /b.txt' },
      { stream: '\n' },
      { stream: ' ---> <id>\n' },
      { stream: 'Step 5/5 : CMD ["cat", "/ran.txt", "/b.txt"]' },
      { stream: '\n' },
      { stream: ' ---> <id>\n' },
      { aux: { ID: 'sha256:<id>' } },
      { stream: 'Successfully built <id>\n' },
      { stream: 'Successfully tagged api-stream:1\n' },
    ]);
    // The id printed for FROM is the base image's.
    const base = (await ctx.daemon.request('GET', `/images/${encodeURIComponent(ctx.env.busybox)}/json`)).json.Id;
    expect(cold.records[2]!.stream).toBe(` ---> ${base.slice(7, 19)}\n`);
    const id = cold.id!;
    expect(cold.text).toContain(`Successfully built ${id.slice(7, 19)}\n`);
    expect((await ctx.daemon.request('GET', '/images/api-stream:1/json')).json.Id).toBe(id);

    const cached = await buildRaw(ctx.daemon, tar, { t: 'api-stream:1' });
    expect(shape(cached.records)).toEqual([
      { stream: `Step 1/5 : FROM ${ctx.env.busybox}` },
      { stream: '\n' },
      { stream: ' ---> <id>\n' },
      ...[
        'Step 2/5 : COPY a.txt /a.txt',
        'Step 3/5 : RUN cat /a.txt > /ran.txt',
        'Step 4/5 : COPY b.txt /b.txt',
        'Step 5/5 : CMD ["cat", "/ran.txt", "/b.txt"]',
      ].flatMap((s) => [
        { stream: s },
        { stream: '\n' },
        { stream: ' ---> Using cache\n' },
        { stream: ' ---> <id>\n' },
      ]),
      { aux: { ID: 'sha256:<id>' } },
      { stream: 'Successfully built <id>\n' },
      { stream: 'Successfully tagged api-stream:1\n' },
    ]);
    expect(cached.id).toBe(id);
  });

  it('the image: config, parent chain, history as the classic builder writes it', async () => {
    const tar = await contextTar({ ...cacheSteps(ctx.env.busybox), 'a.txt': 'api-image\n' });
    const r = await buildRaw(ctx.daemon, tar, { t: 'api-image:1' });
    expect(r.error).toBeUndefined();
    const img = (await ctx.daemon.request('GET', '/images/api-image:1/json')).json;
    expect(img.Config.Cmd).toEqual(['cat', '/ran.txt', '/b.txt']);
    expect(img.Parent).toMatch(/^sha256:[0-9a-f]{64}$/);
    const hist = (await ctx.daemon.request('GET', '/images/api-image:1/history')).json as {
      CreatedBy: string;
      Size: number;
    }[];
    expect(hist.slice(0, 4).map((h) => h.CreatedBy.replace(/file:[0-9a-f]{64}/, 'file:<sum>'))).toEqual([
      '/bin/sh -c #(nop)  CMD ["cat" "/ran.txt" "/b.txt"]',
      '/bin/sh -c #(nop) COPY file:<sum> in /b.txt ',
      '/bin/sh -c cat /a.txt > /ran.txt',
      '/bin/sh -c #(nop) COPY file:<sum> in /a.txt ',
    ]);
    expect(hist[0]!.Size).toBe(0);
    expect(hist[1]!.Size).toBe(4);
    // Intermediate images are listed only with all=1.
    const listed = (await ctx.daemon.request('GET', '/images/json')).json as { Id: string }[];
    expect(listed.map((i) => i.Id)).not.toContain(img.Parent);
    const all = (await ctx.daemon.request('GET', '/images/json?all=1')).json as { Id: string }[];
    expect(all.map((i) => i.Id)).toContain(img.Parent);
  });

  it('cachefrom: only the images named are cache sources, as the classic builder (none: no cache)', async () => {
    const files = { Dockerfile: `FROM ${ctx.env.busybox}\nENV FOO=cachefrom\nRUN touch /baz\nRUN touch /bax\n` };
    const tar = await contextTar(files);
    expect((await buildRaw(ctx.daemon, tar, { t: 'api-cachefrom:1' })).error).toBeUndefined();
    const hits = (r: { text: string }) => r.text.split('\n').filter((l) => l === ' ---> Using cache').length;
    expect(hits(await buildRaw(ctx.daemon, tar, { cachefrom: JSON.stringify(['api-cachefrom:1']) }))).toBe(3);
    expect(hits(await buildRaw(ctx.daemon, tar, { cachefrom: JSON.stringify(['nosuchtag']) }))).toBe(0);
    expect(hits(await buildRaw(ctx.daemon, tar, {}))).toBe(3);
  });

  it("a RUN's stdout and stderr (stderr in red, as dockerd marks it)", async () => {
    const tar = await contextTar({
      Dockerfile: `FROM ${ctx.env.busybox}\nRUN echo to-stdout && echo to-stderr >&2\n`,
    });
    const r = await buildRaw(ctx.daemon, tar, { nocache: '1' });
    const streams = r.records.map((x) => x.stream ?? '');
    expect(streams.join('')).toContain('to-stdout\n');
    expect(streams.join('')).toContain('\u001b[91mto-stderr\n\u001b[0m');
  });

  it('q=1: one record with the whole id', async () => {
    const r = await buildRaw(ctx.daemon, await contextTar({ ...cacheSteps(ctx.env.busybox), 'a.txt': 'api-q\n' }), {
      q: '1',
    });
    expect(r.records).toHaveLength(1);
    expect(r.records[0]!.stream).toMatch(/^sha256:[0-9a-f]{64}\n$/);
  });

  it('labels: one more LABEL step per label at the end (sorted by key), on the final image', async () => {
    const tar = await contextTar({ Dockerfile: `FROM ${ctx.env.busybox}\nCMD ["true"]\n` });
    const r = await buildRaw(ctx.daemon, tar, { t: 'api-labels:1', labels: JSON.stringify({ b: '2', a: '1' }) });
    expect(r.text).toContain('Step 3/4 : LABEL a=1\n');
    expect(r.text).toContain('Step 4/4 : LABEL b=2\n');
    expect((await ctx.daemon.request('GET', '/images/api-labels:1/json')).json.Config.Labels).toEqual({
      a: '1',
      b: '2',
    });
  });

  it('several t', async () => {
    const tar = await contextTar({ Dockerfile: `FROM ${ctx.env.busybox}\nCMD ["several"]\n` });
    const r = await buildRaw(ctx.daemon, tar, {});
    expect(r.text).not.toContain('Successfully tagged');
    const qs = 't=api-several:1&t=api-several:2&t=other/name';
    const res = await ctx.daemon.request('POST', `/v1.41/build?${qs}`, {
      raw: tar,
      headers: { 'Content-Type': 'application/x-tar' },
    });
    expect(res.text).toContain('Successfully tagged api-several:1\\n');
    expect(res.text).toContain('Successfully tagged api-several:2\\n');
    expect(res.text).toContain('Successfully tagged other/name:latest\\n');
  });

  it('an unconsumed build arg: the warning after aux and before Successfully built; proxy args never named', async () => {
    const tar = await contextTar({ Dockerfile: `FROM ${ctx.env.busybox}\nARG USED\nRUN echo "$USED"\n` });
    const r = await buildRaw(ctx.daemon, tar, {
      buildargs: JSON.stringify({ USED: 'u', UNUSED: 'x', HTTP_PROXY: 'http://p.invalid', ftp_proxy: 'x' }),
      nocache: '1',
    });
    const i = r.records.findIndex((x) => x.stream === '[Warning] One or more build-args [UNUSED] were not consumed\n');
    expect(i).toBeGreaterThan(0);
    expect(r.records[i - 1]!.aux?.ID).toBeDefined();
    expect(r.records[i + 1]!.stream).toMatch(/^Successfully built /);
    expect(r.text).toContain('u\n');
  });

  it('ONBUILD: "# Executing N build trigger(s)" after the FROM line', async () => {
    const parent = await contextTar({
      Dockerfile: `FROM ${ctx.env.busybox}\nONBUILD RUN echo trigger-one\nONBUILD ENV T=2\n`,
    });
    expect((await buildRaw(ctx.daemon, parent, { t: 'api-onbuild:parent' })).error).toBeUndefined();
    const child = await buildRaw(ctx.daemon, await contextTar({ Dockerfile: 'FROM api-onbuild:parent\n' }), {
      t: 'api-onbuild:child',
    });
    expect(child.text).toMatch(/^Step 1\/1 : FROM api-onbuild:parent\n# Executing 2 build triggers\n/);
    expect(child.text).toContain('trigger-one\n');
    const cfg = (await ctx.daemon.request('GET', '/images/api-onbuild:child/json')).json.Config;
    expect(cfg.Env).toContain('T=2');
    expect(cfg.OnBuild ?? []).toEqual([]);
  });
});

describe('failures within the stream', () => {
  it('a failing RUN: errorDetail with the exit code; its container is kept (rm without forcerm, as dockerd)', async () => {
    const before = (await containers()).map((c) => c.Id);
    const r = await buildRaw(ctx.daemon, await contextTar(failingRun(ctx.env.busybox)), { nocache: '1' });
    expect(r.status).toBe(200);
    expect(r.records.at(-1)).toEqual({
      errorDetail: { code: 3, message: FAILING_RUN_ERROR },
      error: FAILING_RUN_ERROR,
    });
    expect(r.text).toContain('before the failure\n');
    expect(r.text).not.toContain('never');
    const cid = [...r.text.matchAll(/Running in ([0-9a-f]{12})\n/g)].at(-1)?.[1];
    const kept = (await containers()).filter((c) => !before.includes(c.Id));
    expect(kept.map((c) => [c.Id.slice(0, 12), c.Command])).toEqual([[cid, "/bin/sh -c 'exit 3'"]]);
    await ctx.daemon.request('DELETE', `/containers/${kept[0]!.Id}`);
  });

  it('COPY of a missing file: dockerd 20.10 message, no code', async () => {
    const r = await buildRaw(
      ctx.daemon,
      await contextTar({ Dockerfile: `FROM ${ctx.env.busybox}\nCOPY nothere.txt /x\n` }),
    );
    const msg =
      'COPY failed: file not found in build context or excluded by .dockerignore: stat nothere.txt: file does not exist';
    expect(r.records.at(-1)).toEqual({ errorDetail: { message: msg }, error: msg });
  });

  it('rm=false keeps the RUN step container; forcerm=1 removes even a failed one', async () => {
    const before = (await containers()).map((c) => c.Id);
    const kept = await buildRaw(
      ctx.daemon,
      await contextTar({ Dockerfile: `FROM ${ctx.env.busybox}\nRUN echo kept\n` }),
      { rm: 'false', nocache: '1' },
    );
    expect(kept.error).toBeUndefined();
    expect(kept.text).not.toContain('Removing intermediate container');
    const cid = /Running in ([0-9a-f]{12})/.exec(kept.text)?.[1];
    expect(cid).toMatch(ID12);
    const now = await containers();
    expect(now.map((c) => c.Id.slice(0, 12))).toContain(cid);
    await ctx.daemon.request('DELETE', `/containers/${cid}?force=1`);

    const forced = await buildRaw(ctx.daemon, await contextTar(failingRun(ctx.env.busybox)), {
      forcerm: '1',
      nocache: '1',
    });
    expect(forced.error).toBe(FAILING_RUN_ERROR);
    expect((await containers()).map((c) => c.Id)).toEqual(before);
  });

  it('cpusetcpus not on this machine: the build fails at its RUN, no container left', async () => {
    const before = (await containers()).length;
    const r = await buildRaw(ctx.daemon, await contextTar({ Dockerfile: `FROM ${ctx.env.busybox}\nRUN echo x\n` }), {
      cpusetcpus: '999',
      nocache: '1',
    });
    // dockerd answers 200 and fails in the stream; refusing upfront with a 400 is as good.
    if (r.status === 200) expect(r.error).toMatch(/Requested CPUs are not available|cpuset/i);
    else expect(r.status).toBe(400);
    expect((await containers()).length).toBe(before);
  });
});

describe('errors before the first step', () => {
  const cases: Array<[string, Record<string, string>, number[], string | RegExp]> = [
    [
      'unknown instruction',
      { Dockerfile: 'FROM busybox\nFOO bar\n' },
      [400],
      'dockerfile parse error line 2: unknown instruction: FOO',
    ],
    [
      'ENV without arguments',
      { Dockerfile: 'FROM busybox\nENV\n' },
      [400],
      'dockerfile parse error line 2: ENV requires at least one argument',
    ],
    [
      'COPY with one argument',
      { Dockerfile: 'FROM busybox\nCOPY onlyone\n' },
      [400],
      'dockerfile parse error line 2: COPY requires at least two arguments, but only one was provided. Destination could not be determined',
    ],
    ['comments only', { Dockerfile: '# nothing\n\n' }, [400], 'failed to parse Dockerfile: file with no instructions'],
    ['RUN before FROM', { Dockerfile: 'RUN echo hi\nFROM busybox\n' }, [400], 'no build stage in current context'],
    // dockerd says 500 here; a 400 is the better answer and either is a failed build for every client.
    ['no Dockerfile', { 'a.txt': 'a' }, [400, 500], 'Cannot locate specified Dockerfile: Dockerfile'],
  ];
  it.each(cases)('%s', async (_name, files, statuses, message) => {
    const r = await buildRaw(ctx.daemon, await contextTar(files));
    expect(statuses).toContain(r.status);
    expect(r.response.json?.message).toEqual(message);
  });

  it('dockerfile= naming a file the context lacks', async () => {
    const r = await buildRaw(ctx.daemon, await contextTar({ Dockerfile: 'FROM busybox\n' }), { dockerfile: 'nope' });
    expect([400, 500]).toContain(r.status);
    expect(r.response.json?.message).toBe('Cannot locate specified Dockerfile: nope');
  });

  it('dockerfile= in a subdirectory', async () => {
    const r = await buildRaw(
      ctx.daemon,
      await contextTar({ 'sub/My.Dockerfile': `FROM ${ctx.env.busybox}\nCMD ["sub"]\n` }),
      { dockerfile: 'sub/My.Dockerfile', t: 'api-subdir:1' },
    );
    expect(r.error).toBeUndefined();
    expect((await ctx.daemon.request('GET', '/images/api-subdir:1/json')).json.Config.Cmd).toEqual(['sub']);
  });

  it('a query parameter given twice: the first value, as dockerd (docker-py sends `dockerfile` twice)', async () => {
    const tar = await contextTar({
      'first.Dockerfile': `FROM ${ctx.env.busybox}\nCMD ["first"]\n`,
      'second.Dockerfile': `FROM ${ctx.env.busybox}\nCMD ["second"]\n`,
    });
    const res = await ctx.daemon.request(
      'POST',
      '/v1.41/build?t=api-twice:1&dockerfile=first.Dockerfile&dockerfile=second.Dockerfile',
      { raw: tar, headers: { 'Content-Type': 'application/x-tar' } },
    );
    expect(res.status).toBe(200);
    expect((await ctx.daemon.request('GET', '/images/api-twice:1/json')).json.Config.Cmd).toEqual(['first']);
  });

  it('a target the Dockerfile lacks', async () => {
    const r = await buildRaw(ctx.daemon, await contextTar({ Dockerfile: 'FROM busybox AS a\n' }), { target: 'nope' });
    expect(r.status).toBe(400);
    expect(r.response.json?.message).toBe('failed to reach build target nope in Dockerfile');
  });

  it('version=2 (BuildKit) is refused, saying to use the classic builder', async () => {
    const r = await buildRaw(ctx.daemon, await contextTar({ Dockerfile: 'FROM busybox\n' }), { version: '2' });
    expect([400, 501]).toContain(r.status);
    expect(r.response.json?.message).toMatch(/BuildKit/);
    expect(r.response.json?.message).toMatch(/DOCKER_BUILDKIT=0|classic builder/);
    const v3 = await buildRaw(ctx.daemon, await contextTar({ Dockerfile: 'FROM busybox\n' }), { version: '3' });
    expect([400, 500]).toContain(v3.status);
    expect(v3.response.json?.message).toBe('invalid version "3"');
  });

  it('a query parameter berth does not honour is refused, not ignored', async () => {
    const tar = await contextTar({ Dockerfile: 'FROM busybox\n' });
    const queries: Record<string, string>[] = [{ squash: '1' }, { isolation: 'hyperv' }, { platform: 'linux/s390x' }];
    for (const q of queries) {
      const r = await buildRaw(ctx.daemon, tar, q);
      expect(r.status, JSON.stringify(q)).toBe(400);
      expect(r.response.json?.message).toBeTruthy();
    }
  });

  it('remote= a git URL is refused with a clear 400', async () => {
    const r = await ctx.daemon.request(
      'POST',
      `/v1.41/build?remote=${encodeURIComponent('git://example.invalid/x.git')}`,
    );
    expect(r.status).toBe(400);
    expect(r.json?.message).toMatch(/git/i);
  });
});

/** POST /build of `tar`, hung up once the stream holds `marker` (and `meanwhile` has run). */
async function buildHungUpAt(tar: Buffer, marker: string, meanwhile?: () => Promise<void>): Promise<void> {
  const req = http.request({
    socketPath: ctx.daemon.socket,
    method: 'POST',
    path: '/v1.41/build?nocache=1',
    headers: { 'Content-Type': 'application/x-tar', 'Content-Length': String(tar.length) },
  });
  let seen = '';
  await new Promise<void>((resolve, reject) => {
    req.on('response', (res) => {
      res.on('data', (c: Buffer) => {
        seen += c.toString();
        if (seen.includes(marker)) resolve();
      });
      res.on('end', () => reject(new Error(`the build ended before ${marker}: ${seen}`)));
    });
    req.on('error', reject);
    req.end(tar);
  });
  try {
    await meanwhile?.();
  } finally {
    req.destroy();
  }
}

describe('a build cancelled by its client', () => {
  it('stops the running step and leaves no container, mount or temp file', async () => {
    const tar = await contextTar({
      Dockerfile: `FROM ${ctx.env.busybox}\nRUN echo started-sleeping && sleep 300\n`,
    });
    // A warm-up build, so that the snapshot below has what a first build legitimately keeps open.
    await buildRaw(ctx.daemon, await contextTar({ Dockerfile: `FROM ${ctx.env.busybox}\nRUN true\n` }), {
      nocache: '1',
    });
    const before = holdings(ctx.daemon);
    const cBefore = (await containers()).length;
    // The RUN's own output, not the step line: the container runs.
    await buildHungUpAt(tar, '{"stream":"started-sleeping\\n"}', async () => {
      expect((await containers()).length).toBe(cBefore + 1);
    });
    await waitFor(async () => (await containers()).length === cBefore, 'the step container to go', 20_000);
    await expectNoLeaks(ctx.daemon, before, 20_000);
  });

  it('a hang-up while the RUN step is being set up: its container does not run on', async () => {
    const cBefore = (await containers()).length;
    const tar = await contextTar({ Dockerfile: `FROM ${ctx.env.busybox}\nRUN sleep 300\n` });
    await buildHungUpAt(tar, '{"stream":"Step 2/2 : RUN sleep 300"}');
    await waitFor(async () => (await containers()).length === cBefore, 'the step container to go', 20_000);
  });
});
