// `docker push` (the real CLI, v28) through berthd: to a plain registry, and
// to htpasswd and token-auth registries with the credentials `docker login`
// stored; what the user reads is dockerd's. skopeo then reads what was pushed.
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { dockerCli, type Cli } from '../harness/cli.js';
import { useEnv } from '../harness/env.js';
import { startRegistry, type Registry, type RegistryAuth } from '../harness/registry.js';

const run = promisify(execFile);
const ctx = useEnv();
let docker: Cli;
const registries: Registry[] = [];

beforeAll(() => {
  docker = dockerCli(ctx.daemon);
});
afterAll(async () => {
  for (const r of registries) await r.stop();
});

async function skopeoDigest(ref: string, creds?: string): Promise<string> {
  const args = ['inspect', '--tls-verify=false', ...(creds ? ['--creds', creds] : []), `docker://${ref}`];
  return JSON.parse((await run('skopeo', args)).stdout).Digest;
}

it('docker push prints the repository, each layer and the digest', async () => {
  const target = `${ctx.env.registry.host}/cli-pushed:v1`;
  await docker.ok(['tag', ctx.env.busybox, target]);
  const out = await docker.ok(['push', target]);
  expect(out).toContain(`The push refers to repository [${ctx.env.registry.host}/cli-pushed]`);
  expect(out).toMatch(/^[0-9a-f]{12}: (Mounted from busybox|Layer already exists|Pushed)$/m);
  const digest = /^v1: digest: (sha256:[0-9a-f]{64}) size: \d+$/m.exec(out)?.[1];
  expect(digest, out).toBeDefined();
  expect(await skopeoDigest(target)).toBe(digest);
  const repoDigests = await docker.ok(['image', 'inspect', '--format', '{{json .RepoDigests}}', target]);
  expect(JSON.parse(repoDigests)).toContain(`${ctx.env.registry.host}/cli-pushed@${digest}`);
});

it('docker push of an image it does not have fails with dockerd words', async () => {
  const r = await docker(['push', `${ctx.env.registry.host}/never-made:v1`]);
  expect(r.code).not.toBe(0);
  expect(r.stderr).toMatch(/An image does not exist locally with the tag: .*never-made/);
});

it.each(['htpasswd', 'token'] as RegistryAuth[])('docker login then docker push to a %s registry', async (auth) => {
  const reg = await startRegistry({ auth });
  registries.push(reg);
  const login = await docker(['login', reg.host, '-u', 'berth', '--password-stdin'], { input: 's3cret\n' });
  expect(login.code, login.stderr).toBe(0);
  const target = `${reg.host}/private:v1`;
  await docker.ok(['tag', ctx.env.busybox, target]);
  const out = await docker.ok(['push', target]);
  expect(out).toMatch(/: Pushed$/m);
  const digest = /^v1: digest: (sha256:[0-9a-f]{64})/m.exec(out)?.[1];
  expect(await skopeoDigest(target, 'berth:s3cret')).toBe(digest);
});
