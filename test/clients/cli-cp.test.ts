// The docker CLI's `cp` (files and directories both ways, -a, a stopped
// container, tars on stdin and stdout) and `system df` against a berthd.
import { spawn } from 'node:child_process';
import { chownSync, mkdirSync, mkdtempSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import * as tarStream from 'tar-stream';
import { beforeAll, describe, expect, it } from 'vitest';
import { type Cli, dockerCli } from '../harness/cli.js';
import { useEnv } from '../harness/env.js';
import { tarEntries, tarOf } from '../harness/tar.js';

const ctx = useEnv();
let docker: Cli;
let image: string;
let host: string;

beforeAll(() => {
  docker = dockerCli(ctx.daemon);
  image = ctx.env.busybox;
  host = mkdtempSync(path.join(os.tmpdir(), 'berth-cp-'));
});

const ok = (args: string[]) => docker.ok(args);

/** docker with bytes in and out (tars on stdin and stdout). */
function dockerRaw(args: string[], input?: Buffer): Promise<{ code: number; stdout: Buffer; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn('docker', args, {
      env: { ...process.env, DOCKER_HOST: ctx.daemon.host, DOCKER_CONFIG: docker.configDir },
    });
    const out: Buffer[] = [];
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => out.push(c));
    child.stderr.on('data', (c: Buffer) => {
      stderr += c;
    });
    child.on('error', reject);
    child.on('close', (code) => resolve({ code: code ?? 1, stdout: Buffer.concat(out), stderr }));
    child.stdin.end(input ?? Buffer.alloc(0));
  });
}

const sh = (ctr: string, script: string) => ok(['exec', ctr, 'sh', '-c', script]);
const runDetached = async (script = 'exec sleep 1000') => (await ok(['run', '-d', image, 'sh', '-c', script])).trim();

describe('docker cp', () => {
  it('copies a file and a directory both ways', async () => {
    const ctr = await runDetached();
    writeFileSync(path.join(host, 'one.txt'), 'one');
    await ok(['cp', path.join(host, 'one.txt'), `${ctr}:/tmp/`]);
    expect(await sh(ctr, 'cat /tmp/one.txt')).toBe('one');
    await ok(['cp', `${ctr}:/tmp/one.txt`, path.join(host, 'back.txt')]);
    expect(readFileSync(path.join(host, 'back.txt'), 'utf8')).toBe('one');

    const tree = path.join(host, 'tree');
    mkdirSync(path.join(tree, 'sub'), { recursive: true });
    writeFileSync(path.join(tree, 'a'), 'A');
    writeFileSync(path.join(tree, 'sub', 'b'), 'B');
    await ok(['cp', tree, `${ctr}:/copied`]);
    expect(await sh(ctr, 'cat /copied/a /copied/sub/b')).toBe('AB');
    await ok(['cp', `${ctr}:/copied`, path.join(host, 'out')]);
    expect(readFileSync(path.join(host, 'out', 'sub', 'b'), 'utf8')).toBe('B');
    // `dir/.`: the contents, into an existing directory.
    await sh(ctr, 'mkdir /merged && echo keep > /merged/old');
    await ok(['cp', `${tree}/.`, `${ctr}:/merged`]);
    expect(await sh(ctr, 'ls /merged | tr "\\n" " "')).toBe('a old sub ');

    const missing = await docker(['cp', `${ctr}:/nope`, host]);
    expect(missing.code).not.toBe(0);
    expect(missing.stderr).toContain('Could not find the file /nope in container');
  });

  it('-a keeps ownership into the container; out, the archive keeps it and the CLI gives the files to the caller', async () => {
    const ctr = await runDetached();
    const owned = path.join(host, 'owned');
    writeFileSync(owned, 'mine');
    chownSync(owned, 1234, 4321);
    await ok(['cp', '-a', owned, `${ctr}:/tmp/`]);
    expect(await sh(ctr, 'stat -c %u:%g /tmp/owned')).toBe('1234:4321\n');

    await sh(ctr, 'echo x > /tmp/theirs && chown 1000:1000 /tmp/theirs');
    const tar = await dockerRaw(['cp', '-a', `${ctr}:/tmp/theirs`, '-']);
    const extract = tarStream.extract();
    Readable.from([tar.stdout]).pipe(extract as unknown as NodeJS.WritableStream);
    for await (const e of extract) {
      expect([e.header.uid, e.header.gid]).toEqual([1000, 1000]);
      e.resume();
    }
    // The CLI extracts without chown (dockerd's CLI as well): the caller's files, -a or not.
    await ok(['cp', `${ctr}:/tmp/theirs`, path.join(host, 'mine')]);
    expect(statSync(path.join(host, 'mine')).uid).toBe(process.getuid!());
  });

  it('copies out of and into a stopped container', async () => {
    const ctr = (await ok(['create', image, 'sh', '-c', 'cat /in/f'])).trim();
    await ok(['start', '-a', ctr]).catch(() => undefined); // fails: /in/f is not there yet
    writeFileSync(path.join(host, 'f'), 'stopped-in');
    await sh(await runDetached(), 'true'); // another container running meanwhile changes nothing
    await ok(['cp', path.join(host, 'f'), `${ctr}:/f`]);
    await ok(['cp', `${ctr}:/f`, path.join(host, 'f-out')]);
    expect(readFileSync(path.join(host, 'f-out'), 'utf8')).toBe('stopped-in');
    await ok(['cp', `${ctr}:/etc/passwd`, path.join(host, 'passwd')]);
    expect(readFileSync(path.join(host, 'passwd'), 'utf8')).toContain('root:');
  });

  it('reads a tar from stdin and writes one to stdout', async () => {
    const ctr = await runDetached();
    const tar = await tarOf([
      { name: 'from-stdin', type: 'directory', mode: 0o755 },
      { name: 'from-stdin/f', body: 'piped', mode: 0o644 },
    ]);
    const put = await dockerRaw(['cp', '-', `${ctr}:/tmp`], tar);
    expect(put.code, put.stderr).toBe(0);
    expect(await sh(ctr, 'cat /tmp/from-stdin/f')).toBe('piped');
    const out = await dockerRaw(['cp', `${ctr}:/tmp/from-stdin`, '-']);
    expect(out.code, out.stderr).toBe(0);
    expect((await tarEntries(out.stdout)).map(([name, body]) => [name, body])).toEqual([
      ['from-stdin/', ''],
      ['from-stdin/f', 'piped'],
    ]);
  });
});

