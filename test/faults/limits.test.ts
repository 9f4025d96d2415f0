// What one request can make berthd hold is bounded: the size and depth of a
// JSON body, the size of the headers, and the memory behind a client that
// stops reading a stream (logs, attach, events) or keeps sending input no
// process takes yet. Hostile input of every kind gets a 4xx with a message and
// creates nothing.
import http from 'node:http';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { waitFor, type Daemon } from '../harness/daemon.js';
import { useEnv, type Env } from '../harness/env.js';
import { expectNoLeaks, holdings } from '../harness/leaks.js';
import { demuxText } from '../harness/streams.js';
import { dropIdleConnections, openStream, rssBytes, settledActivity, type RawStream } from './probes.js';

const MiB = 1024 * 1024;
/** What a stalled client may add to berthd's resident memory: far below what it was sent or missed. */
const STALL_BOUND = 96 * MiB;

const ctx = useEnv();
let env: Env;
let d: Daemon;
beforeAll(() => {
  ({ env, daemon: d } = ctx);
});
afterEach(() => dropIdleConnections());

const containerCount = async () => (await d.request('GET', '/containers/json?all=1')).json.length as number;
const imageCount = async () => (await d.request('GET', '/images/json')).json.length as number;
const json = { 'Content-Type': 'application/json' };

/** A JSON value nested `depth` levels deep. */
const nested = (depth: number) => '['.repeat(depth) + ']'.repeat(depth);

/** Sends a body in chunks with no Content-Length (chunked), as a streaming client would. */
function chunkedPost(urlPath: string, total: number, chunk = 256 * 1024): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      { socketPath: d.socket, method: 'POST', path: urlPath, headers: { ...json, 'Transfer-Encoding': 'chunked' } },
      (res) => {
        let body = '';
        res.on('data', (c: Buffer) => (body += c.toString()));
        res.on('end', () => resolve({ status: res.statusCode!, body }));
      },
    );
    req.on('error', reject);
    const piece = Buffer.alloc(chunk, 0x20);
    let sent = 0;
    const pump = () => {
      while (sent < total) {
        sent += chunk;
        if (!req.write(piece)) return void req.once('drain', pump);
      }
      req.end();
    };
    pump();
  });
}

describe('request bodies', () => {
  it('refuses a JSON body over 4 MiB with 413, declared or streamed, and takes one just under', async () => {
    const before = await containerCount();
    const declared = await d.request('POST', '/containers/create', { raw: Buffer.alloc(5 * MiB, 0x20), headers: json });
    expect(declared.status).toBe(413);
    expect(declared.json).toEqual({ message: 'request body is larger than the 4 MiB allowed for JSON' });
    const streamed = await chunkedPost('/containers/create', 6 * MiB);
    expect(streamed.status).toBe(413);
    expect(JSON.parse(streamed.body).message).toMatch(/larger than the 4 MiB/);
    // Just under the bound: a create with 3 MiB of labels is a create.
    const big = await d.request('POST', '/containers/create', {
      body: { Image: env.busybox, Cmd: ['true'], Labels: { big: 'x'.repeat(3 * MiB) } },
    });
    expect(big.status, big.text.slice(0, 200)).toBe(201);
    expect((await d.request('DELETE', `/containers/${big.json.Id}`)).status).toBe(204);
    expect(await containerCount()).toBe(before);
  });

  it('reads and drops what follows the bound instead of holding it: eight 64 MiB bodies at once', async () => {
    const base = rssBytes(d);
    let peak = base;
    const sampler = setInterval(() => (peak = Math.max(peak, rssBytes(d))), 20);
    try {
      const rs = await Promise.all(Array.from({ length: 8 }, () => chunkedPost('/containers/create', 64 * MiB)));
      for (const r of rs) expect(r.status).toBe(413);
    } finally {
      clearInterval(sampler);
    }
    expect(peak - base).toBeLessThan(STALL_BOUND);
    expect((await d.request('GET', '/_ping')).status).toBe(200);
  });

  it('refuses nesting past 100 levels with 400, where it was a stack overflow (500)', async () => {
    const before = await containerCount();
    for (const depth of [101, 100_000]) {
      const r = await d.request('POST', '/containers/create', {
        raw: `{"Image":"${env.busybox}","Unknown":${nested(depth)}}`,
        headers: json,
      });
      expect(r.status, `${depth}: ${r.text}`).toBe(400);
      expect(r.json.message).toBe('invalid JSON: nested deeper than 100 levels');
    }
    expect(await containerCount()).toBe(before);
    const fine = await d.request('POST', '/containers/create', {
      raw: `{"Image":"${env.busybox}","Cmd":["true"],"Unknown":${nested(50)}}`,
      headers: json,
    });
    expect(fine.status, fine.text).toBe(201);
    expect((await d.request('DELETE', `/containers/${fine.json.Id}`)).status).toBe(204);
  });
});

