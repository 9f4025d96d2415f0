// LogConfig read as dockerd reads it: sizes in go-units' decimal units, each
// driver's defaults, and what conmon is told for each policy.
// (Rotation on real containers, and dockerd's refusals: test/api/logs.test.ts.)
import { describe, expect, it } from 'vitest';
import {
  conmonLogSizeMax,
  fromHumanSize,
  logPolicy,
  rotatedByBerth,
} from '../../src/engine/containers/create/logconfig.js';

describe('fromHumanSize (go-units)', () => {
  it('reads decimal units, with or without b/ib, spaces and fractions', () => {
    expect(fromHumanSize('1k')).toBe(1000);
    expect(fromHumanSize('1KiB')).toBe(1000);
    expect(fromHumanSize('1kb')).toBe(1000);
    expect(fromHumanSize('10m')).toBe(10_000_000);
    expect(fromHumanSize('1.5g')).toBe(1_500_000_000);
    expect(fromHumanSize('10 mb')).toBe(10_000_000);
    expect(fromHumanSize('42')).toBe(42);
    expect(fromHumanSize('42b')).toBe(42);
  });

  it('refuses what go-units refuses, in its words', () => {
    expect(() => fromHumanSize('lots')).toThrow("invalid size: 'lots'");
    expect(() => fromHumanSize('-5')).toThrow("invalid size: '-5'");
    expect(() => fromHumanSize('5x')).toThrow("invalid suffix: 'x'");
    expect(() => fromHumanSize('5kx')).toThrow("invalid suffix: 'kx'");
    expect(() => fromHumanSize('5kibi')).toThrow("invalid suffix: 'kibi'");
    expect(() => fromHumanSize('1.2.3')).toThrow('strconv.ParseFloat: parsing "1.2.3": invalid syntax');
  });
});

describe('logPolicy', () => {
  it('json-file: one file never rotated unless max-size; berth rotates from max-file 2', () => {
    expect(logPolicy(undefined)).toEqual({ driver: 'json-file', maxFiles: 1, compress: false });
    const one = logPolicy({ Type: 'json-file', Config: { 'max-size': '10m' } });
    expect(one).toEqual({ driver: 'json-file', maxSize: 10_000_000, maxFiles: 1, compress: false });
    expect(rotatedByBerth(one)).toBe(false);
    const three = logPolicy({ Config: { 'max-size': '1k', 'max-file': '3', compress: 'true' } });
    expect(three).toEqual({ driver: 'json-file', maxSize: 1000, maxFiles: 3, compress: true });
    expect(rotatedByBerth(three)).toBe(true);
    expect(rotatedByBerth(logPolicy({ Config: { 'max-file': '3' } }))).toBe(false);
  });

  it("local: dockerd's defaults, 20 MiB × 5 compressed", () => {
    expect(logPolicy({ Type: 'local', Config: {} })).toEqual({
      driver: 'local',
      maxSize: 20 * 1024 * 1024,
      maxFiles: 5,
      compress: true,
    });
    expect(logPolicy({ Type: 'local', Config: { 'max-file': '1', compress: 'false' } })).toMatchObject({
      maxFiles: 1,
      compress: false,
    });
  });

  it('tells conmon its own cap only for a single file', () => {
    const fallback = 100 * 1024 * 1024;
    expect(conmonLogSizeMax(logPolicy({}), fallback)).toBe(fallback);
    expect(conmonLogSizeMax(logPolicy({ Config: { 'max-size': '2k' } }), fallback)).toBe(2000);
    expect(conmonLogSizeMax(logPolicy({ Config: { 'max-size': '2k', 'max-file': '2' } }), fallback)).toBe(0);
    expect(conmonLogSizeMax(logPolicy({ Type: 'none', Config: {} }), fallback)).toBe(0);
    // local with max-size 0 and one file: dockerd starts afresh before every write; conmon's cap of 1 does.
    expect(
      conmonLogSizeMax(
        logPolicy({ Type: 'local', Config: { 'max-size': '0', compress: 'false', 'max-file': '1' } }),
        fallback,
      ),
    ).toBe(1);
  });
});
