// X-Registry-Auth decoding, WWW-Authenticate parsing, token fetching and
// caching, and how registry refusals are read. Token servers here are small
// real HTTP servers on 127.0.0.1 (the registry's own token variant is covered
// by test/engine/registry-client.test.ts).
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { inspect } from 'node:util';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { isEngineError } from '../../src/errors.js';
import { parseReference } from '../../src/engine/reference.js';
import {
  basicCredentials,
  decodeRegistryConfig,
  decodeRegistryAuth,
  fetchToken,
  parseChallenges,
  TokenCache,
  type AuthConfig,
  type Send,
} from '../../src/engine/registry/auth.js';
import { pullError, RegistryError, registryErrorFrom } from '../../src/engine/registry/errors.js';
import { HttpTransport } from '../../src/engine/registry/transport.js';

const encode = (value: unknown, alphabet: 'base64' | 'base64url', padded: boolean) => {
  const s = Buffer.from(typeof value === 'string' ? value : JSON.stringify(value)).toString(alphabet);
  return padded ? s.padEnd(Math.ceil(s.length / 4) * 4, '=') : s.replace(/=+$/, '');
};

describe('decodeRegistryAuth', () => {
  // Chosen so that the base64 has both '+'/'-' and '/'/'_' and needs padding.
  const config = { username: 'user>>>?', password: 'p?ss~~~>', serveraddress: '127.0.0.1:5000', email: 'a@b.c' };

  it.each([
    ['standard, padded', 'base64', true],
    ['standard, unpadded', 'base64', false],
    ['URL-safe, padded', 'base64url', true],
    ['URL-safe, unpadded', 'base64url', false],
  ] as const)('decodes %s', (_name, alphabet, padded) => {
    const header = encode(config, alphabet, padded);
    expect(header.length % 4 === 0 || !padded).toBe(true);
    expect({ ...decodeRegistryAuth(header) }).toEqual(config);
  });

  it('exercises both alphabets in the fixtures', () => {
    expect(encode(config, 'base64', true)).toMatch(/[+/]/);
    expect(encode(config, 'base64url', true)).toMatch(/[-_]/);
    expect(encode(config, 'base64', true)).toMatch(/=$/);
  });

  it.each([
    ['absent', undefined],
    ['empty', ''],
    ['blank', '   '],
    ['{}', encode({}, 'base64url', true)],
    ['{} unpadded', encode({}, 'base64', false)],
    ['only empty fields', encode({ username: '', password: '', auth: '' }, 'base64', true)],
    ['null fields', encode({ username: null }, 'base64', true)],
  ])('%s means anonymous', (_name, header) => {
    expect(decodeRegistryAuth(header)).toBeUndefined();
  });

  it('takes the first of repeated headers and ignores unknown fields', () => {
    const h = encode({ username: 'a', password: 'b', other: 1 }, 'base64', true);
    expect({ ...decodeRegistryAuth([h, 'garbage']) }).toEqual({ username: 'a', password: 'b' });
  });

  it('keeps identity and registry tokens', () => {
    const h = encode({ identitytoken: 'refresh', registrytoken: 'bearer' }, 'base64url', false);
    expect({ ...decodeRegistryAuth(h) }).toEqual({ identitytoken: 'refresh', registrytoken: 'bearer' });
  });

  it.each([
    ['not base64', 'not base64!', 'invalid X-Registry-Auth header: must be a valid base64url-encoded string'],
    ['impossible length', 'abcde', 'invalid X-Registry-Auth header: must be a valid base64url-encoded string'],
    ['bad padding', 'abc==', 'invalid X-Registry-Auth header: must be a valid base64url-encoded string'],
    ['padding inside', 'ab=c', 'invalid X-Registry-Auth header: must be a valid base64url-encoded string'],
    ['not JSON', encode('hello', 'base64', true), 'invalid X-Registry-Auth header: invalid JSON'],
    ['JSON array', encode([1], 'base64', true), 'invalid X-Registry-Auth header: invalid JSON: expected an object'],
    ['JSON string', encode('"x"', 'base64', true), 'invalid X-Registry-Auth header: invalid JSON: expected an object'],
    [
      'wrong field type',
      encode({ username: 1 }, 'base64', true),
      'invalid X-Registry-Auth header: invalid JSON: field username must be a string',
    ],
  ])('refuses %s as a bad parameter', (_name, header, message) => {
    let err: unknown;
    try {
      decodeRegistryAuth(header);
    } catch (e) {
      err = e;
    }
    expect(isEngineError(err, 'invalid')).toBe(true);
    expect((err as Error).message).toContain(message);
  });

  it('never shows secrets when logged or inspected', () => {
    const auth = decodeRegistryAuth(
      encode({ username: 'u', password: 'hunter2', identitytoken: 'tok-secret', auth: 'dTpodW50ZXIy' }, 'base64', true),
    )!;
    const shown = JSON.stringify({ auth }) + inspect(auth) + JSON.stringify(auth);
    for (const secret of ['hunter2', 'tok-secret', 'dTpodW50ZXIy']) expect(shown).not.toContain(secret);
    expect(shown).toContain('[redacted]');
    expect(auth.password).toBe('hunter2'); // still usable
  });
});

