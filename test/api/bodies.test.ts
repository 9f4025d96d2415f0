// Request bodies as dockerd decodes them, across every route that takes JSON:
// a body that is not JSON is a 400 in the words of Go's decoder (which moby's
// own tests and clients match), an empty body where dockerd needs one is its
// "got EOF" 400 and does nothing (no volume made, no exec started), and the
// body is decoded before the object is looked up, as dockerd does.
import { beforeAll, describe, expect, it } from 'vitest';
import type { Daemon } from '../harness/daemon.js';
import { useEnv, type Env } from '../harness/env.js';

const ctx = useEnv();
let env: Env;
let d: Daemon;
beforeAll(() => {
  ({ env, daemon: d } = ctx);
});

const JSON_TYPE = { 'Content-Type': 'application/json' };
const post = (path: string, raw?: string) =>
  d.request('POST', path, raw === undefined ? { headers: JSON_TYPE } : { raw, headers: JSON_TYPE });

/** Every route dockerd decodes a JSON body on; the objects they name do not exist. */
const ROUTES = [
  '/containers/create',
  '/containers/nope/update',
  '/containers/nope/exec',
  '/exec/nope/start',
  '/commit?container=nope',
  '/networks/create',
  '/networks/nope/connect',
  '/networks/nope/disconnect',
  '/volumes/create',
  '/auth',
  '/plugins/nope/set',
  '/plugins/nope/upgrade?remote=nope',
  '/plugins/pull?remote=nope',
  '/swarm/init',
  '/services/create',
];
/** Those of them that need a body: an empty one is refused before anything else. */
const NEED_A_BODY = [
  '/containers/create',
  '/containers/nope/exec',
  '/exec/nope/start',
  '/networks/create',
  '/networks/nope/connect',
  '/networks/nope/disconnect',
  '/volumes/create',
  '/auth',
  '/plugins/nope/set',
  '/swarm/init',
  '/services/create',
];

describe('JSON request bodies', () => {
  it.each(ROUTES)('%s: a body that is not JSON is a 400 in Go decoder words, before any lookup', async (path) => {
    const r = await post(path, '{invalid json');
    expect(r.status, r.text).toBe(400);
    expect(r.json.message).toBe("invalid JSON: invalid character 'i' looking for beginning of object key string");
  });

  it.each(NEED_A_BODY)('%s: an empty body is dockerd’s EOF 400', async (path) => {
    const r = await post(path);
    expect(r.status, r.text).toBe(400);
    expect(r.json.message).toBe('invalid JSON: got EOF while reading request body');
    // Spaces alone are no body either, and no Content-Type with nothing sent is the same.
    expect((await post(path, ' \n\t')).json.message).toBe('invalid JSON: got EOF while reading request body');
    expect((await d.request('POST', path)).status).toBe(400);
  });

  it('reads the other syntax errors in Go’s words', async () => {
    const cases: [body: string, message: string][] = [
      ['{"Image": ', 'invalid JSON: unexpected EOF'],
      ['{"Image" "x"}', `invalid JSON: invalid character '"' after object key`],
      ['{"Image":"x" "Cmd":[]}', `invalid JSON: invalid character '"' after object key:value pair`],
      ['{"Cmd":["a" "b"]}', `invalid JSON: invalid character '"' after array element`],
      ['{"Image":x}', "invalid JSON: invalid character 'x' looking for beginning of value"],
      ['{"Tty":tru}', "invalid JSON: invalid character '}' in literal true (expecting 'e')"],
      ['{"Image":"a\tb"}', "invalid JSON: invalid character '\\t' in string literal"],
      ['{} {}', 'unexpected content after JSON'],
      ['[]', 'invalid JSON: json: cannot unmarshal array into Go value of type container.CreateRequest'],
    ];
    for (const [body, message] of cases) {
      const r = await post('/containers/create', body);
      expect(r.status, body).toBe(400);
      expect(r.json.message, body).toBe(message);
    }
    // The daemon keeps serving, and a good body still creates.
    const ok = await d.request('POST', '/containers/create', { body: { Image: env.busybox } });
    expect(ok.status, ok.text).toBe(201);
    await d.request('DELETE', `/containers/${ok.json.Id}?force=1`);
  });

  it('makes no volume from an empty body, and one from an empty object', async () => {
    const count = async () => ((await d.request('GET', '/volumes')).json.Volumes as unknown[]).length;
    const before = await count();
    expect((await post('/volumes/create')).status).toBe(400);
    expect(await count()).toBe(before);
    const made = await post('/volumes/create', '{}');
    expect(made.status, made.text).toBe(201);
    expect(await count()).toBe(before + 1);
    await d.request('DELETE', `/volumes/${made.json.Name}`);
  });

  it('starts no exec on an empty body; update and commit take none', async () => {
    const c = await d.request('POST', '/containers/create', { body: { Image: env.busybox, Cmd: ['sleep', '60'] } });
    const id = c.json.Id as string;
    expect((await d.request('POST', `/containers/${id}/start`)).status).toBe(204);
    const e = await d.request('POST', `/containers/${id}/exec`, { body: { Cmd: ['true'] } });
    expect(e.status, e.text).toBe(201);
    const start = await post(`/exec/${e.json.Id}/start`);
    expect(start.status).toBe(400);
    expect(start.json.message).toBe('invalid JSON: got EOF while reading request body');
    const exec = await d.request('GET', `/exec/${e.json.Id}/json`);
    expect(exec.json).toMatchObject({ Running: false, ExitCode: null, Pid: 0 });
    // dockerd's update and commit decode an absent body as nothing to change.
    expect((await post(`/containers/${id}/update`)).status).toBe(200);
    const commit = await post(`/commit?container=${id}&repo=bodies-commit`);
    expect(commit.status, commit.text).toBe(201);
    await d.request('DELETE', `/containers/${id}?force=1`);
    await d.request('DELETE', '/images/bodies-commit');
  }, 60_000);

  it('refuses a body of another media type in dockerd’s words', async () => {
    const r = await d.request('POST', '/volumes/create', { raw: '{}', headers: { 'Content-Type': 'text/plain' } });
    expect(r.status).toBe(400);
    expect(r.json.message).toBe("unsupported Content-Type header (text/plain): must be 'application/json'");
  });
});