describe('request headers', () => {
  it("answers headers over 64 KiB with 431 in Docker's shape, closing the connection; 40 KiB are fine", async () => {
    const s = await openStream(d, 'GET', '/_ping', { headers: { 'X-Registry-Auth': 'a'.repeat(100 * 1024) } });
    expect(s.status).toBe(431);
    expect(s.head).toMatch(/^Connection: close$/im);
    await waitFor(() => s.complete(), 'the connection to close');
    expect(JSON.parse(s.received().toString())).toEqual({
      message: 'request headers are larger than the 64 KiB allowed',
    });
    const ok = await d.request('GET', '/_ping', { headers: { 'X-Registry-Auth': 'a'.repeat(40 * 1024) } });
    expect(ok.status).toBe(200);
  });

  it('answers a malformed request with 400 and keeps serving', async () => {
    const s = await openStream(d, 'GET', '/_ping', { headers: { 'Bad Header': 'x' } });
    expect(s.status).toBe(400);
    await waitFor(() => s.complete(), 'the connection to close');
    expect(JSON.parse(s.received().toString()).message).toMatch(/^malformed HTTP request/);
    expect((await d.request('GET', '/_ping')).status).toBe(200);
  });
});

describe('a client that stops reading', () => {
  /** berthd's peak memory above `base` while fn runs. */
  async function peakDuring(fn: () => Promise<void>): Promise<{ base: number; peak: number }> {
    const base = rssBytes(d);
    let peak = base;
    const sampler = setInterval(() => (peak = Math.max(peak, rssBytes(d))), 20);
    try {
      await fn();
    } finally {
      clearInterval(sampler);
    }
    peak = Math.max(peak, rssBytes(d));
    return { base, peak };
  }

  it('of `logs -f` holds berthd to a bounded memory while the container writes 200 MiB', async () => {
    const c = await d.request('POST', '/containers/create', {
      // Long lines: conmon's work is per line, and this is about berthd, not conmon.
      body: {
        Image: env.busybox,
        Cmd: ['sh', '-c', `yes ${'y'.repeat(4000)} | head -c ${200 * MiB}; echo; echo done`],
      },
    });
    const id = c.json.Id as string;
    let follower: RawStream | undefined;
    const { base, peak } = await peakDuring(async () => {
      expect((await d.request('POST', `/containers/${id}/start`)).status).toBe(204);
      follower = await openStream(d, 'GET', `/containers/${id}/logs?follow=1&stdout=1&stderr=1`);
      follower.sock.pause();
      expect((await d.request('POST', `/containers/${id}/wait`)).json.StatusCode).toBe(0);
    });
    console.log(
      `logs -f, stalled reader: berthd RSS ${(base / MiB).toFixed(0)} MiB before, peak ${(peak / MiB).toFixed(0)} MiB while 200 MiB were written`,
    );
    expect(peak - base).toBeLessThan(STALL_BOUND);
    // The reader was only slow: reading again, it gets its stream.
    follower!.sock.resume();
    await follower!.waitBytes(MiB);
    follower!.sock.destroy();
    expect((await d.request('DELETE', `/containers/${id}`)).status).toBe(204);
  }, 180_000);

  it('of an attach holds the container back, not berthd: bounded memory, the output flows again, and a stop still stops', async () => {
    const c = await d.request('POST', '/containers/create', {
      body: { Image: env.busybox, Cmd: ['sh', '-c', `yes ${'a'.repeat(200)}`] },
    });
    const id = c.json.Id as string;
    expect((await d.request('POST', `/containers/${id}/start`)).status).toBe(204);
    const a = await openStream(d, 'POST', `/containers/${id}/attach?stream=1&stdout=1`, {
      headers: { Connection: 'Upgrade', Upgrade: 'tcp' },
    });
    await a.waitBytes(1);
    a.sock.pause();
    const { base, peak } = await peakDuring(() => new Promise((r) => setTimeout(r, 3000)));
    console.log(
      `attach, stalled reader: berthd RSS ${(base / MiB).toFixed(0)} MiB before, peak ${(peak / MiB).toFixed(0)} MiB`,
    );
    expect(peak - base).toBeLessThan(STALL_BOUND);
    const had = a.received().length;
    a.sock.resume();
    await a.waitBytes(had + 10 * MiB);
    expect(demuxText(a.received().subarray(0, 4096))).toMatch(/^a+\n/);
    expect((await d.request('GET', `/containers/${id}/json`)).json.State.Running).toBe(true);
    // Stalled again (a CLI suspended with ctrl-z), the container can still be
    // stopped: conmon, held back, could not report the exit, and stop and
    // rm -f waited for as long as the client did.
    a.sock.pause();
    const t = Date.now();
    expect((await d.request('POST', `/containers/${id}/stop?t=1`)).status).toBe(204);
    console.log(`stop with a stalled attached client: ${Date.now() - t} ms`);
    expect((await d.request('POST', `/containers/${id}/wait`)).json.StatusCode).toBe(137);
    a.sock.resume();
    await waitFor(() => a.complete(), "the stalled client's stream to end");
    expect((await d.request('DELETE', `/containers/${id}`)).status).toBe(204);
  }, 120_000);

  it('of events is cut off once too far behind, instead of berthd keeping every event for it', async () => {
    const labels: Record<string, string> = {};
    for (let i = 0; i < 16; i++) labels[`l${i}`] = String(i).repeat(64 * 1024);
    const c = await d.request('POST', '/containers/create', {
      body: { Image: env.busybox, Cmd: ['true'], Labels: labels },
    });
    const id = c.json.Id as string;
    const base0 = await settledActivity(d);
    const renames = encodeURIComponent(JSON.stringify({ event: ['rename'] }));
    const stalled = await openStream(d, 'GET', `/events?filters=${renames}`);
    stalled.sock.pause();
    // Every rename is an event carrying the 1 MiB of labels: 400 MiB for a reader
    // that takes none, which berthd would hold for it were the subscriber not cut.
    // Each rename also leaves a few MiB of garbage (the row parsed, the line
    // written) that the collector takes back only now and then, so the bound is
    // what berthd may reach meanwhile: under the weight of the events themselves.
    const { base, peak } = await peakDuring(async () => {
      for (let i = 0; i < 400; i++)
        expect((await d.request('POST', `/containers/${id}/rename?name=big-${i}`)).status).toBe(204);
    });
    console.log(
      `events, stalled reader: berthd RSS ${(base / MiB).toFixed(0)} MiB before, peak ${(peak / MiB).toFixed(0)} MiB over 400 MiB of events`,
    );
    expect(peak - base).toBeLessThan(3 * STALL_BOUND);
    // berthd closed the stream; the client reads what was sent, then the end.
    expect((await d.request('GET', '/info')).json.NEventsListener).toBe(base0.listeners);
    stalled.sock.resume();
    await waitFor(() => stalled.sock.readableEnded || stalled.sock.destroyed, 'the stalled events stream to be closed');
    expect((await d.request('DELETE', `/containers/${id}`)).status).toBe(204);
    // A reader that keeps up gets every event, more than a stalled one may fall behind by.
    const small = await Promise.all(
      Array.from({ length: 5 }, () =>
        d.request('POST', '/containers/create', { body: { Image: env.busybox, Cmd: ['true'] } }),
      ),
    );
    const live = await openStream(d, 'GET', `/events?filters=${renames}`);
    await Promise.all(
      small.map(async (c, k) => {
        for (let i = 0; i < 220; i++)
          expect((await d.request('POST', `/containers/${c.json.Id}/rename?name=live-${k}-${i}`)).status).toBe(204);
      }),
    );
    await waitFor(
      () => live.received().toString().split('\n').filter(Boolean).length === 1100,
      'the live reader to get all 1100 events',
    );
    live.sock.destroy();
    for (const c of small) expect((await d.request('DELETE', `/containers/${c.json.Id}`)).status).toBe(204);
  }, 180_000);

  it('of its own input before the start: berthd holds 1 MiB of it, the process gets it all', async () => {
    const c = await d.request('POST', '/containers/create', {
      body: { Image: env.busybox, Cmd: ['wc', '-c'], OpenStdin: true, StdinOnce: true, AttachStdin: true },
    });
    const id = c.json.Id as string;
    const a = await openStream(d, 'POST', `/containers/${id}/attach?stream=1&stdin=1&stdout=1&stderr=1`, {
      headers: { Connection: 'Upgrade', Upgrade: 'tcp' },
    });
    const total = 128 * MiB;
    const piece = Buffer.alloc(MiB, 0x61);
    let sent = 0;
    const pump = () => {
      while (sent < total) {
        sent += piece.length;
        if (!a.sock.write(piece)) return void a.sock.once('drain', pump);
      }
      a.sock.end();
    };
    const { base, peak } = await peakDuring(async () => {
      pump();
      // No process takes it yet: the client's writes back up.
      await new Promise((r) => setTimeout(r, 2000));
    });
    console.log(
      `attach stdin before start: berthd RSS ${(base / MiB).toFixed(0)} MiB before, peak ${(peak / MiB).toFixed(0)} MiB with ${(sent / MiB).toFixed(0)} MiB offered`,
    );
    expect(sent).toBeLessThan(total);
    expect(peak - base).toBeLessThan(STALL_BOUND);
    expect((await d.request('POST', `/containers/${id}/start`)).status).toBe(204);
    await waitFor(() => a.complete(), 'the attach to end with the process', 60_000);
    expect(demuxText(a.received()).trim()).toBe(String(total));
    expect((await d.request('POST', `/containers/${id}/wait`)).json.StatusCode).toBe(0);
    expect((await d.request('DELETE', `/containers/${id}`)).status).toBe(204);
  }, 120_000);
});

