// COPY and ADD sources that are not in the context: here-documents (`COPY <<EOF
// /x`), written out as files named as their word for the step's time, and
// ADD --checksum's check of a download, in BuildKit's words.
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { pipeline } from 'node:stream/promises';
import { invalidParameter } from '../../errors.js';
import type { StepContext } from './build-types.js';
import { type CopySource, resolveSources } from './sources.js';

/** Here-documents as sources: files of mode 0644 (BuildKit's), in a directory removed with `temps`. */
export async function inlineSources(
  cx: StepContext,
  contents: ReadonlyArray<{ name: string; data: string }>,
  temps: Array<() => Promise<void>>,
): Promise<CopySource[]> {
  const dir = await mkdtemp(path.join(cx.deps.tmpDir, 'inline-'));
  temps.push(() => rm(dir, { recursive: true, force: true }));
  const out: CopySource[] = [];
  for (const c of contents) {
    const name = path.posix.basename(c.name);
    if (name === '' || name === '.' || name === '..') throw invalidParameter(`invalid heredoc name ${c.name}`);
    await writeFile(path.join(dir, name), c.data, { mode: 0o644 });
    // Never expanded by ADD, as BuildKit copies an inline file as it is.
    out.push(
      ...resolveSources({ root: dir, excluded: () => false, image: true }, [name]).map((s) => ({
        ...s,
        download: true,
      })),
    );
  }
  return out;
}

const DIGEST = /^(sha256|sha384|sha512):([a-f0-9]+)$/;
const HEX_LENGTH: Record<string, number> = { sha256: 64, sha384: 96, sha512: 128 };

/** ADD --checksum applies to one URL source alone, as BuildKit's frontend requires. */
export function checkChecksumUse(checksum: string, patterns: string[], urls: string[], inline: number): void {
  if (patterns.length + inline > 1) throw invalidParameter("checksum can't be specified for multiple sources");
  if (urls.length !== 1) throw invalidParameter('checksum requires HTTP(S) sources');
  const m = DIGEST.exec(checksum);
  if (!m) throw invalidParameter(`invalid checksum digest format`);
  if (m[2]!.length !== HEX_LENGTH[m[1]!]) throw invalidParameter(`invalid checksum digest length`);
}

/** The download's digest against the one asked for: a mismatch fails the step, said as BuildKit says it. */
export async function verifyChecksum(url: string, file: string, checksum: string): Promise<void> {
  const algo = checksum.slice(0, checksum.indexOf(':'));
  const hash = createHash(algo);
  await pipeline(createReadStream(file), hash);
  const got = `${algo}:${hash.digest('hex')}`;
  if (got !== checksum) throw invalidParameter(`digest mismatch for ${url}: ${got} (expected: ${checksum})`);
}