describe('decodeRegistryConfig', () => {
  const map = {
    'registry.example:5000': { username: 'u', password: 'p' },
    'https://index.docker.io/v1/': { auth: '' },
  };
  const json = JSON.stringify(map);
  const std = Buffer.from(json).toString('base64');
  const url = Buffer.from(json).toString('base64url');

  it('reads the four base64 forms a client may send, one AuthConfig per registry; empty entries are dropped', () => {
    for (const h of [std, std.replace(/=+$/, ''), url, `${url}${'='.repeat((4 - (url.length % 4)) % 4)}`]) {
      const out = decodeRegistryConfig(h);
      expect(Object.keys(out)).toEqual(['registry.example:5000']);
      expect({ ...out['registry.example:5000'] }).toEqual({ username: 'u', password: 'p' });
    }
  });

  it('absent or empty: no credentials; not JSON or not an object: a 400', () => {
    expect(decodeRegistryConfig(undefined)).toEqual({});
    expect(decodeRegistryConfig('')).toEqual({});
    for (const bad of ['!!!', Buffer.from('[1]').toString('base64'), Buffer.from('nope').toString('base64')]) {
      let err: unknown;
      try {
        decodeRegistryConfig(bad);
      } catch (e) {
        err = e;
      }
      expect(isEngineError(err, 'invalid'), String(err)).toBe(true);
      expect((err as Error).message).toMatch(/^invalid X-Registry-Config header: /);
    }
  });
});

describe('basicCredentials', () => {
  it.each([
    [undefined, undefined],
    [
      { username: 'u', password: 'p' },
      { username: 'u', password: 'p' },
    ],
    [{ auth: Buffer.from('u:p:with:colons').toString('base64') }, { username: 'u', password: 'p:with:colons' }],
    [{ username: 'u' }, undefined],
    [{ identitytoken: 'x' }, undefined],
  ] as Array<[AuthConfig | undefined, unknown]>)('%j', (auth, want) => {
    expect(basicCredentials(auth)).toEqual(want);
  });
});

