// Docker's reference grammar and normalisation, with dockerd's error texts.
import { describe, expect, it } from 'vitest';
import { isEngineError } from '../../src/errors.js';
import {
  familiarName,
  familiarString,
  manifestReference,
  normalizeTag,
  parseReference,
  referenceString,
} from '../../src/engine/reference.js';
import { parseDigest } from '../../src/engine/digest.js';

const D = `sha256:${'a'.repeat(64)}`;
const D512 = `sha512:${'b'.repeat(128)}`;

describe('parseReference: valid references', () => {
  const cases: Array<
    [string, { domain: string; path: string; tag?: string; digest?: string; full: string; familiar: string }]
  > = [
    [
      'busybox',
      {
        domain: 'docker.io',
        path: 'library/busybox',
        tag: 'latest',
        full: 'docker.io/library/busybox:latest',
        familiar: 'busybox:latest',
      },
    ],
    [
      'busybox:1.36',
      {
        domain: 'docker.io',
        path: 'library/busybox',
        tag: '1.36',
        full: 'docker.io/library/busybox:1.36',
        familiar: 'busybox:1.36',
      },
    ],
    [
      'library/busybox',
      {
        domain: 'docker.io',
        path: 'library/busybox',
        tag: 'latest',
        full: 'docker.io/library/busybox:latest',
        familiar: 'busybox:latest',
      },
    ],
    [
      'docker.io/busybox',
      {
        domain: 'docker.io',
        path: 'library/busybox',
        tag: 'latest',
        full: 'docker.io/library/busybox:latest',
        familiar: 'busybox:latest',
      },
    ],
    [
      'index.docker.io/library/busybox',
      {
        domain: 'docker.io',
        path: 'library/busybox',
        tag: 'latest',
        full: 'docker.io/library/busybox:latest',
        familiar: 'busybox:latest',
      },
    ],
    [
      'user/app',
      {
        domain: 'docker.io',
        path: 'user/app',
        tag: 'latest',
        full: 'docker.io/user/app:latest',
        familiar: 'user/app:latest',
      },
    ],
    [
      'library/a/b',
      {
        domain: 'docker.io',
        path: 'library/a/b',
        tag: 'latest',
        full: 'docker.io/library/a/b:latest',
        familiar: 'library/a/b:latest',
      },
    ],
    [
      'localhost/x',
      { domain: 'localhost', path: 'x', tag: 'latest', full: 'localhost/x:latest', familiar: 'localhost/x:latest' },
    ],
    [
      'localhost:5000/x',
      {
        domain: 'localhost:5000',
        path: 'x',
        tag: 'latest',
        full: 'localhost:5000/x:latest',
        familiar: 'localhost:5000/x:latest',
      },
    ],
    [
      '127.0.0.1:5000/x:tag',
      {
        domain: '127.0.0.1:5000',
        path: 'x',
        tag: 'tag',
        full: '127.0.0.1:5000/x:tag',
        familiar: '127.0.0.1:5000/x:tag',
      },
    ],
    [
      '127.0.0.1:5000/busybox',
      {
        domain: '127.0.0.1:5000',
        path: 'busybox',
        tag: 'latest',
        full: '127.0.0.1:5000/busybox:latest',
        familiar: '127.0.0.1:5000/busybox:latest',
      },
    ],
    [
      '[::1]:5000/x',
      { domain: '[::1]:5000', path: 'x', tag: 'latest', full: '[::1]:5000/x:latest', familiar: '[::1]:5000/x:latest' },
    ],
    [
      'Registry.Example.com/a/b-c_d.e__f',
      {
        domain: 'Registry.Example.com',
        path: 'a/b-c_d.e__f',
        tag: 'latest',
        full: 'Registry.Example.com/a/b-c_d.e__f:latest',
        familiar: 'Registry.Example.com/a/b-c_d.e__f:latest',
      },
    ],
    [
      'ghcr.io/o/r:v1.2.3-RC_1',
      {
        domain: 'ghcr.io',
        path: 'o/r',
        tag: 'v1.2.3-RC_1',
        full: 'ghcr.io/o/r:v1.2.3-RC_1',
        familiar: 'ghcr.io/o/r:v1.2.3-RC_1',
      },
    ],
    [
      `x@${D}`,
      { domain: 'docker.io', path: 'library/x', digest: D, full: `docker.io/library/x@${D}`, familiar: `x@${D}` },
    ],
    [
      `x:1@${D}`,
      {
        domain: 'docker.io',
        path: 'library/x',
        tag: '1',
        digest: D,
        full: `docker.io/library/x:1@${D}`,
        familiar: `x:1@${D}`,
      },
    ],
    [
      `127.0.0.1:5000/x@${D512}`,
      {
        domain: '127.0.0.1:5000',
        path: 'x',
        digest: D512,
        full: `127.0.0.1:5000/x@${D512}`,
        familiar: `127.0.0.1:5000/x@${D512}`,
      },
    ],
    [
      'a--b',
      {
        domain: 'docker.io',
        path: 'library/a--b',
        tag: 'latest',
        full: 'docker.io/library/a--b:latest',
        familiar: 'a--b:latest',
      },
    ],
  ];
  it.each(cases)('%s', (input, want) => {
    const ref = parseReference(input);
    expect(ref.domain).toBe(want.domain);
    expect(ref.path).toBe(want.path);
    expect(ref.name).toBe(`${want.domain}/${want.path}`);
    expect(ref.tag).toBe(want.tag);
    expect(ref.digest).toBe(want.digest);
    expect(referenceString(ref)).toBe(want.full);
    expect(familiarString(ref)).toBe(want.familiar);
  });
});

