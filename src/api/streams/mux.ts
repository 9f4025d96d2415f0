// Docker's stdcopy framing: an 8-byte header (stream byte, three zero bytes,
// big-endian uint32 length) before each chunk, when there is no TTY.

export const STDOUT = 1;
export const STDERR = 2;

export function frame(stream: number, payload: Buffer): Buffer {
  const out = Buffer.allocUnsafe(8 + payload.length);
  out[0] = stream;
  out[1] = 0;
  out[2] = 0;
  out[3] = 0;
  out.writeUInt32BE(payload.length, 4);
  payload.copy(out, 8);
  return out;
}

/** The content type dockerd announces for an output stream. */
export const streamContentType = (tty: boolean, apiVersion: string, below: (v: string, max: string) => boolean) =>
  !tty && !below(apiVersion, '1.42')
    ? 'application/vnd.docker.multiplexed-stream'
    : 'application/vnd.docker.raw-stream';