describe('parseChallenges', () => {
  it.each([
    ['Basic realm="Registry Realm"', [{ scheme: 'basic', params: { realm: 'Registry Realm' } }]],
    [
      'Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:samalba/my-app:pull,push"',
      [
        {
          scheme: 'bearer',
          params: {
            realm: 'https://auth.docker.io/token',
            service: 'registry.docker.io',
            scope: 'repository:samalba/my-app:pull,push',
          },
        },
      ],
    ],
    [
      'Bearer realm="https://a/token", service="svc" , scope="repository:a:pull" , error="insufficient_scope"',
      [
        {
          scheme: 'bearer',
          params: { realm: 'https://a/token', service: 'svc', scope: 'repository:a:pull', error: 'insufficient_scope' },
        },
      ],
    ],
    [
      'BEARER Realm=https://a/token,Service=svc',
      [{ scheme: 'bearer', params: { realm: 'https://a/token', service: 'svc' } }],
    ],
    [
      'Basic realm="a, b", Bearer realm="https://t",service="s"',
      [
        { scheme: 'basic', params: { realm: 'a, b' } },
        { scheme: 'bearer', params: { realm: 'https://t', service: 's' } },
      ],
    ],
    ['Bearer realm="say \\"hi\\""', [{ scheme: 'bearer', params: { realm: 'say "hi"' } }]],
    ['Negotiate', [{ scheme: 'negotiate', params: {} }]],
    ['', []],
  ])('%s', (header, want) => {
    expect(parseChallenges(header)).toEqual(want);
  });

  it('reads several headers', () => {
    expect(parseChallenges(['Basic realm="x"', 'Bearer realm="y"']).map((c) => c.scheme)).toEqual(['basic', 'bearer']);
  });

  it('survives garbage', () => {
    expect(() => parseChallenges('=,,"unterminated \\')).not.toThrow();
    expect(parseChallenges('Bearer realm="unterminated')[0]?.params.realm).toBe('unterminated');
  });
});

// ---- a real token server ----------------------------------------------------------

interface Seen {
  method: string;
  url: URL;
  authorization?: string;
  body: string;
}

type Handler = (seen: Seen, res: http.ServerResponse) => void;

let server: http.Server;
let base = '';
let handler: Handler = (_s, res) => res.end('{}');
const seen: Seen[] = [];
const transport = new HttpTransport({ userAgent: 'berth-test', tlsFor: async () => ({ verify: true }) });
const send: Send = (req) => transport.follow(req);

beforeAll(async () => {
  server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const s: Seen = {
        method: req.method!,
        url: new URL(req.url!, base),
        body: Buffer.concat(chunks).toString(),
        ...(req.headers.authorization ? { authorization: req.headers.authorization } : {}),
      };
      seen.push(s);
      handler(s, res);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  transport.close();
  await new Promise((r) => server.close(r));
});

afterEach(() => {
  seen.length = 0;
});

const json = (res: http.ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}) => {
  res.writeHead(status, { 'Content-Type': 'application/json', ...headers });
  res.end(typeof body === 'string' ? body : JSON.stringify(body));
};

const tokenReq = (auth?: AuthConfig) => ({
  realm: `${base}/token`,
  service: 'svc',
  scope: 'repository:a/b:pull',
  plainHttpAllowed: true,
  ...(auth ? { auth } : {}),
});

