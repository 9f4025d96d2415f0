// fsutil's Packet protocol received (src/api/buildkit/fsutil.ts): the packets buildx v0.10.5
// sent dockerd in recording 01 (fixtures/buildkit), replayed through berth's receiver, make
// the tar the classic builder takes; a sender's faults end it with an error.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import tarStream from 'tar-stream';
import { describe, expect, it } from 'vitest';
import { receiveTar, type SentEntry, sendTree } from '../../src/api/buildkit/fsutil.js';
import { Deframer } from '../../src/api/buildkit/grpc.js';
import type { CallStatus, ClientCall } from '../../src/api/buildkit/grpc-client.js';
import * as m from '../../src/api/buildkit/proto/messages.js';
import { decode, encode, type Msg } from '../../src/api/buildkit/proto/wire.js';
import { ROOT } from '../harness/daemon.js';

/** A DiffCopy call whose sender says `packets`, in order; what the receiver sends is kept. */
function replay(packets: Msg[]): { call: ClientCall; sent: Msg[] } {
  const sent: Msg[] = [];
  const queue = [...packets];
  const call: ClientCall = {
    send: (p) => sent.push(p),
    end: () => undefined,
    drained: async () => undefined,
    next: async () => queue.shift(),
    status: Promise.resolve<CallStatus>({ code: 0, message: '' }),
    cancel: () => sent.push({ cancelled: true }),
  };
  return { call, sent };
}

async function entries(tar: NodeJS.ReadableStream): Promise<Array<{ header: tarStream.Header; body: string }>> {
  const extract = tarStream.extract();
  tar.on('error', (e) => extract.destroy(e as Error));
  tar.pipe(extract as unknown as NodeJS.WritableStream);
  const out: Array<{ header: tarStream.Header; body: string }> = [];
  for await (const e of extract) {
    const chunks: Buffer[] = [];
    for await (const c of e) chunks.push(c as Buffer);
    out.push({ header: e.header, body: Buffer.concat(chunks).toString() });
  }
  return out;
}

describe('the FileSync receiver', () => {
  it("turns recording 01's context sync into a tar: the file, its mode and its time", async () => {
    const lines = readFileSync(path.join(ROOT, 'fixtures/buildkit/01-build-scratch-copy.jsonl'), 'utf8')
      .split('\n')
      .filter((l) => l.includes('"grpc-msg"'))
      .map((l) => JSON.parse(l) as { path: string; request: boolean; stream: number; conn: number; hex: string });
    // The session's third DiffCopy (dir-name=context, followpaths=a): what buildx sent.
    const streams = [...new Set(lines.filter((l) => l.path.endsWith('FileSync/DiffCopy')).map((l) => l.stream))];
    const sender = lines
      .filter((l) => l.path.endsWith('FileSync/DiffCopy') && l.stream === streams[2] && !l.request)
      .map((l) => decode(m.Packet, Buffer.from(l.hex, 'hex')));
    const { call, sent } = replay(sender);
    const got = await entries(receiveTar(call));
    expect(got.map((e) => [e.header.name, e.body, e.header.mode])).toEqual([['a', 'hello\n', 0o644]]);
    const stat = sender[0]!.stat as { modTime: bigint };
    expect(got[0]!.header.mtime?.getTime()).toBe(Number(stat.modTime / 1_000_000_000n) * 1000);
    // REQ for the file (id 0), then FIN; no other packet.
    expect(sent).toEqual([{ type: m.PacketType.REQ, ID: 0 }, { type: m.PacketType.FIN }]);
  });

  it('refuses a sender that lists a directory after what is in it, and cancels the call', async () => {
    const dir = 0x80000000 | 0o755;
    const { call, sent } = replay([
      { type: 0, stat: { path: 'd/a', mode: 0o644 } },
      { type: 0, stat: { path: 'd', mode: dir } },
      {},
    ]);
    await expect(entries(receiveTar(call))).rejects.toThrow(/"d\/a" is not in a directory listed before it/);
    expect(sent).toEqual([{ cancelled: true }]);
  });

  it('keeps directories, symlinks and hard links, and asks only for regular files', async () => {
    const dir = 0x80000000 | 0o755;
    const link = (1 << 27) | 0o777;
    const { call, sent } = replay([
      { type: 0, stat: { path: 'd', mode: dir } },
      { type: 0, stat: { path: 'd/f', mode: (1 << 23) | 0o755, size: 2n } }, // Go's ModeSetuid
      { type: 0, stat: { path: 'd/h', mode: 0o755, linkname: 'd/f' } },
      { type: 0, stat: { path: 'l', mode: link, linkname: 'd/f' } },
      {},
      { type: 2, ID: 1, data: Buffer.from('hi') },
      { type: 2, ID: 1 },
      { type: 3 },
    ]);
    const got = await entries(receiveTar(call));
    expect(got.map((e) => [e.header.name, e.header.type, e.header.mode, e.header.linkname ?? null, e.body])).toEqual([
      ['d/', 'directory', 0o755, null, ''],
      ['d/f', 'file', 0o4755, null, 'hi'],
      ['d/h', 'link', 0o755, 'd/f', ''],
      ['l', 'symlink', 0o777, 'd/f', ''],
    ]);
    expect(sent).toEqual([{ type: 1, ID: 1 }, { type: 3 }]);
  });

  it('asks for the next files ahead and takes their bytes interleaved, the tar still in walk order', async () => {
    const { call, sent } = replay([
      { type: 0, stat: { path: 'a', mode: 0o644, size: 2n } },
      { type: 0, stat: { path: 'b', mode: 0o644, size: 3n } },
      {},
      { type: 2, ID: 1, data: Buffer.from('bb') },
      { type: 2, ID: 0, data: Buffer.from('a') },
      { type: 2, ID: 1, data: Buffer.from('b') },
      { type: 2, ID: 1 },
      { type: 2, ID: 0, data: Buffer.from('a') },
      { type: 2, ID: 0 },
      { type: 3 },
    ]);
    const got = await entries(receiveTar(call));
    expect(got.map((e) => [e.header.name, e.body])).toEqual([
      ['a', 'aa'],
      ['b', 'bbb'],
    ]);
    expect(sent).toEqual([{ type: 1, ID: 0 }, { type: 1, ID: 1 }, { type: 3 }]);
  });
});

