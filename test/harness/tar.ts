// Layer tars built in memory for tests, with tar-stream's pack: names are
// written exactly as given (hostile ones included).
import { Readable } from 'node:stream';
import * as tarStream from 'tar-stream';

export type TarEntry = Parameters<tarStream.Pack['entry']>[0] & { body?: string | Buffer };

/** A whole tar; entries without an mtime get `mtime` (default the epoch). */
export async function tarOf(entries: TarEntry[], { mtime = new Date(0) }: { mtime?: Date } = {}): Promise<Buffer> {
  const pack = tarStream.pack();
  const chunks: Buffer[] = [];
  const done = (async () => {
    for await (const c of pack) chunks.push(c as Buffer);
  })();
  for (const { body, ...header } of entries) {
    await new Promise<void>((resolve, reject) =>
      pack.entry({ mtime, ...header }, body ?? '', (err) => (err ? reject(err) : resolve())),
    );
  }
  pack.finalize();
  await done;
  return Buffer.concat(chunks);
}

/** Each entry of a tar (whole, or as a stream) as [name, body as text, mode]. */
export async function tarEntries(tar: Buffer | NodeJS.ReadableStream): Promise<Array<[string, string, number]>> {
  const extract = tarStream.extract();
  (Buffer.isBuffer(tar) ? Readable.from([tar]) : tar).pipe(extract as unknown as NodeJS.WritableStream);
  const out: Array<[string, string, number]> = [];
  for await (const e of extract) {
    const chunks: Buffer[] = [];
    for await (const c of e) chunks.push(c as Buffer);
    out.push([e.header.name, Buffer.concat(chunks).toString(), e.header.mode ?? 0]);
  }
  return out;
}
