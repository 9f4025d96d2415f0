// Log drivers through the API: json-file rotated by max-size and max-file
// (compressed or not) losing nothing, read across its files, followed across
// rotations, rotated on after a restart of berthd; local; none (no log to
// read, attach still works); LogConfig checked with dockerd's words.
import { existsSync, readdirSync, renameSync, statSync } from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { waitFor, type Daemon } from '../harness/daemon.js';
import { useEnv, type Env } from '../harness/env.js';
import { demux, demuxText } from '../harness/streams.js';

const ctx = useEnv();
let env: Env;
let d: Daemon;
beforeAll(() => {
  ({ env, daemon: d } = ctx);
});

/** Numbered lines until killed: line 0, line 1, … (shell builtins but sleep). */
const NUMBERED = ['sh', '-c', 'i=0; while true; do echo "line $i"; i=$((i+1)); sleep 0.01; done'];

async function create(cmd: string[], logConfig: Record<string, unknown>, extra: Record<string, unknown> = {}) {
  const r = await d.request('POST', '/containers/create', {
    body: { Image: env.busybox, Cmd: cmd, HostConfig: { LogConfig: logConfig }, ...extra },
  });
  expect(r.status, r.text).toBe(201);
  return r.json.Id as string;
}

async function start(id: string): Promise<void> {
  const s = await d.request('POST', `/containers/${id}/start`);
  expect(s.status, s.text).toBe(204);
}

async function kill(id: string): Promise<void> {
  expect((await d.request('POST', `/containers/${id}/kill`)).status).toBe(204);
}

const bundleOf = (id: string) => path.join(d.dataRoot, 'containers', id);
const logFiles = (id: string) =>
  readdirSync(bundleOf(id))
    .filter((n) => n.startsWith('ctr.log'))
    .sort();

/** The log's lines as `docker logs` gives them (stdout), with a query such as `&tail=5`. */
async function logLines(id: string, query = ''): Promise<string[]> {
  const r = await d.request('GET', `/containers/${id}/logs?stdout=1${query}`);
  expect(r.status, r.text).toBe(200);
  return demuxText(r.body).split('\n').filter(Boolean);
}

/** Asserts lines are "line a", "line a+1", … with no gap; returns a. */
function contiguous(lines: string[]): number {
  expect(lines.length).toBeGreaterThan(0);
  const first = Number(/^line (\d+)$/.exec(lines[0]!)?.[1]);
  const gaps = lines.filter((l, k) => l !== `line ${first + k}`);
  expect(gaps.slice(0, 3)).toEqual([]);
  return first;
}