/** Recording 05's FileSend messages (`--output type=local`, dockerd the sender), in order. */
function recording05(): Array<{ request: boolean; hex: string; msg: Msg }> {
  return readFileSync(path.join(ROOT, 'fixtures/buildkit/05-output-local.jsonl'), 'utf8')
    .split('\n')
    .filter((l) => l.includes('"grpc-msg"') && l.includes('FileSend'))
    .map((l) => JSON.parse(l) as { request: boolean; hex: string })
    .map((l) => ({ ...l, msg: decode(m.Packet, Buffer.from(l.hex, 'hex')) }));
}

describe('the FileSend sender (--output type=local)', () => {
  it("sends recording 05's tree as dockerd did: the same STAT bytes, the files asked for, FIN after the client's", async () => {
    const rec = recording05();
    const stats = rec.filter((r) => r.request && r.msg.stat).map((r) => r.msg.stat as Msg);
    const data: Record<string, Buffer> = {};
    for (const r of rec.filter((x) => x.request && x.msg.data)) {
      const stat = stats[Number(r.msg.ID ?? 0)]!;
      data[String(stat.path)] = Buffer.concat([data[String(stat.path)] ?? Buffer.alloc(0), r.msg.data as Buffer]);
    }
    const entries: SentEntry[] = stats.map((st) => {
      const mode = Number(st.mode);
      const kind: SentEntry['kind'] = mode & 0x80000000 ? 'dir' : mode & (1 << 27) ? 'symlink' : 'file';
      return {
        rel: String(st.path),
        kind,
        mode: mode & 0o777,
        uid: 0,
        gid: 0,
        size: kind === 'file' ? Number(st.size ?? 0n) : 0,
        mtimeNs: BigInt((st.modTime as bigint | undefined) ?? 0n),
        ...(st.linkname ? { linkname: String(st.linkname) } : {}),
      };
    });
    // The client's side as recorded: its REQs, then its FIN.
    const { call, sent } = replay(rec.filter((r) => !r.request).map((r) => r.msg));
    await sendTree(call, entries, async (e) => [data[e.rel]!]);
    const hex = sent.map((p) => encode(m.Packet, p).toString('hex'));
    const recorded = rec.filter((r) => r.request).map((r) => r.hex);
    // STATs and the end of the list byte for byte; then each file's DATA (dockerd's 4 workers answered
    // in another order), then FIN.
    expect(hex.slice(0, 6)).toEqual(recorded.slice(0, 6));
    expect(hex.slice(6, -1).sort()).toEqual(recorded.slice(6, -1).sort());
    expect(hex.at(-1)).toBe(recorded.at(-1));
  });
});

describe('gRPC framing', () => {
  it('refuses a message over 16 MiB before reading it', () => {
    const head = Buffer.alloc(5);
    head.writeUInt32BE((16 << 20) + 1, 1);
    expect(() => new Deframer().push(head)).toThrow(/too large/);
  });
});