describe('fetchToken', () => {
  it('GETs anonymously with Docker’s parameters and takes `token`', async () => {
    handler = (_s, res) => json(res, 200, { token: 'T1', expires_in: 300 });
    const t = await fetchToken(send, tokenReq(), () => 1_000);
    expect(t).toEqual({ token: 'T1', expiresAt: 1_000 + 300_000 });
    expect(seen).toHaveLength(1);
    const q = seen[0]!.url.searchParams;
    expect(seen[0]!.method).toBe('GET');
    expect(seen[0]!.authorization).toBeUndefined();
    expect([q.get('service'), q.get('scope'), q.get('client_id'), q.get('offline_token')]).toEqual([
      'svc',
      'repository:a/b:pull',
      'docker',
      'true',
    ]);
  });

  it('sends Basic credentials and takes `access_token`; short lifetimes become 60 s', async () => {
    handler = (_s, res) => json(res, 200, { access_token: 'T2', expires_in: 5, issued_at: '2030-01-01T00:00:00Z' });
    const t = await fetchToken(send, tokenReq({ username: 'u', password: 'p' }));
    expect(t.token).toBe('T2');
    expect(t.expiresAt).toBe(Date.parse('2030-01-01T00:00:00Z') + 60_000);
    expect(seen[0]!.authorization).toBe(`Basic ${Buffer.from('u:p').toString('base64')}`);
  });

  it('keeps a realm’s own query parameters', async () => {
    handler = (_s, res) => json(res, 200, { token: 'T' });
    await fetchToken(send, { ...tokenReq(), realm: `${base}/token?tenant=x` });
    expect(seen[0]!.url.searchParams.get('tenant')).toBe('x');
  });

  it('POSTs a refresh_token grant for an identity token', async () => {
    handler = (_s, res) => json(res, 200, { access_token: 'T3', expires_in: 120 });
    const t = await fetchToken(send, tokenReq({ identitytoken: 'refresh-me' }));
    expect(t.token).toBe('T3');
    expect(seen[0]!.method).toBe('POST');
    const form = new URLSearchParams(seen[0]!.body);
    expect(Object.fromEntries(form)).toMatchObject({
      grant_type: 'refresh_token',
      refresh_token: 'refresh-me',
      client_id: 'docker',
      service: 'svc',
      scope: 'repository:a/b:pull',
    });
    expect(seen[0]!.authorization).toBeUndefined();
  });

  it('falls back to GET when the token server does not take POST', async () => {
    handler = (s, res) => (s.method === 'POST' ? json(res, 405, { details: 'no' }) : json(res, 200, { token: 'T4' }));
    const t = await fetchToken(send, tokenReq({ identitytoken: 'r', username: 'u', password: 'p' }));
    expect(t.token).toBe('T4');
    expect(seen.map((s) => s.method)).toEqual(['POST', 'GET']);
    expect(seen[1]!.authorization).toMatch(/^Basic /);
  });

  it('never resends the OAuth form (it holds the refresh token) to another origin', async () => {
    const other = base.replace('127.0.0.1', '127.0.0.2');
    handler = (s, res) =>
      s.method === 'POST' ? res.writeHead(307, { Location: `${other}/steal` }).end() : json(res, 200, { token: 'T' });
    await expect(fetchToken(send, tokenReq({ identitytoken: 'refresh-me' }))).rejects.toThrow(
      /refusing to resend a request body to http:\/\/127\.0\.0\.2/,
    );
    expect(seen.map((s) => s.url.pathname)).toEqual(['/token']);
  });

  it('reports a refusal as the registry words it', async () => {
    handler = (_s, res) => json(res, 401, { details: 'incorrect username or password' });
    await expect(fetchToken(send, tokenReq({ username: 'u', password: 'bad' }))).rejects.toMatchObject({
      name: 'RegistryError',
      status: 401,
      message: 'unauthorized: incorrect username or password',
    });
  });

  it('refuses a response without a token', async () => {
    handler = (_s, res) => json(res, 200, { nothing: true });
    await expect(fetchToken(send, tokenReq())).rejects.toThrow(
      'authorization server did not include a token in the response',
    );
  });

  it('never sends credentials to a plain-HTTP realm that is not allowed', async () => {
    handler = (_s, res) => json(res, 200, { token: 'T' });
    await expect(
      fetchToken(send, { ...tokenReq({ username: 'u', password: 'p' }), plainHttpAllowed: false }),
    ).rejects.toThrow(/refusing to send credentials/);
    expect(seen).toHaveLength(0);
    // Anonymous token requests carry no secret, so they may use it.
    await expect(fetchToken(send, { ...tokenReq(), plainHttpAllowed: false })).resolves.toMatchObject({ token: 'T' });
  });

  it('refuses a realm that is not http(s)', async () => {
    await expect(fetchToken(send, { ...tokenReq(), realm: 'file:///etc/passwd' })).rejects.toThrow(
      /not an http\(s\) URL/,
    );
  });
});