describe('hostile input', () => {
  it('is answered 4xx with a message, and creates nothing', async () => {
    const running = await d.request('POST', '/containers/create', {
      body: { Image: env.busybox, Cmd: ['sleep', '1000'] },
    });
    const rid = running.json.Id as string;
    await d.request('POST', `/containers/${rid}/start`);
    const bb = env.busybox;
    const create = (body: string, q = '') => ['POST', `/containers/create${q}`, body] as const;
    const cases: [method: string, path: string, body: string | undefined, status: number, message: RegExp][] = [
      [...create('{"Image": '), 400, /^invalid JSON: unexpected EOF$/],
      [
        ...create('[]'),
        400,
        /^invalid JSON: json: cannot unmarshal array into Go value of type container.CreateRequest$/,
      ],
      [...create('"Image"'), 400, /cannot unmarshal string into Go value/],
      [...create(`{"Image":"${bb}","Tty":"yes"}`), 400, /Tty/],
      [...create(`{"Image":"${bb}","Cmd":[1,2]}`), 400, /Cmd/],
      [...create(`{"Image":["${bb}"]}`), 400, /Image/],
      [...create(`{"Image":"${bb}","HostConfig":{"Memory":1e400}}`), 400, /Memory/],
      [...create(`{"Image":"${bb}","HostConfig":{"Memory":99999999999999999999999}}`), 400, /Memory/],
      [...create(`{"Image":"${bb}","HostConfig":{"Memory":-5}}`), 400, /^Minimum memory limit allowed is 6MB$/],
      [...create(`{"Image":"${bb}","HostConfig":{"Memory":1024}}`), 400, /^Minimum memory limit allowed is 6MB$/],
      [...create(`{"Image":"${bb}","HostConfig":{"ShmSize":-1}}`), 400, /^SHM size can not be less than 0$/],
      [...create(`{"Image":"${bb}","HostConfig":{"CpuShares":1.5}}`), 400, /CpuShares/],
      [...create(`{"Image":"${bb}","StopTimeout":1e300}`), 400, /StopTimeout/],
      [
        ...create(`{"Image":"${bb}","WorkingDir":"../../etc"}`),
        400,
        /^the working directory '..\/..\/etc' is invalid, it needs to be an absolute path$/,
      ],
      [...create(`{"Image":"${bb}","Cmd":["a\\u0000b"]}`), 400, /^invalid value for Cmd\.0: contains a NUL byte$/],
      [...create(`{"Image":"${bb}","Env":["A\\u0000=b"]}`), 400, /NUL byte/],
      [...create(`{"Image":"${bb}","Labels":{"a\\u0000":"b"}}`), 400, /NUL byte/],
      [...create(`{"Image":"${bb}","HostConfig":{"Binds":["/tmp/x\\u0000:/y"]}}`), 400, /NUL byte/],
      [...create(`{"Image":"${bb}","HostConfig":{"Binds":["/tmp:../y"]}}`), 400, /invalid volume specification/],
      [...create(`{"Image":"${bb}","HostConfig":{"NetworkMode":"../../x"}}`), 404, /network \.\.\/\.\.\/x not found/],
      [...create(`{"Image":"${bb}","HostConfig":{"SecurityOpt":["seccomp=../../../etc/shadow"]}}`), 400, /seccomp/],
      [...create('{"Image":"../../etc/passwd"}'), 404, /No such image/],
      [...create('{"Image":"bus\\u0000box"}'), 400, /NUL byte/],
      [...create(`{"Image":"${bb}"}`, '?name=caf%C3%A9'), 400, /^Invalid container name \(café\)/],
      [...create(`{"Image":"${bb}"}`, '?name=a%00b'), 400, /^Invalid container name/],
      [...create(`{"Image":"${bb}"}`, '?name=..%2F..%2Fx'), 400, /^Invalid container name/],
      [...create(`{"Image":"${bb}"}`, `?name=${'a'.repeat(70_000)}`), 431, /headers are larger/],
      ['GET', '/containers/%2e%2e%2f%2e%2e%2fetc/json', undefined, 404, /^No such container: \.\.\/\.\.\/etc$/],
      ['GET', '/containers/a%00b/json', undefined, 404, /No such container/],
      ['GET', '/images/..%2F..%2Fetc%2Fpasswd/json', undefined, 404, /No such image/],
      ['GET', `/containers/json?filters=${encodeURIComponent(nested(1000))}`, undefined, 400, /filters/],
      ['GET', `/containers/json?filters=${encodeURIComponent('{"label":[1,2]}')}`, undefined, 400, /filters/],
      ['GET', '/containers/json?filters=notjson', undefined, 400, /filters/],
      ['GET', '/containers/json?limit=1e9', undefined, 400, /limit/],
      ['POST', '/images/create?fromImage=..%2F..%2Fx&tag=latest', undefined, 400, /invalid reference format/],
      ['POST', '/images/create?fromImage=a%00b', undefined, 400, /invalid reference format/],
      [
        'POST',
        `/images/create?fromImage=${encodeURIComponent(bb.split(':').slice(0, 2).join(':'))}&tag=..%2F..`,
        undefined,
        400,
        /invalid tag format/,
      ],
      ['POST', `/commit?container=${rid}&repo=..%2Fx`, undefined, 400, /invalid reference format/],
      ['POST', `/commit?container=${rid}&repo=UPPER`, undefined, 400, /invalid reference format/],
      ['POST', `/containers/${rid}/kill?signal=SIGFOO`, undefined, 400, /signal/i],
      ['POST', `/containers/${rid}/kill?signal=99999999999999`, undefined, 400, /signal/i],
      ['POST', `/containers/${rid}/resize?h=1e9&w=1`, undefined, 400, /not an integer/],
      ['POST', `/containers/${rid}/stop?t=abc`, undefined, 400, /not an integer/],
      ['GET', `/containers/${rid}/logs?stdout=1&tail=abc`, undefined, 400, /not an integer/],
      ['GET', `/containers/${rid}/logs?stdout=1&since=1e400`, undefined, 400, /since/],
      ['GET', `/containers/${rid}/logs`, undefined, 400, /choose at least one stream/],
      ['GET', '/events?since=1e400&until=1', undefined, 400, /since/],
      ['GET', `/events?filters=${encodeURIComponent('{"nope":["x"]}')}`, undefined, 400, /filter/],
      ['POST', `/containers/${rid}/exec`, '{"Cmd":"notarray","AttachStdout":1}', 400, /AttachStdout/],
      ['POST', `/containers/${rid}/exec`, '{"Cmd":["a\\u0000"]}', 400, /NUL byte/],
      ['POST', `/containers/${rid}/wait?condition=../x`, undefined, 400, /invalid condition/],
      ['POST', '/auth', '{"username":1}', 400, /username/],
      ['POST', '/v9.99/containers/create', `{"Image":"${bb}"}`, 400, /too new/],
    ];
    dropIdleConnections();
    const before = { containers: await containerCount(), images: await imageCount(), holdings: holdings(d) };
    const wrong: string[] = [];
    for (const [method, p, body, status, message] of cases) {
      const r = await d.request(method, p, body === undefined ? {} : { raw: body, headers: json });
      const msg = typeof r.json?.message === 'string' ? r.json.message : undefined;
      if (r.status !== status || msg === undefined || !message.test(msg))
        wrong.push(`${method} ${p.slice(0, 100)} ${body?.slice(0, 60) ?? ''} → ${r.status} ${r.text.slice(0, 160)}`);
      if (r.status === 431) dropIdleConnections();
    }
    expect(wrong).toEqual([]);
    // Pulls with a malformed X-Registry-Auth are refused before anything is fetched.
    for (const auth of [
      'eyJ',
      '!!!',
      Buffer.from(nested(20_000)).toString('base64'),
      Buffer.from('{"username":1}').toString('base64'),
    ]) {
      const r = await d.request('POST', `/images/create?fromImage=${encodeURIComponent(bb)}`, {
        headers: { 'X-Registry-Auth': auth },
      });
      expect(r.status, r.text).toBe(400);
      expect(r.json.message).toMatch(/X-Registry-Auth/);
    }
    expect(await containerCount()).toBe(before.containers);
    expect(await imageCount()).toBe(before.images);
    dropIdleConnections();
    await expectNoLeaks(d, before.holdings);
    expect((await d.request('DELETE', `/containers/${rid}?force=1`)).status).toBe(204);
  });
});
