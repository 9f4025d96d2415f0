// The Dockerfile 1.x syntax through BuildKit's API, as buildx v0.10.5 drives it
// (played by test/harness/buildkit-client.ts): `# syntax=docker/dockerfile:1`
// taken as berth's own syntax and said so in a vertex, another frontend image
// refused by name, here-documents named as BuildKit names them, a cache mount
// kept from build to build, the automatic platform args, and a RUN's secret and
// ssh agent asked of the client's session (and never in the image).
import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { type BuildOptions, buildxBuild, contextDir, fileOf, type SeenVertex } from '../harness/buildkit-client.js';
import { useEnv } from '../harness/env.js';

const ctx = useEnv();

const build = (o: BuildOptions) =>
  buildxBuild(ctx.daemon.socket, { ...o, frontendAttrs: { 'force-network-mode': 'none', ...o.frontendAttrs } });
const named = (vs: SeenVertex[], prefix: string) => vs.filter((v) => v.name.startsWith(prefix));

describe('Dockerfile 1.x through BuildKit', () => {
  it('# syntax=docker/dockerfile:1 is the built-in syntax (a vertex says so); heredocs, a cache mount and platform args', async () => {
    const dockerfile = (n: number) =>
      [
        '# syntax=docker/dockerfile:1.4',
        `FROM ${ctx.env.busybox}`,
        'ARG TARGETPLATFORM TARGETOS TARGETARCH BUILDPLATFORM',
        'RUN <<EOF',
        'echo "$TARGETPLATFORM $TARGETOS $TARGETARCH $BUILDPLATFORM"',
        'echo more',
        'EOF',
        `RUN --mount=type=cache,target=/var/cache/bk1 echo build${n} >> /var/cache/bk1/log && cat /var/cache/bk1/log`,
        '',
      ].join('\n');
    const first = await build({ context: contextDir({ Dockerfile: dockerfile(1) }), tags: 'bk1-syntax' });
    expect(first.solve.message).toBe('');
    expect(named(first.vertices, '[internal] docker/dockerfile').map((v) => v.name)).toEqual([
      "[internal] docker/dockerfile:1.4: berth's built-in Dockerfile 1.x syntax, no image pulled",
    ]);
    const here = first.vertices.find((v) => v.name.startsWith('[3/4] RUN <<EOF'));
    expect(here?.name).toBe('[3/4] RUN <<EOF (echo "$TARGETPLATFORM $TARGETOS $TARGETARCH $BUILDPLATFORM"...)');
    const arch = process.arch === 'x64' ? 'amd64' : process.arch;
    expect(here?.logs).toBe(`linux/${arch} linux ${arch} linux/${arch}\nmore\n`);
    // Another build: the cache mount has what the first left.
    const second = await build({ context: contextDir({ Dockerfile: dockerfile(2) }), tags: 'bk1-syntax' });
    expect(second.solve.message).toBe('');
    expect(second.vertices.find((v) => v.name.startsWith('[4/4] RUN --mount'))?.logs).toMatch(/build1\nbuild2\n$/);
  });

  it('a syntax directive naming another frontend image is refused by name, before the context is sent', async () => {
    const dir = contextDir({ Dockerfile: `# syntax=example.com/my/frontend:2\nFROM ${ctx.env.busybox}\n` });
    const r = await build({ context: dir });
    expect(r.bridge?.code).toBe(2);
    expect(r.bridge?.message).toContain(
      'the syntax directive names the frontend image example.com/my/frontend:2: berthd runs no frontend image',
    );
    expect(r.session.syncs.map((s) => s.followPaths)).toEqual([
      ['Dockerfile', 'Dockerfile.dockerignore'],
      ['.dockerignore'],
    ]);
  });

  it("a RUN's secret and ssh agent come from the client's session, for that step alone, and stay out of the image", async () => {
    const dockerfile = [
      `FROM ${ctx.env.busybox}`,
      // The value never in the Dockerfile either: the step prints its digest.
      'RUN --mount=type=secret,id=tok echo "secret $(md5sum < /run/secrets/tok)"',
      'RUN --mount=type=ssh test -S "$SSH_AUTH_SOCK" && echo "agent at $SSH_AUTH_SOCK"',
      'RUN ls -A /run > /run-listing; test ! -e /run/secrets/tok && echo gone-after',
      '',
    ].join('\n');
    const r = await build({
      context: contextDir({ Dockerfile: dockerfile }),
      tags: 'bk1-secret',
      serve: { secrets: { tok: 's3cret' }, sshAgents: ['default'] },
    });
    expect(r.solve.message).toBe('');
    const logs = r.vertices.map((v) => v.logs).join('');
    expect(logs).toContain(`secret ${createHash('md5').update('s3cret').digest('hex')}  -\n`);
    expect(logs).toMatch(/agent at \/run\/buildkit\/ssh_agent\.0\n/);
    expect(logs).toContain('gone-after\n');
    const asked = r.session.calls.map((c) => c.path);
    expect(asked).toContain('/moby.buildkit.secrets.v1.Secrets/GetSecret');
    expect(asked).toContain('/moby.sshforward.v1.SSH/CheckAgent');
    // Neither the secret's file nor its value is in the image: not in its tree, not in its history.
    expect(await fileOf(ctx.daemon, 'bk1-secret', '/run-listing')).not.toMatch(/secrets|buildkit/);
    const history = await ctx.daemon.request('GET', '/images/bk1-secret/history');
    expect(history.text).not.toContain('s3cret');
  });

  it('a secret the client does not have fails the step when required, and is left out when not', async () => {
    const dockerfile = (required: boolean) =>
      [
        `FROM ${ctx.env.busybox}`,
        `RUN --mount=type=secret,id=absent${required ? ',required' : ''} test ! -e /run/secrets/absent && echo without`,
        '',
      ].join('\n');
    const optional = await build({ context: contextDir({ Dockerfile: dockerfile(false) }), serve: { secrets: {} } });
    expect(optional.solve.message).toBe('');
    expect(optional.vertices.map((v) => v.logs).join('')).toContain('without\n');
    const required = await build({ context: contextDir({ Dockerfile: dockerfile(true) }), serve: { secrets: {} } });
    expect(`${required.bridge?.message ?? ''} ${required.solve.message}`).toMatch(/secret absent/);
  });
});
