// Layer tars built in memory for tests, with tar-stream's pack: names are
// written exactly as given (hostile ones included).
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
