// conmon's k8s-file records → Docker's json-file lines (runtime/jsonfile.ts),
// against the lines dockerd 20.10.24 wrote for the same output
// (fixtures/logs/dockerd-json-file.json: the bytes below are its printf's).
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { JsonLineWriter, RecordConverter, rfc3339Nano } from '../../src/engine/runtime/jsonfile.js';

const FIXTURE = JSON.parse(
  readFileSync(path.join(import.meta.dirname, '../../fixtures/logs/dockerd-json-file.json'), 'utf8'),
) as { lines: string[] };

const bytes = (s: string) => Buffer.from(s, 'latin1');
const record = (time: string, stream: string, tag: string, content: Buffer) =>
  Buffer.concat([bytes(`${time} ${stream} ${tag} `), content]);

function convert(records: Buffer[]): string[] {
  const w = new JsonLineWriter();
  const c = new RecordConverter(w);
  for (const r of records) c.push(r);
  return w.take().toString('utf8').split('\n').filter(Boolean);
}

describe('json-file lines', () => {
  it("are dockerd's, byte for byte, for escapes, invalid UTF-8, U+2028/9 and a last line without newline", () => {
    const out = bytes(
      'a<b>&"q\\ \t|\x01|\x08|\x0c|\x1b[1m|\x7f|\xc3\xa9|\xff|\xc0\x80|\xed\xa0\x80|\xf4\x90\x80\x80|\xe2\x80\xa8|\xe2\x80\xa9|\xf0\x9f\x98\x80|\r',
    );
    const got = convert([
      record('2026-11-28T08:12:43.421785809+00:00', 'stderr', 'F', bytes('e<r>r\t\xe2\x82')),
      record('2026-11-28T08:12:43.422049583+00:00', 'stdout', 'F', out),
      record('2026-11-28T08:12:43.470503376+00:00', 'stdout', 'P', bytes('\xe2\x82nonl')),
    ]);
    expect(got).toEqual(FIXTURE.lines);
  });

  it("give the time in UTC as Go's RFC3339Nano (trailing zeros dropped) and leave out an empty log", () => {
    expect(rfc3339Nano(1_795_939_200_100_000_000n)).toBe('2026-11-29T08:00:00.1Z');
    expect(rfc3339Nano(1_795_939_200_000_000_000n)).toBe('2026-11-29T08:00:00Z');
    const got = convert([
      record('2026-11-29T09:00:00.000000000+01:00', 'stdout', 'P', bytes('')),
      record('2026-11-29T09:00:00.000000000+01:00', 'stdout', 'F', bytes('')),
    ]);
    expect(got).toEqual([
      '{"stream":"stdout","time":"2026-11-29T08:00:00Z"}',
      '{"log":"\\n","stream":"stdout","time":"2026-11-29T08:00:00Z"}',
    ]);
  });

  it('are one per record, malformed records none, whether or not the time is the last one', () => {
    const t = '2026-11-28T08:12:43.5+00:00';
    const got = convert([
      record(t, 'stdout', 'F', bytes('one')),
      bytes(`${t} stdxxx F bad stream`),
      bytes(`${t} stdout X bad tag`),
      bytes(`${t} stdout`),
      bytes('garbage'),
      record(t, 'stderr', 'P', bytes('two')),
      record(t, 'stdout', 'F', bytes('three')),
    ]);
    expect(got).toEqual([
      '{"log":"one\\n","stream":"stdout","time":"2026-11-28T08:12:43.5Z"}',
      '{"log":"two","stream":"stderr","time":"2026-11-28T08:12:43.5Z"}',
      '{"log":"three\\n","stream":"stdout","time":"2026-11-28T08:12:43.5Z"}',
    ]);
  });
});
