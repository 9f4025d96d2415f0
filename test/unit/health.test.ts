// The health check a container runs: its config merged at create (the
// image's under the request's), refused where dockerd refuses it, defaulted
// as dockerd defaults it; and Go's way of printing the timeout.
// (The checks themselves, on real containers: test/api/health.test.ts.)
import { describe, expect, it } from 'vitest';
import type { ConfigBody, Given } from '../../src/engine/containers/config.js';
import { checkConfig, createSettings } from '../../src/engine/containers/create/create.js';
import { durationText, healthCheckOf } from '../../src/engine/containers/health.js';
import { isEngineError } from '../../src/errors.js';

const S = 1e9;
const imageCheck = { Test: ['CMD-SHELL', 'curl -f localhost'], Interval: 10 * S, Retries: 5 };
const merged = (c: Given<ConfigBody>, fromImage: unknown = imageCheck) =>
  createSettings(
    { Image: 'img', Cmd: ['sh'], ...c },
    {},
    { ref: 'img', config: { Healthcheck: fromImage } },
    'a'.repeat(64),
  ).config.Healthcheck;

describe('the merge at create (dockerd merge())', () => {
  it("takes the image's check when the request has none", () => {
    expect(merged({})).toEqual(imageCheck);
  });

  it("fills an empty Test and zero fields from the image's", () => {
    expect(merged({ Healthcheck: { Test: [], Interval: 2 * S, Retries: 0, Timeout: 3 * S } })).toEqual({
      Test: ['CMD-SHELL', 'curl -f localhost'],
      Interval: 2 * S,
      Timeout: 3 * S,
      Retries: 5,
    });
  });

  it('keeps NONE (the image settings beside it do nothing)', () => {
    expect(merged({ Healthcheck: { Test: ['NONE'] } })?.Test).toEqual(['NONE']);
  });

  it('stores no check when neither has one, and ignores an image check that is not one', () => {
    expect(merged({}, null)).toBeUndefined();
    expect(merged({}, 'nonsense')).toBeUndefined();
  });
});

describe("dockerd's create checks", () => {
  const refused = (hc: NonNullable<ConfigBody['Healthcheck']>) => {
    try {
      checkConfig({ Image: 'img', Healthcheck: hc });
    } catch (e) {
      expect(isEngineError(e, 'invalid')).toBe(true);
      return (e as Error).message;
    }
    return null;
  };

  it.each([
    ['Interval', -1],
    ['Timeout', 1],
    ['StartPeriod', 999_999],
    ['StartInterval', -5 * S],
  ])('%s %d', (field, v) => {
    expect(refused({ [field]: v })).toBe(`${field} in Healthcheck cannot be less than 1ms`);
  });

  it('refuses negative retries and a test type nothing runs; takes zeroes and 1ms', () => {
    expect(refused({ Retries: -1 })).toBe('Retries in Healthcheck cannot be negative');
    expect(refused({ Test: ['FOO'] })).toBe("Unknown healthcheck type 'FOO' (expected 'CMD', 'CMD-SHELL' or 'NONE')");
    expect(refused({ Test: [], Interval: 0, Timeout: 1_000_000, Retries: 0 })).toBeNull();
  });
});

describe('the check run', () => {
  it('defaults as dockerd: 30s interval and timeout, 3 retries, no start period, 5s start interval', () => {
    expect(healthCheckOf({ Healthcheck: { Test: ['CMD', 'true'] } })).toEqual({
      argv: ['true'],
      intervalMs: 30_000,
      timeoutMs: 30_000,
      startPeriodMs: 0,
      startIntervalMs: 5_000,
      retries: 3,
      timeoutText: '30s',
    });
  });

  it('runs CMD-SHELL under the Shell, /bin/sh -c by default', () => {
    expect(healthCheckOf({ Healthcheck: { Test: ['CMD-SHELL', 'exit 1'] } })?.argv).toEqual([
      '/bin/sh',
      '-c',
      'exit 1',
    ]);
    expect(
      healthCheckOf({ Healthcheck: { Test: ['CMD-SHELL', 'exit 1'] }, Shell: ['/bin/ash', '-e', '-c'] })?.argv,
    ).toEqual(['/bin/ash', '-e', '-c', 'exit 1']);
  });

  it('runs nothing for NONE, an empty Test or none at all; CMD without a command fails each time', () => {
    expect(healthCheckOf({ Healthcheck: { Test: ['NONE'] } })).toBeNull();
    expect(healthCheckOf({ Healthcheck: {} })).toBeNull();
    expect(healthCheckOf({})).toBeNull();
    expect(healthCheckOf({ Healthcheck: { Test: ['CMD'] } })?.argv).toBeNull();
  });
});

describe("Go's duration text", () => {
  it.each([
    [0, '0s'],
    [500, '500ns'],
    [1_500, '1.5µs'],
    [300_000_000, '300ms'],
    [1e9, '1s'],
    [1.5e9, '1.5s'],
    [30e9, '30s'],
    [90e9, '1m30s'],
    [120e9, '2m0s'],
    [3600e9, '1h0m0s'],
    [3723.25e9, '1h2m3.25s'],
  ])('%d ns is %s', (ns, text) => {
    expect(durationText(ns)).toBe(text);
  });
});