/** A streamed response: resolves `headers` once they arrive (the request is being served), `body` at the end. */
function openStream(method: string, urlPath: string): { headers: Promise<number>; body: Promise<Buffer> } {
  let onHeaders!: (status: number) => void;
  const headers = new Promise<number>((r) => (onHeaders = r));
  const body = new Promise<Buffer>((resolve, reject) => {
    const req = http.request({ socketPath: d.socket, method, path: urlPath, agent: false }, (res) => {
      onHeaders(res.statusCode ?? 0);
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve(Buffer.concat(chunks)));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end();
  });
  return { headers, body };
}

/** Waits until the oldest lines have been rotated out: `docker logs` no longer starts at line 0. */
async function untilRotatedOut(id: string): Promise<void> {
  await waitFor(
    async () => /^line [1-9]/.test((await logLines(id, '&tail=all'))[0] ?? ''),
    'the oldest lines to be rotated out',
    60_000,
    200,
  );
}

describe('json-file with max-size and max-file', () => {
  it('keeps max-file files, the recent lines in order with no gap, and a follower sees every line', async () => {
    const id = await create(NUMBERED, { Type: 'json-file', Config: { 'max-size': '1k', 'max-file': '3' } });
    await start(id);
    const follow = openStream('GET', `/containers/${id}/logs?stdout=1&follow=1`);
    expect(await follow.headers).toBe(200);
    await untilRotatedOut(id);
    await kill(id);
    const followed = demuxText(await follow.body)
      .split('\n')
      .filter(Boolean);
    expect(contiguous(followed)).toBe(0);

    const kept = await logLines(id);
    expect(contiguous(kept)).toBeGreaterThan(0);
    expect(kept.at(-1)).toBe(followed.at(-1));
    const files = logFiles(id);
    expect(files.length).toBeLessThanOrEqual(3);
    expect(files).toContain('ctr.log.1');
    // A tail reaching into the rotated files, and since: from a given line's time on.
    expect(await logLines(id, `&tail=${kept.length - 1}`)).toEqual(kept.slice(1));
    const stamped = demuxText(
      (await d.request('GET', `/containers/${id}/logs?stdout=1&timestamps=1&tail=${kept.length}`)).body,
    )
      .split('\n')
      .filter(Boolean);
    expect(stamped.map((l) => l.slice(l.indexOf(' ') + 1))).toEqual(kept);
    // Lines are 10 ms apart, but a loaded machine can write two in one millisecond: since is
    // given to the millisecond, so it starts from a line whose millisecond is its own.
    let mid = Math.floor(stamped.length / 2);
    while (stamped[mid]!.slice(0, 23) === stamped[mid - 1]!.slice(0, 23)) mid++;
    const at = stamped[mid]!.slice(0, 23);
    const since = (Date.parse(`${at}Z`) / 1000).toFixed(3);
    expect(await logLines(id, `&since=${since}`)).toEqual(kept.slice(mid));

    // Removal takes every file with it.
    expect((await d.request('DELETE', `/containers/${id}`)).status).toBe(204);
    await waitFor(() => !existsSync(bundleOf(id)), 'the container directory to go');
  });

  it('with compress, keeps the rotated files gzipped and reads them', async () => {
    const id = await create(NUMBERED, {
      Type: 'json-file',
      Config: { 'max-size': '1k', 'max-file': '3', compress: 'true' },
    });
    await start(id);
    await untilRotatedOut(id);
    await kill(id);
    await waitFor(() => !logFiles(id).includes('ctr.log.1'), 'the last rotated file to be compressed');
    const files = logFiles(id);
    expect(files.length).toBeLessThanOrEqual(3);
    expect(files.filter((f) => f !== 'ctr.log').every((f) => f.endsWith('.gz'))).toBe(true);
    const kept = await logLines(id);
    contiguous(kept);
    expect(await logLines(id, `&tail=${kept.length - 1}`)).toEqual(kept.slice(1));
    const i = (await d.request('GET', `/containers/${id}/json`)).json;
    expect(i.HostConfig.LogConfig).toEqual({
      Type: 'json-file',
      Config: { 'max-size': '1k', 'max-file': '3', compress: 'true' },
    });
    expect(i.LogPath).toBe(path.join(bundleOf(id), `${id}-json.log`));
  });

  it('rotates on after berthd restarts, and finishes a rotation a crash cut short', async () => {
    const id = await create(NUMBERED, { Type: 'json-file', Config: { 'max-size': '1k', 'max-file': '3' } });
    await start(id);
    await waitFor(() => existsSync(path.join(bundleOf(id), 'ctr.log.1')), 'a first rotation');
    expect(await d.stop()).toBe(0);
    await d.restart();
    const ino = (f: string) => statSync(path.join(bundleOf(id), f), { throwIfNoEntry: false })?.ino;
    const before = ino('ctr.log.1');
    await waitFor(() => ino('ctr.log.1') !== before, 'a rotation by the restarted berthd', 60_000);

    // A crash right after renaming the live log, before conmon was asked to reopen:
    // conmon writes on into ctr.log.1, and the next berthd has it reopen.
    await d.kill();
    const dir = bundleOf(id);
    // Made by hand, unless the kill itself landed in a rotation after its renames; one
    // that landed between them (ctr.log.1 already shifted to .2) leaves the last one to do.
    if (existsSync(path.join(dir, 'ctr.log'))) {
      if (existsSync(path.join(dir, 'ctr.log.1'))) renameSync(path.join(dir, 'ctr.log.1'), path.join(dir, 'ctr.log.2'));
      renameSync(path.join(dir, 'ctr.log'), path.join(dir, 'ctr.log.1'));
    }
    await d.restart();
    await waitFor(() => existsSync(path.join(dir, 'ctr.log')), 'conmon to reopen the log');
    await untilRotatedOut(id);
    await kill(id);
    contiguous(await logLines(id));
    expect(logFiles(id).length).toBeLessThanOrEqual(3);
  });
});

describe('the local driver', () => {
  it('rotates and compresses by default, docker logs reads it, and inspect shows the LogConfig as given', async () => {
    const id = await create(NUMBERED, { Type: 'local', Config: { 'max-size': '1k' } });
    await start(id);
    await waitFor(() => logFiles(id).includes('ctr.log.2.gz'), 'two rotated files, compressed', 60_000);
    await kill(id);
    expect(logFiles(id).length).toBeLessThanOrEqual(5);
    expect(contiguous(await logLines(id))).toBe(0);
    const i = (await d.request('GET', `/containers/${id}/json`)).json;
    expect(i.HostConfig.LogConfig).toEqual({ Type: 'local', Config: { 'max-size': '1k' } });
    // dockerd shows no LogPath for local: its files are not an API.
    expect(i.LogPath).toBe('');
  });
});

describe('the none driver', () => {
  it('keeps no log: docker logs is refused as dockerd refuses it, attach still gets the output', async () => {
    const id = await create(['echo', 'to the attached only'], { Type: 'none', Config: {} }, { AttachStdout: true });
    const attached = openStream('POST', `/containers/${id}/attach?stream=1&stdout=1`);
    expect(await attached.headers).toBe(200);
    await start(id);
    expect(demux(await attached.body)).toEqual([[1, 'to the attached only\n']]);
    const logs = await d.request('GET', `/containers/${id}/logs?stdout=1`);
    expect([logs.status, logs.json]).toEqual([501, { message: 'configured logging driver does not support reading' }]);
    expect(logFiles(id)).toEqual([]);
    const i = (await d.request('GET', `/containers/${id}/json`)).json;
    expect([i.LogPath, i.HostConfig.LogConfig]).toEqual(['', { Type: 'none', Config: {} }]);
  });
});

describe('LogConfig checks', () => {
  const refused = async (Type: string, Config: Record<string, string>) => {
    const r = await d.request('POST', '/containers/create', {
      body: { Image: env.busybox, HostConfig: { LogConfig: { Type, Config } } },
    });
    expect(r.status, r.text).toBe(400);
    return r.json.message as string;
  };

  it("refuses with dockerd's words what dockerd refuses, and what berth does not apply", async () => {
    const json = (Config: Record<string, string>) => refused('json-file', Config);
    expect(await json({ colour: 'red' })).toBe("unknown log opt 'colour' for json-file log driver");
    expect(await json({ 'max-size': 'lots' })).toBe("invalid size: 'lots'");
    expect(await json({ 'max-size': '10q' })).toBe("invalid suffix: 'q'");
    expect(await json({ 'max-size': '0' })).toBe('max-size must be a positive number');
    expect(await json({ 'max-file': 'x' })).toBe('strconv.Atoi: parsing "x": invalid syntax');
    expect(await json({ 'max-file': '0' })).toBe('max-file cannot be less than 1');
    expect(await json({ compress: 'maybe' })).toBe('strconv.ParseBool: parsing "maybe": invalid syntax');
    expect(await json({ 'max-file': '3', compress: 'true' })).toBe(
      'compress cannot be true when max-file is less than 2 or max-size is not set',
    );
    expect(await json({ 'max-size': '1m', compress: 'true' })).toBe(
      'compress cannot be true when max-file is less than 2 or max-size is not set',
    );
    expect(await json({ mode: 'sometimes' })).toBe('logger: logging mode not supported: sometimes');
    expect(await json({ 'max-buffer-size': '4m' })).toBe(
      "logger: max-buffer-size option is only supported with 'mode=non-blocking'",
    );
    expect(await json({ tag: '{{.Name}}' })).toBe("log opt 'tag' is not supported by berth yet");
    const local = (Config: Record<string, string>) => refused('local', Config);
    expect(await local({ colour: 'red' })).toBe("unknown log opt 'colour' for log driver local");
    expect(await local({ 'max-size': 'lots' })).toBe("invalid value for max-size: lots: invalid size: 'lots'");
    expect(await local({ 'max-file': '1' })).toBe('compression cannot be enabled when max file count is 1');
    expect(await local({ 'max-file': '-1', compress: 'false' })).toBe('max-file must not be negative');
    expect(await refused('nope', {})).toBe("logger: no log driver named 'nope' is registered");
    expect(await refused('syslog', {})).toMatch(/^the syslog log driver is not supported by berth yet/);
  });

  it('takes max-file without max-size (one file, never rotated) and none with any option, as dockerd', async () => {
    for (const LogConfig of [
      { Type: 'json-file', Config: { 'max-file': '3' } },
      { Type: 'none', Config: { 'max-size': 'whatever' } },
      { Type: '', Config: { 'max-size': '1m', 'max-file': '1', mode: 'blocking' } },
    ]) {
      const r = await d.request('POST', '/containers/create', {
        body: { Image: env.busybox, HostConfig: { LogConfig } },
      });
      expect(r.status, r.text).toBe(201);
    }
  });
});
