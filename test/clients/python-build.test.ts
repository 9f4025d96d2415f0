// Debian's python3-docker (5.0.3) `images.build` and the low-level
// `api.build` against berthd: it sends booleans as "True"/"False", filters the
// context with .dockerignore itself, finds the image id in the stream
// ("Successfully built …" or "sha256:…" with q=True) and raises BuildError
// with the build log on an error record. Multi-stage with target and COPY
// --from, cache hits and misses, .dockerignore, ARG/ENV, ONBUILD, a failing
// RUN, an unconsumed build arg.
import { describe, expect, it } from 'vitest';
import {
  ARG_ENV_OUT,
  argEnv,
  buildArgs,
  cacheSteps,
  contextDirs,
  DOCKERIGNORE_LISTING,
  dockerignore,
  FAILING_RUN_ERROR,
  failingRun,
  MULTI_STAGE_OUT,
  multiStage,
  ONBUILD_OUT,
  onbuildBase,
  onbuildChild,
  UNUSED_WARNING,
  writeContext,
} from '../harness/build.js';
import { runPython } from '../harness/clients.js';
import { useEnv } from '../harness/env.js';

const ctx = useEnv();

const context = contextDirs();

/** Runs a script (see runPython) and fails with its traceback unless it exits 0. */
async function python(script: string): Promise<Record<string, any>> {
  const { values, result } = await runPython(ctx.daemon, script);
  expect(result.code, result.stderr).toBe(0);
  return values;
}

const bytes = (s: string) => ({ bytes: s });
const q = JSON.stringify;

/** The python helper every script gets: the build log as the text the CLI would print. */
const PRELUDE = `
def text(logs):
    return "".join(c.get("stream", "") for c in logs)
def run(image, *cmd):
    return client.containers.run(image, list(cmd) or None, remove=True)
`;