describe('parseReference: dockerd error texts', () => {
  const cases: Array<[string, string]> = [
    ['', 'invalid reference format'],
    ['Busybox', 'invalid reference format: repository name must be lowercase'],
    ['user/App:latest', 'invalid reference format: repository name must be lowercase'],
    ['localhost:5000/Foo', 'invalid reference format: repository name must be lowercase'],
    ['busybox:', 'invalid reference format'],
    ['busybox:-x', 'invalid reference format'],
    [`busybox:${'t'.repeat(129)}`, 'invalid reference format'],
    ['-busybox', 'invalid reference format'],
    ['busy box', 'invalid reference format'],
    ['a//b', 'invalid reference format'],
    ['a/', 'invalid reference format'],
    ['a_-b', 'invalid reference format'],
    ['a___b', 'invalid reference format'],
    ['x@sha256:abc', 'invalid reference format'],
    ['http://x/y', 'invalid reference format'],
    [`x@sha256:${'a'.repeat(40)}`, 'invalid checksum digest length'],
    [`x@sha256:${'A'.repeat(64)}`, 'invalid checksum digest format'],
    [`x@md5:${'a'.repeat(32)}`, 'unsupported digest algorithm'],
    ['a'.repeat(64), `invalid repository name (${'a'.repeat(64)}), cannot specify 64-byte hexadecimal strings`],
    [`example.com/${'a'.repeat(250)}`, 'repository name must not be more than 255 characters'],
    ['x'.repeat(5000), 'invalid reference format'],
  ];
  it.each(cases)('%j', (input, message) => {
    let err: unknown;
    try {
      parseReference(input);
    } catch (e) {
      err = e;
    }
    expect(isEngineError(err, 'invalid')).toBe(true);
    expect((err as Error).message).toBe(message);
  });

  it('stays fast on adversarial input (no catastrophic backtracking)', () => {
    const inputs = [
      `${'a-'.repeat(250)}!`,
      `${'a.'.repeat(250)}/`,
      `${'a'.repeat(500)}:`,
      `${'a1-'.repeat(80)}a/${'b_'.repeat(80)}@`,
    ];
    const start = performance.now();
    for (const s of inputs) expect(() => parseReference(s)).toThrow();
    // Backtracking on these would take minutes; a loaded machine takes milliseconds.
    expect(performance.now() - start).toBeLessThan(2000);
  });
});

describe('familiar forms', () => {
  it.each([
    ['busybox', 'busybox', 'busybox:latest'],
    ['docker.io/library/busybox:1', 'busybox', 'busybox:1'],
    ['docker.io/user/app', 'user/app', 'user/app:latest'],
    ['127.0.0.1:5000/busybox', '127.0.0.1:5000/busybox', '127.0.0.1:5000/busybox:latest'],
  ])('%s', (input, name, str) => {
    const ref = parseReference(input);
    expect(familiarName(ref)).toBe(name);
    expect(ref.familiar).toBe(name);
    expect(familiarString(ref)).toBe(str);
  });

  it('keeps no tag when asked not to default one', () => {
    expect(parseReference('busybox', { defaultTag: false }).tag).toBeUndefined();
  });

  it('asks the registry for the digest in preference to the tag', () => {
    expect(manifestReference(parseReference(`x:1@${D}`))).toBe(D);
    expect(manifestReference(parseReference('x:1'))).toBe('1');
  });
});

describe('normalizeTag (POST /images/create?fromImage=&tag=)', () => {
  const cases: Array<[string, string | undefined, string]> = [
    ['busybox', undefined, 'docker.io/library/busybox:latest'],
    ['busybox', '', 'docker.io/library/busybox:latest'],
    ['busybox', '1.36', 'docker.io/library/busybox:1.36'],
    ['busybox:', undefined, 'docker.io/library/busybox:latest'],
    ['busybox:1.0', undefined, 'docker.io/library/busybox:1.0'],
    ['busybox:1.0', 'latest', 'docker.io/library/busybox:latest'],
    ['busybox', D, `docker.io/library/busybox@${D}`],
    ['busybox:1.0', D, `docker.io/library/busybox@${D}`],
    [`busybox@${D}`, undefined, `docker.io/library/busybox@${D}`],
    [`busybox@${D}`, 'v2', `docker.io/library/busybox:v2@${D}`],
    ['127.0.0.1:5000/x', 'nope', '127.0.0.1:5000/x:nope'],
  ];
  it.each(cases)('%s + %s', (fromImage, tag, want) => {
    expect(referenceString(normalizeTag(fromImage, tag))).toBe(want);
  });

  it.each([
    ['busybox', 'bad tag', 'invalid tag format'],
    ['busybox', 'sha256:abc', 'invalid tag format'],
    ['Busybox', '1', 'invalid reference format: repository name must be lowercase'],
    ['busybox::', undefined, 'invalid reference format'],
  ])('%s + %s → %s', (fromImage, tag, message) => {
    expect(() => normalizeTag(fromImage, tag)).toThrow(message);
  });
});

describe('parseDigest', () => {
  it('splits a valid digest', () => {
    expect(parseDigest(D)).toEqual({ algorithm: 'sha256', encoded: 'a'.repeat(64) });
  });
  it.each([
    ['sha256', 'invalid checksum digest format'],
    [':abc', 'invalid checksum digest format'],
    ['sha256:', 'invalid checksum digest format'],
    [`sha256:${'g'.repeat(64)}`, 'invalid checksum digest format'],
    [`sha256:${'a'.repeat(63)}`, 'invalid checksum digest length'],
    ['foo:bar', 'unsupported digest algorithm'],
    ['Foo!:bar', 'invalid checksum digest format'],
  ])('%s → %s', (input, message) => {
    expect(() => parseDigest(input)).toThrow(message);
  });
});
