// The plugin API, as a dockerd that has no plugins answers it: the list (its
// filters checked as dockerd checks them), every per-plugin route's "not found"
// in dockerd's words, bodies and names refused first where dockerd checks them
// first, and what dockerd would honour (installing a plugin the registry has,
// creating one from a tar) refused as not implemented. The docker CLI and the
// Python SDK see the answers they get from such a dockerd.
import { beforeAll, describe, expect, it } from 'vitest';
import { dockerCli } from '../harness/cli.js';
import { runPython } from '../harness/clients.js';
import type { Daemon } from '../harness/daemon.js';
import { useEnv, type Env } from '../harness/env.js';

const ctx = useEnv();
let env: Env;
let d: Daemon;
beforeAll(() => {
  ({ env, daemon: d } = ctx);
});

const JSON_TYPE = { 'Content-Type': 'application/json' };
const filters = (v: unknown) => `/plugins?filters=${encodeURIComponent(JSON.stringify(v))}`;
const notFound = (name: string) => ({ message: `plugin "${name}" not found` });

describe('plugin API', () => {
  it('lists none, with its filters checked as dockerd checks them', async () => {
    expect((await d.request('GET', '/plugins')).json).toEqual([]);
    expect((await d.request('GET', filters({ enabled: ['true'] }))).json).toEqual([]);
    expect((await d.request('GET', filters({ capability: ['volumedriver'] }))).json).toEqual([]);
    const badKey = await d.request('GET', filters({ foo: ['x'] }));
    expect(badKey.status).toBe(400);
    expect(badKey.json).toEqual({ message: "invalid filter 'foo'" });
    const badValue = await d.request('GET', filters({ enabled: ['maybe'] }));
    expect(badValue.status).toBe(400);
    expect(badValue.json).toEqual({ message: "invalid filter 'enabled=[maybe]'" });
  });

  it('finds no plugin by any name, slashes and tags included', async () => {
    const cases: [method: string, path: string, name: string][] = [
      ['GET', '/plugins/foo/json', 'foo'],
      ['GET', '/plugins/127.0.0.1:5000/vol:1.0/json', '127.0.0.1:5000/vol:1.0'],
      ['DELETE', '/plugins/foo?force=1', 'foo'],
      ['POST', '/plugins/foo/enable?timeout=30', 'foo'],
      ['POST', '/plugins/foo/disable', 'foo'],
      ['POST', '/plugins/foo/push', 'foo'],
      ['POST', '/plugins/foo/upgrade?remote=foo', 'foo:latest'],
    ];
    for (const [method, path, name] of cases) {
      const r = await d.request(method, path, method === 'POST' ? { raw: '[]', headers: JSON_TYPE } : {});
      expect(r.status, path).toBe(404);
      expect(r.json, path).toEqual(notFound(name));
    }
    const set = await d.request('POST', '/plugins/foo/set', { body: ['DEBUG=1'] });
    expect(set.status).toBe(404);
    expect(set.json).toEqual(notFound('foo'));
  });

  it('refuses bad input first, as dockerd does', async () => {
    const cases: [method: string, path: string, body: string | undefined, message: string][] = [
      [
        'POST',
        '/plugins/foo/set',
        '{invalid}',
        "invalid JSON: invalid character 'i' looking for beginning of object key string",
      ],
      ['POST', '/plugins/foo/set', undefined, 'invalid JSON: got EOF while reading request body'],
      [
        'POST',
        '/plugins/foo/set',
        '{"a":1}',
        'invalid JSON: json: cannot unmarshal object into Go value of type []string',
      ],
      ['POST', '/plugins/foo/set', '[1]', 'invalid JSON: json: cannot unmarshal number into Go value of type string'],
      ['POST', '/plugins/foo/enable', undefined, 'strconv.Atoi: parsing "": invalid syntax'],
      ['POST', '/plugins/foo/upgrade', '[]', 'invalid reference format'],
      ['POST', '/plugins/pull?remote=UPPER', '[]', 'invalid reference format: repository name must be lowercase'],
      ['POST', `/plugins/pull?remote=x&name=x@sha256:${'a'.repeat(64)}`, '[]', 'cannot use digest in plugin tag'],
      [
        'POST',
        '/plugins/pull?remote=x',
        '{}',
        'invalid JSON: json: cannot unmarshal object into Go value of type types.PluginPrivileges',
      ],
      ['GET', '/plugins/privileges', undefined, 'invalid reference format'],
      ['POST', '/plugins/create', undefined, 'failed to parse reference : invalid reference format'],
    ];
    for (const [method, path, body, message] of cases) {
      const r = await d.request(method, path, body === undefined ? {} : { raw: body, headers: JSON_TYPE });
      expect(r.status, `${path} ${body}`).toBe(400);
      expect(r.json.message, `${path} ${body}`).toBe(message);
    }
  });

  it('answers the registry’s refusal for a plugin it lacks, and refuses to install or create one', async () => {
    const missing = `${env.registry.host}/no-such-plugin`;
    const privileges = await d.request('GET', `/plugins/privileges?remote=${missing}`);
    expect(privileges.status).toBe(404);
    expect(privileges.json.message).toMatch(/^error resolving plugin reference: .*manifest unknown/);
    // What dockerd would install, berth refuses: it runs no plugins.
    const pull = await d.request('POST', `/plugins/pull?remote=${env.busybox}`, { raw: '[]', headers: JSON_TYPE });
    expect(pull.status).toBe(501);
    expect(pull.json.message).toBe(
      `berth runs no plugins: installing ${env.busybox} is not supported (it has no plugin runtime)`,
    );
    const create = await d.request('POST', '/plugins/create?name=myplugin', {
      raw: Buffer.alloc(64 * 1024),
      headers: { 'Content-Type': 'application/x-tar' },
    });
    expect(create.status).toBe(501);
    expect(create.json.message).toMatch(/^berth runs no plugins: creating plugin myplugin:latest is not supported/);
    expect((await d.request('GET', '/plugins')).json).toEqual([]);
  });

  it('docker plugin ls, inspect, install and rm answer as against a dockerd without plugins', async () => {
    const docker = dockerCli(d);
    const ls = await docker(['plugin', 'ls']);
    expect(ls.code, ls.stderr).toBe(0);
    expect(ls.stdout.trim().split('\n')).toEqual([expect.stringMatching(/^ID\s+NAME\s+DESCRIPTION\s+ENABLED$/)]);
    const inspect = await docker(['plugin', 'inspect', 'x']);
    expect(inspect.code).toBe(1);
    expect(inspect.stdout.trim()).toBe('[]');
    expect(inspect.stderr.trim()).toBe('Error response from daemon: plugin "x" not found');
    const rm = await docker(['plugin', 'rm', 'x']);
    expect(rm.code).toBe(1);
    expect(rm.stderr.trim()).toBe('Error response from daemon: plugin "x" not found');
    const install = await docker(['plugin', 'install', '--grant-all-permissions', env.busybox]);
    expect(install.code).toBe(1);
    expect(install.stderr).toContain('berth runs no plugins: installing');
  });

  it('the Python SDK lists none and gets NotFound', async () => {
    const { values: v, result } = await runPython(
      d,
      `
emit('list', [p.name for p in client.plugins.list()])
try:
    client.plugins.get('x')
except docker.errors.NotFound as e:
    emit('get', e.explanation)
`,
    );
    expect(result.code, result.stderr).toBe(0);
    expect(v.list).toEqual([]);
    expect(v.get).toBe('plugin "x" not found');
  });
});