describe('TokenCache', () => {
  it('reuses a token until it nearly expires, per credentials and scope', async () => {
    let n = 0;
    let now = 0;
    handler = (_s, res) => json(res, 200, { token: `T${++n}`, expires_in: 100 });
    const cache = new TokenCache(send, () => now);
    expect(await cache.get(tokenReq())).toBe('T1');
    expect(await cache.get(tokenReq())).toBe('T1');
    expect(await cache.get(tokenReq({ username: 'u', password: 'p' }))).toBe('T2');
    expect(await cache.get(tokenReq({ username: 'u', password: 'other' }))).toBe('T3');
    expect(await cache.get({ ...tokenReq(), scope: 'repository:c:pull' })).toBe('T4');
    expect(await cache.get(tokenReq({ username: 'u', password: 'p' }))).toBe('T2');
    now = 95_000; // within the renewal margin of the 100 s lifetime
    expect(await cache.get(tokenReq())).toBe('T5');
    cache.invalidate(tokenReq());
    expect(await cache.get(tokenReq())).toBe('T6');
    expect(seen).toHaveLength(6);
  });

  it('shares one fetch between concurrent callers', async () => {
    handler = (_s, res) => setTimeout(() => json(res, 200, { token: 'shared' }), 50);
    const cache = new TokenCache(send);
    const tokens = await Promise.all(Array.from({ length: 5 }, () => cache.get(tokenReq())));
    expect(tokens).toEqual(Array(5).fill('shared'));
    expect(seen).toHaveLength(1);
  });
});

describe('registry refusals', () => {
  const refusal = async (status: number, body: string, headers: Record<string, string> = {}) => {
    handler = (_s, res) => json(res, status, body, headers);
    return registryErrorFrom(await send({ method: 'GET', url: new URL(`${base}/v2/x/manifests/latest`) }));
  };
  const ref = parseReference('127.0.0.1:5000/x:nope');
  const ctx = { method: 'GET', url: new URL('http://127.0.0.1:5000/v2/x/manifests/nope') };

  it('reads the errors array (first one counts) in Go errcode’s words', async () => {
    const e = await refusal(
      404,
      JSON.stringify({
        errors: [{ code: 'MANIFEST_UNKNOWN', message: 'manifest unknown', detail: { Tag: 'nope' } }, { code: 'X' }],
      }),
    );
    expect(e.code).toBe('MANIFEST_UNKNOWN');
    expect(e.message).toBe('manifest unknown: manifest unknown');
    const err = pullError(e, ref, ctx);
    expect(err.kind).toBe('not-found');
    expect(err.message).toBe('manifest for 127.0.0.1:5000/x:nope not found: manifest unknown: manifest unknown');
  });

  it('words an unknown repository as dockerd does', async () => {
    const e = await refusal(
      404,
      JSON.stringify({ errors: [{ code: 'NAME_UNKNOWN', message: 'repository name not known to registry' }] }),
    );
    expect(pullError(e, ref, ctx).message).toBe(
      'repository 127.0.0.1:5000/x not found: name unknown: repository name not known to registry',
    );
  });

  it('turns Docker Hub’s insufficient_scope into "pull access denied"', async () => {
    const e = await refusal(
      401,
      JSON.stringify({ errors: [{ code: 'UNAUTHORIZED', message: 'authentication required' }] }),
      {
        'WWW-Authenticate':
          'Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/nope:pull",error="insufficient_scope"',
      },
    );
    const err = pullError(e, parseReference('nope'), ctx);
    expect(err.kind).toBe('not-found');
    expect(err.message).toBe(
      "pull access denied for nope, repository does not exist or may require 'docker login': denied: requested access to the resource is denied",
    );
  });

  it('says which request was unauthorized', async () => {
    const e = await refusal(401, '');
    expect(e.message).toBe('unauthorized: authentication required');
    const err = pullError(e, ref, ctx);
    expect(err.kind).toBe('unauthorized');
    expect(err.message).toBe('Get "http://127.0.0.1:5000/v2/x/manifests/nope": unauthorized: authentication required');
  });

  it.each([
    [500, '<html>oops</html>', 'unavailable', 'received unexpected HTTP status: 500 Internal Server Error'],
    [429, '{"details":"slow down"}', 'unavailable', 'toomanyrequests: slow down'],
    [403, '', 'forbidden', 'received unexpected HTTP status: 403 Forbidden'],
  ])('status %i → %s', async (status, body, kind, text) => {
    const e = await refusal(status, body);
    expect(e).toBeInstanceOf(RegistryError);
    expect(e.message).toBe(text);
    expect(pullError(e, ref, ctx).kind).toBe(kind);
  });
});