describe('python3-docker images.build', () => {
  it('multi-stage with target and COPY --from', async () => {
    const v = await python(`${PRELUDE}
image, logs = client.images.build(path=${q(context(multiStage(ctx.env.busybox)))}, tag="py-multi", target="final", rm=True)
log = text(logs)
emit('tags', image.tags)
emit('past', 'past the target' in log)
emit('out', run("py-multi"))
`);
    expect(v.tags).toEqual(['py-multi:latest']);
    expect(v.past).toBe(false);
    expect(v.out).toEqual(bytes(MULTI_STAGE_OUT));
  });

  it('uses the cache, and a changed file invalidates from its COPY on', async () => {
    const dir = context(cacheSteps(ctx.env.busybox));
    writeContext(dir, { 'a.txt': 'a-python\n' });
    const script = (n: string) => `
image, logs = client.images.build(path=${q(dir)}, tag="py-cache")
log = text(logs)
emit('hits${n}', log.count(" ---> Using cache\\n"))
emit('id${n}', image.id)
emit('out${n}', run("py-cache"))
`;
    const first = await python(PRELUDE + script('1') + script('2'));
    expect(first.hits1).toBe(0);
    expect(first.hits2).toBe(4);
    expect(first.id2).toBe(first.id1);
    writeContext(dir, { 'b.txt': 'b-2\n' });
    const b = await python(PRELUDE + script('3'));
    expect(b.hits3).toBe(2);
    expect(b.out3).toEqual(bytes('a-python\nb-2\n'));
    expect(b.id3).not.toBe(first.id1);
    writeContext(dir, { 'a.txt': 'a-3\n' });
    const a = await python(`${PRELUDE + script('4')}
image, logs = client.images.build(path=${q(dir)}, tag="py-cache", nocache=True)
emit('nocache', text(logs).count(" ---> Using cache\\n"))
`);
    expect(a.hits4).toBe(0);
    expect(a.out4).toEqual(bytes('a-3\nb-2\n'));
    expect(a.nocache).toBe(0);
  });

  it('leaves out what .dockerignore names', async () => {
    const v = await python(`${PRELUDE}
client.images.build(path=${q(context(dockerignore(ctx.env.busybox)))}, tag="py-ignore")
emit('listing', run("py-ignore", "cat", "/listing.txt"))
`);
    expect(v.listing).toEqual(bytes(DOCKERIGNORE_LISTING));
  });

  it('substitutes ARG and ENV values, with buildargs and ARG before FROM', async () => {
    const v = await python(`${PRELUDE}
image, logs = client.images.build(path=${q(context(argEnv()))}, tag="py-argenv", buildargs={"BASE_IMAGE": ${q(ctx.env.busybox)}, "DIR": "/srv"})
emit('warned', '[Warning]' in text(logs))
emit('out', run("py-argenv"))
emit('workdir', image.attrs["Config"]["WorkingDir"])
`);
    expect(v).toEqual({ warned: false, out: bytes(ARG_ENV_OUT), workdir: '/srv/app' });
  });

  it('runs ONBUILD triggers in a child build', async () => {
    const v = await python(`${PRELUDE}
parent, _ = client.images.build(path=${q(context(onbuildBase(ctx.env.busybox)))}, tag="py-onbuild-parent")
emit('onbuild', parent.attrs["Config"]["OnBuild"])
child, logs = client.images.build(path=${q(context(onbuildChild('py-onbuild-parent')))}, tag="py-onbuild-child")
emit('executing', '# Executing 2 build triggers\\n' in text(logs))
emit('out', run("py-onbuild-child"))
`);
    expect(v.onbuild).toEqual(['COPY trigger.txt /trigger.txt', 'RUN echo ran the RUN trigger >> /trigger.txt']);
    expect(v.executing).toBe(true);
    expect(v.out).toEqual(bytes(ONBUILD_OUT));
  });

  it('raises BuildError with the log on a failing RUN', async () => {
    const v = await python(`${PRELUDE}
try:
    client.images.build(path=${q(context(failingRun(ctx.env.busybox)))}, tag="py-fail")
    emit('raised', False)
except docker.errors.BuildError as e:
    emit('raised', True)
    emit('msg', e.msg)
    log = list(e.build_log)
    emit('printed', text(log))
    emit('detail', [c["errorDetail"] for c in log if "errorDetail" in c])
try:
    client.images.get("py-fail")
except docker.errors.ImageNotFound:
    emit('noImage', True)
`);
    expect(v.raised).toBe(true);
    expect(v.msg).toBe(FAILING_RUN_ERROR);
    expect(v.printed).toContain('before the failure\n');
    expect(v.detail).toEqual([{ code: 3, message: FAILING_RUN_ERROR }]);
    expect(v.noImage).toBe(true);
  });

  it('warns about a build arg no ARG consumed', async () => {
    const v = await python(`${PRELUDE}
image, logs = client.images.build(path=${q(context(buildArgs(ctx.env.busybox)))}, tag="py-args", buildargs={"USED": "given", "UNUSED": "x", "HTTPS_PROXY": "http://proxy.invalid:3128"})
emit('printed', text(logs))
emit('out', run("py-args"))
`);
    expect(v.printed).toContain(`${UNUSED_WARNING}\n`);
    expect(v.out).toEqual(bytes('used=given\n'));
  });

  it('quiet=True: api.build yields one record with the id; images.build finds it', async () => {
    const v = await python(`${PRELUDE}
import io, tarfile
records = list(client.api.build(path=${q(context(buildArgs(ctx.env.busybox)))}, quiet=True, decode=True))
emit('records', records)
image, _ = client.images.build(path=${q(context(buildArgs(ctx.env.busybox)))}, quiet=True)
emit('id', image.id)
`);
    expect(v.records).toEqual([{ stream: `${v.id}\n` }]);
    expect(v.id).toMatch(/^sha256:[0-9a-f]{64}$/);
  });

  it('a Dockerfile from a file object (fileobj=, no context)', async () => {
    const v = await python(`${PRELUDE}
import io
df = io.BytesIO(${q(`FROM ${ctx.env.busybox}\nRUN echo from a fileobj > /f\nCMD ["cat", "/f"]\n`)}.encode())
image, logs = client.images.build(fileobj=df, tag="py-fileobj")
emit('out', run("py-fileobj"))
`);
    expect(v.out).toEqual(bytes('from a fileobj\n'));
  });

  it('an unknown instruction raises APIError 400 before any step', async () => {
    const v = await python(`${PRELUDE}
import io
try:
    client.images.build(fileobj=io.BytesIO(b"FROM busybox\\nFOO bar\\n"))
except docker.errors.APIError as e:
    emit('status', e.status_code)
    emit('explanation', e.explanation)
`);
    expect(v).toEqual({ status: 400, explanation: 'dockerfile parse error line 2: unknown instruction: FOO' });
  });

  it('keeps RUN containers as rm says: docker-py sends rm=False unless told (as dockerd, they stay)', async () => {
    const left = (await ctx.daemon.request('GET', '/containers/json?all=1')).json as {
      Command: string;
      State: string;
    }[];
    expect(left.filter((c) => c.State !== 'exited')).toEqual([]);
    expect(left.every((c) => c.Command.startsWith('/bin/sh -c '))).toBe(true);
    // The multi-stage build had rm=True: none of its steps' containers stayed.
    expect(left.filter((c) => c.Command.includes('from the builder stage'))).toEqual([]);
    expect(left.map((c) => c.Command)).toContain("/bin/sh -c 'exit 3'");
    expect(left.map((c) => c.Command)).toContain("/bin/sh -c 'cat /a.txt > /ran.txt'");
  });
});
