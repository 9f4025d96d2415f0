// The Dockerfile 1.x syntax through BuildKit's API, as buildx v0.10.5 drives it
// (played by test/harness/buildkit-client.ts): `# syntax=docker/dockerfile:1`
// taken as berth's own syntax and said so in a vertex, another frontend image
// refused by name, here-documents named as BuildKit names them, a cache mount
// kept from build to build, and the automatic platform args.
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { type BuildOptions, buildxBuild, type SeenVertex } from '../harness/buildkit-client.js';
import { useEnv } from '../harness/env.js';
import { scratchDir } from '../harness/tmp.js';

const ctx = useEnv();

function contextDir(files: Record<string, string>): string {
  const dir = scratchDir('bk1-ctx-');
  for (const [name, text] of Object.entries(files)) {
    mkdirSync(path.dirname(path.join(dir, name)), { recursive: true });
    writeFileSync(path.join(dir, name), text);
  }
  return dir;
}

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
});
