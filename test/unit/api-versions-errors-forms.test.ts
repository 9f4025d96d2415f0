import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { toHttpError } from '../../src/api/errors.js';
import { checkVersion, compareVersions, splitVersion } from '../../src/api/version.js';
import { foldFieldNames } from '../../src/api/wire/fieldnames.js';
import { boolValue, intValue } from '../../src/api/wire/forms.js';
import { conflict, EngineError, noSuchContainer, notModified, systemError, type Kind } from '../../src/errors.js';

describe('versions', () => {
  it('compares numerically', () => {
    expect(compareVersions('1.9', '1.10')).toBe(-1);
    expect(compareVersions('1.41', '1.41')).toBe(0);
    expect(compareVersions('2', '1.99')).toBe(1);
  });
  it('splits the prefix', () => {
    expect(splitVersion('/v1.41/containers/json?all=1')).toEqual({ version: '1.41', path: '/containers/json?all=1' });
    expect(splitVersion('/containers/json')).toEqual({ version: null, path: '/containers/json' });
    expect(splitVersion('/version')).toEqual({ version: null, path: '/version' });
  });
  it('checks the range', () => {
    expect(() => checkVersion('1.41')).not.toThrow();
    expect(() => checkVersion('1.47')).not.toThrow();
    expect(() => checkVersion('1.48')).toThrow('client version 1.48 is too new. Maximum supported API version is 1.47');
    expect(() => checkVersion('1.23')).toThrow(/too old/);
  });
});

describe('error mapping', () => {
  const table: [Kind, number][] = [
    ['invalid', 400],
    ['not-found', 404],
    ['conflict', 409],
    ['not-modified', 304],
    ['unauthorized', 401],
    ['forbidden', 403],
    ['unavailable', 503],
    ['not-implemented', 501],
    ['system', 500],
  ];
  it.each(table)('%s → %i', (kind, status) => {
    expect(toHttpError(new EngineError(kind, 'm')).status).toBe(status);
  });
  it('keeps the engine message', () => {
    expect(toHttpError(noSuchContainer('abc'))).toEqual({ status: 404, message: 'No such container: abc' });
    expect(toHttpError(conflict('x')).status).toBe(409);
    expect(toHttpError(notModified()).status).toBe(304);
    expect(toHttpError(systemError('disk')).status).toBe(500);
  });
  it('maps zod failures to 400 with the field named', () => {
    const r = z.object({ Image: z.string() }).safeParse({ Image: 3 });
    const e = toHttpError(r.error);
    expect(e.status).toBe(400);
    expect(e.message).toMatch(/Image/);
  });
  it('maps unknown errors to 500', () => {
    expect(toHttpError(new Error('boom')).status).toBe(500);
  });
});

describe('forms', () => {
  it("follows dockerd's BoolValue", () => {
    for (const f of ['', '0', 'no', 'false', 'none', 'FALSE']) expect(boolValue(f)).toBe(false);
    for (const t of ['1', 'true', 'yes', 'True', 'anything']) expect(boolValue(t)).toBe(true);
    expect(boolValue(undefined, true)).toBe(true);
  });
  it('parses integers and refuses junk', () => {
    expect(intValue('10', 't', 0)).toBe(10);
    expect(intValue(undefined, 't', 5)).toBe(5);
    expect(intValue('-1', 't')).toBe(-1);
    expect(() => intValue('1x', 't')).toThrow(/invalid value for t/);
  });
});

describe("a body's field names, as Go's decoder matches them", () => {
  const schema = z.looseObject({
    Image: z.string().nullish(),
    Labels: z.record(z.string(), z.string()).nullish(),
    HostConfig: z
      .looseObject({
        Memory: z.number().nullish(),
        Devices: z.array(z.looseObject({ PathOnHost: z.string().nullish() })).nullish(),
      })
      .nullish(),
    Cmd: z.union([z.array(z.string()), z.string().transform((s) => [s])]).nullish(),
  });

  it('puts struct fields in the schema’s spelling, nested and in arrays', () => {
    expect(
      foldFieldNames(schema, {
        image: 'x',
        HOSTCONFIG: { memory: 5, devices: [{ pathonhost: '/dev/null' }] },
        cmd: 'true',
      }),
    ).toEqual({ Image: 'x', HostConfig: { Memory: 5, Devices: [{ PathOnHost: '/dev/null' }] }, Cmd: 'true' });
  });

  it('keeps map keys and unknown names as given; a name given twice takes the later value', () => {
    expect(foldFieldNames(schema, { labels: { Some: 'Key' }, Unknown: 1, image: 'a', Image: 'b' })).toEqual({
      Labels: { Some: 'Key' },
      Unknown: 1,
      Image: 'b',
    });
    const proto = foldFieldNames(schema, JSON.parse('{"__proto__": {"polluted": true}}')) as object;
    expect(Object.keys(proto)).toEqual(['__proto__']);
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
  });
});
