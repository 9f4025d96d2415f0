// The fast lane (src/api/fastlane.ts) answers the most frequent small GETs ahead
// of Fastify. Each of them is asked twice here, over a raw socket: as clients
// send it (the lane's) and with a `Content-Length: 0` header, which the lane
// leaves to Fastify's route. What a client reads must be the same bytes: status
// line, header names, their case, order and values, and the body.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Daemon } from '../harness/daemon.js';
import { useEnv, type Env } from '../harness/env.js';
import { blankDate, rawExchange } from '../harness/raw-http.js';

const ctx = useEnv();
let env: Env;
let d: Daemon;
let ran: string;
let created: string;
let imageId: string;

/** One request on a connection of its own; the whole answer as text, its Date header blanked. */
const raw = (method: string, path: string, extra = ''): Promise<string> =>
  rawExchange(d.socket, `${method} ${path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n${extra}\r\n`).then(
    blankDate,
  );

/** A finished container's age in `docker ps` ("Exited (0) 3 seconds ago") may change between two answers. */
const ageless = (text: string) => text.replace(/"(Exited \(\d+\)) [^"]* ago"/g, '"$1 … ago"');

beforeAll(async () => {
  ({ env, daemon: d } = ctx);
  const c = await d.request('POST', '/containers/create?name=lane-ran', {
    body: { Image: env.busybox, Cmd: ['true'], Labels: { lane: '1' }, Volumes: { '/data': {} } },
  });
  expect(c.status, c.text).toBe(201);
  ran = c.json.Id;
  expect((await d.request('POST', `/containers/${ran}/start`)).status).toBe(204);
  expect((await d.request('POST', `/containers/${ran}/wait`)).json.StatusCode).toBe(0);
  const c2 = await d.request('POST', '/containers/create', {
    body: { Image: env.busybox, Cmd: ['true'], HostConfig: { Binds: ['/tmp:/host:ro'] } },
  });
  expect(c2.status, c2.text).toBe(201);
  created = c2.json.Id;
  imageId = (await d.request('GET', `/images/${env.busybox}/json`)).json.Id;
});
afterAll(async () => {
  for (const id of [ran, created]) if (id) await d.request('DELETE', `/containers/${id}?force=1&v=1`);
});

describe('the fast lane', () => {
  it('answers as the Fastify routes do, byte for byte', async () => {
    const requests: [string, string][] = [
      ['GET', '/_ping'],
      ['HEAD', '/_ping'],
      ['GET', '/v1.41/_ping'],
      ['HEAD', '/v1.47/_ping'],
      ['GET', '/containers/json'],
      ['GET', '/containers/json?all=1'],
      ['GET', '/v1.24/containers/json?all=1&limit=1'],
      ['GET', `/containers/${ran}/json`],
      ['GET', '/containers/lane-ran/json'],
      ['GET', `/v1.24/containers/${created.slice(0, 12)}/json`],
      ['GET', '/images/json'],
      ['GET', '/images/json?all=1'],
      ['GET', '/v1.41/images/json?shared-size=1'],
      ['GET', '/images/json?shared-size=1'],
      ['GET', `/images/${env.busybox}/json`],
      ['GET', `/images/${imageId}/json`],
      ['GET', `/v1.24/images/${imageId.slice(7, 19)}/json`],
    ];
    for (const [method, path] of requests) {
      const lane = await raw(method, path);
      const fastify = await raw(method, path, 'Content-Length: 0\r\n');
      expect(lane, `${method} ${path}`).toMatch(/^HTTP\/1\.1 200 OK\r\napi-version: 1\.47\r\n/);
      expect(ageless(lane), `${method} ${path}`).toBe(ageless(fastify));
    }
    // The comparison says nothing if the lane left them all to Fastify: it logs those it answers.
    const answered = d
      .stderr()
      .split('\n')
      .filter((l) => l.includes('"lane":true'))
      .map((l) => JSON.parse(l).url);
    for (const [, path] of requests) expect(answered, path).toContain(path);
  });

  it('leaves errors, versions out of range and unusual requests to Fastify', async () => {
    const before = d
      .stderr()
      .split('\n')
      .filter((l) => l.includes('"lane":true')).length;
    const missing = await d.request('GET', '/containers/no-such-one/json');
    expect(missing.status).toBe(404);
    expect(missing.json.message).toBe('No such container: no-such-one');
    const tooNew = await d.request('GET', '/v1.99/containers/json');
    expect(tooNew.status).toBe(400);
    expect(tooNew.json.message).toBe('client version 1.99 is too new. Maximum supported API version is 1.47');
    // Escaped names and filters are read by Fastify's parsers.
    const escaped = await d.request('GET', '/containers/lane%2Dran/json');
    expect(escaped.json.Id).toBe(ran);
    const filtered = await d.request(
      'GET',
      `/containers/json?all=1&filters=${encodeURIComponent('{"label":["lane=1"]}')}`,
    );
    expect(filtered.json.map((c: { Id: string }) => c.Id)).toEqual([ran]);
    const sized = await d.request('GET', `/containers/${ran}/json?size=1`);
    expect(sized.json.SizeRootFs).toBeGreaterThan(0);
    const after = d
      .stderr()
      .split('\n')
      .filter((l) => l.includes('"lane":true')).length;
    expect(after).toBe(before);
  });
});
