// The session's services besides FileSync, as a BuildKit build through buildx uses them
// (docs/buildkit/protocol.md §3.2), played by the project's buildx stand-in: the context
// uploaded from stdin (Upload/Pull), a context URL, registry credentials for a base image's
// pull (Auth/Credentials), and the BuildSession a RUN step asks secrets and ssh agents of.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, describe, expect, it } from 'vitest';
import type { Msg } from '../../src/api/buildkit/proto/wire.js';
import {
  type BuildOptions,
  buildxBuild,
  contextDir,
  fileOf as readFile,
  type SeenVertex,
} from '../harness/buildkit-client.js';
import { useEnv } from '../harness/env.js';
import { busyboxImage, pushImage } from '../harness/images.js';
import { type Registry, startRegistry } from '../harness/registry.js';
import { tarOf } from '../harness/tar.js';
import { scratchDir } from '../harness/tmp.js';

const ctx = useEnv();
const build = (o: BuildOptions) => buildxBuild(ctx.daemon.socket, o);
const names = (vs: SeenVertex[]) => vs.map((v) => v.name);

const fileOf = (image: string, file: string) => readFile(ctx.daemon, image, file);

describe('the context from elsewhere than a local dir', () => {
  it('docker build - < ctx.tar: the tar through Upload/Pull, the Dockerfile from it, no FileSync', async () => {
    const tar = await tarOf([
      { name: 'Dockerfile', body: 'FROM scratch\nCOPY a /a\n' },
      { name: 'a', body: 'uploaded\n' },
    ]);
    const upload = 'znx07q6hau93gkxjxd2xu3ovm';
    const r = await build({
      context: scratchDir('bk-empty-'),
      tags: 'bk-upload',
      frontendAttrs: { context: `http://buildkit-session/${upload}` },
      serve: { upload: tar },
    });
    expect(r.solve.message).toBe('');
    expect(r.solve.code).toBe(0);
    expect(await fileOf('bk-upload', '/a')).toBe('uploaded\n');
    expect(r.session.syncs).toEqual([]);
    const pull = r.session.calls.find((c) => c.path === '/moby.upload.v1.Upload/Pull');
    expect(pull?.headers).toMatchObject({ urlhost: 'buildkit-session', urlpath: `/${upload}` });
    expect(names(r.vertices)).toEqual([
      '[internal] load remote build context',
      '[1/1] COPY a /a',
      'exporting to image',
    ]);
  });

  it('an upload the client does not serve fails the build with its words', async () => {
    const r = await build({
      context: scratchDir('bk-empty-'),
      frontendAttrs: { context: 'http://buildkit-session/nothere' },
    });
    expect(r.solve.code).toBe(2);
    expect(r.bridge?.message).toMatch(/method \/moby.upload.v1.Upload\/Pull not supported by the client/);
  });

  describe('a URL', () => {
    let server: http.Server;
    let base = '';
    afterAll(() => server?.close());

    it('an http(s) tarball is fetched as the classic builder fetches it; a git URL refused by name', async () => {
      const tar = await tarOf([
        { name: 'Dockerfile', body: 'FROM scratch\nCOPY a /a\n' },
        { name: 'a', body: 'from-url\n' },
      ]);
      server = http.createServer((_req, res) => {
        res.writeHead(200, { 'Content-Type': 'application/x-tar', 'Content-Length': tar.length });
        res.end(tar);
      });
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
      const r = await build({
        context: scratchDir('bk-empty-'),
        tags: 'bk-url',
        frontendAttrs: { context: `${base}/ctx.tar` },
      });
      expect(r.solve.message).toBe('');
      expect(await fileOf('bk-url', '/a')).toBe('from-url\n');
      expect(r.session.syncs).toEqual([]);
      const v = r.vertices.find((x) => x.name === '[internal] load remote build context');
      expect(v?.completed).toBe(true);

      const git = await build({
        context: scratchDir('bk-empty-'),
        frontendAttrs: { context: 'https://github.com/moby/moby.git#master' },
      });
      expect(git.solve.code).toBe(2);
      expect(git.bridge?.message).toMatch(/git build contexts are not supported by berth/);
      const failed = git.vertices.find((x) => x.name === '[internal] load remote build context');
      expect(failed?.error).toMatch(/git build contexts/);
    });
  });
});

describe('Auth: a base image from a registry that wants credentials', () => {
  let reg: Registry;
  afterAll(async () => {
    await reg?.stop();
  });

  it('pulls with what the session answers to Credentials{Host}, and fails without', async () => {
    reg = await startRegistry({ auth: 'htpasswd' });
    await pushImage(reg, 'private', 'latest', await busyboxImage({ config: { Labels: { private: 'yes' } } }));
    const dir = contextDir({ Dockerfile: `FROM ${reg.host}/private:latest\nLABEL built=1\n` });
    const none = await build({ context: dir, tags: 'bk-auth-none' });
    expect(none.solve.code).toBe(2);
    expect(none.bridge?.message).toMatch(/no basic auth credentials|unauthorized|authentication required/);
    const asked: Msg[] = [];
    const r = await build({
      context: dir,
      tags: 'bk-auth',
      serve: { credentials: { [reg.host]: { username: 'berth', secret: 's3cret' } } },
    });
    expect(r.solve.message).toBe('');
    expect(r.solve.code).toBe(0);
    for (const c of r.session.calls) if (c.path === '/moby.filesync.v1.Auth/Credentials') asked.push(c.request ?? {});
    expect(asked).toEqual([{ Host: reg.host }]);
    const image = (await ctx.daemon.request('GET', '/images/bk-auth/json')).json;
    expect(image.Config.Labels).toEqual({ private: 'yes', built: '1' });
    // The secret never reaches berthd's log.
    expect(ctx.daemon.stderr()).not.toContain('s3cret');
  });
});