describe('docker system df', () => {
  it('sums images, containers, volumes and build cache, and -v lists them', async () => {
    const ctr = await runDetached('head -c 100000 /dev/zero > /written; exec sleep 1000');
    await sh(ctr, 'while [ ! -s /written ]; do sleep 0.1; done');
    const summary = await ok(['system', 'df', '--format', '{{.Type}}\t{{.TotalCount}}\t{{.Active}}']);
    const rows = Object.fromEntries(
      summary
        .trim()
        .split('\n')
        .map((l) => [l.split('\t')[0], l.split('\t').slice(1)]),
    );
    expect(rows.Images?.[0]).toBe('1');
    expect(Number(rows.Containers?.[0])).toBeGreaterThanOrEqual(1);
    expect(rows['Local Volumes']).toEqual(['0', '0']);
    expect(rows['Build Cache']).toEqual(['0', '0']);
    const verbose = await ok(['system', 'df', '-v']);
    expect(verbose).toContain('Images space usage:');
    expect(verbose).toContain(image.split(':')[0]);
    expect(verbose).toContain(ctr.slice(0, 12));
    expect(verbose).toMatch(/Local Volumes space usage:/);
  });
});

describe('docker cp and volumes', () => {
  // After `system df` above, which counts no volume yet.
  it('copies into a named volume through a running and a stopped container, seen by another one', async () => {
    await ok(['volume', 'create', 'cp-shared']);
    const live = (await ok(['run', '-d', '-v', 'cp-shared:/data', image, 'sleep', '1000'])).trim();
    const stopped = (await ok(['create', '-v', 'cp-shared:/store', image, 'true'])).trim();
    writeFileSync(path.join(host, 'via-running'), 'R');
    writeFileSync(path.join(host, 'via-stopped'), 'S');
    await ok(['cp', path.join(host, 'via-running'), `${live}:/data/`]);
    await ok(['cp', path.join(host, 'via-stopped'), `${stopped}:/store/`]);
    // Both landed in the volume, not in either container's own filesystem under the mount.
    const seen = await ok([
      'run',
      '--rm',
      '-v',
      'cp-shared:/v',
      image,
      'sh',
      '-c',
      'cat /v/via-running /v/via-stopped',
    ]);
    expect(seen).toBe('RS');
    expect(await sh(live, 'cat /data/via-stopped')).toBe('S');
    await ok(['cp', `${stopped}:/store/via-running`, path.join(host, 'vol-out')]);
    expect(readFileSync(path.join(host, 'vol-out'), 'utf8')).toBe('R');
    // A directory too, into the stopped container's mount point itself.
    const tree = path.join(host, 'vol-tree');
    mkdirSync(path.join(tree, 'deep'), { recursive: true });
    writeFileSync(path.join(tree, 'deep', 'x'), 'X');
    await ok(['cp', tree, `${stopped}:/store`]);
    expect(await sh(live, 'cat /data/vol-tree/deep/x')).toBe('X');
    await ok(['rm', '-f', live, stopped]);
    await ok(['volume', 'rm', 'cp-shared']);
  });
});
