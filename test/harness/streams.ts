// Reading Docker's multiplexed output (8-byte frame headers) in tests.

/** Splits a multiplexed stream into [stream, text] frames (1 stdout, 2 stderr). */
export function demux(buf: Buffer): [number, string][] {
  const out: [number, string][] = [];
  for (let i = 0; i + 8 <= buf.length; ) {
    const len = buf.readUInt32BE(i + 4);
    out.push([buf[i]!, buf.subarray(i + 8, i + 8 + len).toString()]);
    i += 8 + len;
  }
  return out;
}

/** The text of every frame, in order. */
export const demuxText = (buf: Buffer): string =>
  demux(buf)
    .map(([, t]) => t)
    .join('');
