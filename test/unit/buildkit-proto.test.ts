import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { isDeepStrictEqual } from 'node:util';
import { describe, expect, it } from 'vitest';
import * as m from '../../src/api/buildkit/proto/messages.js';
import { decode, encode, type MessageType, type Msg } from '../../src/api/buildkit/proto/wire.js';
import { ROOT } from '../harness/daemon.js';

// Every gRPC message buildx v0.10.5 and dockerd 20.10 exchanged in the recordings of
// fixtures/buildkit (docs/buildkit/protocol.md), as bytes: decoded by berth's tables and
// encoded again, each must come out byte for byte as gogo's code wrote it. The codec drops
// fields it has no name for, so a field missing from a table fails here.
const TYPES: Record<string, [MessageType, MessageType]> = {
  '/moby.buildkit.v1.Control/ListWorkers': [m.ListWorkersRequest, m.ListWorkersResponse],
  '/moby.buildkit.v1.Control/Info': [m.InfoRequest, m.InfoResponse],
  '/moby.buildkit.v1.Control/DiskUsage': [m.DiskUsageRequest, m.DiskUsageResponse],
  '/moby.buildkit.v1.Control/Prune': [m.PruneRequest, m.UsageRecord],
  '/moby.buildkit.v1.Control/Solve': [m.SolveRequest, m.SolveResponse],
  '/moby.buildkit.v1.Control/Status': [m.StatusRequest, m.StatusResponse],
  '/moby.buildkit.v1.frontend.LLBBridge/Ping': [m.PingRequest, m.PongResponse],
  '/moby.buildkit.v1.frontend.LLBBridge/Solve': [m.GatewaySolveRequest, m.GatewaySolveResponse],
  '/moby.buildkit.v1.frontend.LLBBridge/Return': [m.ReturnRequest, m.ReturnResponse],
  '/moby.filesync.v1.FileSync/DiffCopy': [m.Packet, m.Packet],
  '/grpc.health.v1.Health/Check': [m.HealthCheckRequest, m.HealthCheckResponse],
};

interface Recorded {
  file: string;
  path: string;
  request: boolean;
  hex: string;
  decoded: string;
}

const DIR = path.join(ROOT, 'fixtures', 'buildkit');
const recorded: Recorded[] = readdirSync(DIR)
  .filter((f) => f.endsWith('.jsonl'))
  .flatMap((file) =>
    readFileSync(path.join(DIR, file), 'utf8')
      .split('\n')
      .filter((l) => l.includes('"grpc-msg"'))
      .map((l) => ({ file, ...(JSON.parse(l) as Omit<Recorded, 'file'>) })),
  );
const typed = recorded.filter((r) => TYPES[r.path]);
const typeOf = (r: Recorded) => TYPES[r.path]![r.request ? 0 : 1];

describe('BuildKit protobuf messages', () => {
  it('the recordings hold messages of every type in the table', () => {
    expect(new Set(typed.map((r) => r.path))).toEqual(new Set(Object.keys(TYPES)));
    expect(typed.length).toBeGreaterThan(500);
  });

  it('encodes every recorded answer back to its bytes, and every request to as many', () => {
    const differ: string[] = [];
    for (const r of typed) {
      const bytes = Buffer.from(r.hex, 'hex');
      const read = decode(typeOf(r), bytes);
      const again = encode(typeOf(r), read);
      // buildx's requests write map entries in Go's map order (random); the answers, which berth
      // will write, are dockerd's gogo code's: entries sorted. A dropped field shortens either.
      const same = r.request
        ? again.length === bytes.length && isDeepStrictEqual(decode(typeOf(r), again), read)
        : again.equals(bytes);
      if (!same)
        differ.push(`${r.file} ${r.path} ${r.request ? 'request' : 'answer'}: ${r.hex} → ${again.toString('hex')}`);
    }
    expect(differ).toEqual([]);
  });

  it('reads the fields as dockerd and buildx wrote them', () => {
    const first = (p: string, request: boolean) => {
      const r = typed.find((x) => x.path === p && x.request === request)!;
      return { got: decode(typeOf(r), Buffer.from(r.hex, 'hex')), want: JSON.parse(r.decoded) as Msg };
    };
    const workers = first('/moby.buildkit.v1.Control/ListWorkers', false);
    expect(workers.got).toEqual(workers.want);
    const pong = first('/moby.buildkit.v1.frontend.LLBBridge/Ping', false);
    expect(pong.got).toMatchObject(pong.want);

    // A file's modification time in nanoseconds is past 2^53: read exactly, as a bigint.
    const stat = typed.find(
      (x) => x.path.endsWith('FileSync/DiffCopy') && !x.request && x.decoded.includes('modTime'),
    )!;
    const packet = decode(m.Packet, Buffer.from(stat.hex, 'hex')) as { stat: Msg };
    expect(packet.stat.modTime).toBe(BigInt(/"modTime": (\d+)/.exec(stat.decoded)![1]!));
    expect(packet.stat.path).toBe(JSON.parse(stat.decoded).stat.path);
  });

  it('refuses what is no message, and skips the fields it does not know', () => {
    expect(() => decode(m.StatusRequest, Buffer.from([0x0a, 0x05, 0x61]))).toThrow(/runs past the end/);
    expect(() =>
      decode(m.StatusRequest, Buffer.from([0x10, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01])),
    ).toThrow(/too long/);
    expect(() => decode(m.StatusRequest, Buffer.from([0x0b]))).toThrow(/wire type 3/);
    // Field 9, a varint, then Ref: a newer client's field costs nothing.
    const withUnknown = Buffer.concat([Buffer.from([0x48, 0x96, 0x01]), encode(m.StatusRequest, { Ref: 'abc' })]);
    expect(decode(m.StatusRequest, withUnknown)).toEqual({ Ref: 'abc' });
    // A map's keys are the peer's: __proto__ is a key like any other.
    const attrs = decode(
      m.SolveResponse,
      encode(m.SolveResponse, { ExporterResponse: { ['__proto__']: 'x', a: 'b' } }),
    );
    expect(Object.entries(attrs.ExporterResponse as object)).toEqual([
      ['__proto__', 'x'],
      ['a', 'b'],
    ]);
    // Negative 32- and 64-bit numbers go as ten-byte varints and come back.
    const t = { seconds: -5n, nanos: -1 };
    expect(encode(m.Timestamp, t).length).toBe(22);
    expect(decode(m.Timestamp, encode(m.Timestamp, t))).toEqual(t);
  });
});
