// ADD of a local archive: whether a source is a tar (plain or compressed, as
// dockerd's isArchivePath tells), and its entries re-encoded relative to the
// destination.
import { constants as C } from 'node:fs';
import { open } from 'node:fs/promises';
import type { Readable } from 'node:stream';
import * as tarStream from 'tar-stream';
import { invalidParameter, isEngineError, messageOf } from '../../errors.js';
import { decompress, peekBytes, SNIFF_BYTES, sniffCompression } from '../layers/compression.js';
import { bodyPadding, encodeEntryHeader, type EntryHeader, type EntryType } from '../layers/tarformat.js';
import { cleanComponents } from '../layers/tarpath.js';
import { READ_CHUNK } from './sources.js';

/**
 * dockerd's isArchivePath: the file, decompressed if it is, starts with a
 * valid tar header (an empty archive or a text file is copied as a file).
 */
export async function isArchive(opened: () => Readable | Promise<Readable>): Promise<boolean> {
  let raw: Readable | undefined;
  try {
    raw = await opened();
    const sniffed = await peekBytes(raw, SNIFF_BYTES);
    const plain = decompress(sniffed.stream, sniffCompression(sniffed.head));
    plain.on('error', () => undefined);
    const head = await peekBytes(plain, 1024).then(
      (p) => p.head,
      () => Buffer.alloc(0),
    );
    plain.destroy();
    return validTarHeader(head);
  } catch {
    return false;
  } finally {
    raw?.destroy();
  }
}

/** A file of a tree on disk, opened without following (its path is resolved already), as a stream closed with it. */
export async function fileStream(abs: string): Promise<Readable> {
  const fh = await open(abs, C.O_RDONLY | C.O_NOFOLLOW | C.O_NONBLOCK);
  return fh.createReadStream({ highWaterMark: READ_CHUNK });
}

/** Go's archive/tar: a first block that is not all zeros and whose checksum holds (signed or unsigned sums). */
function validTarHeader(head: Buffer): boolean {
  if (head.length < 512) return false;
  const block = head.subarray(0, 512);
  if (block.every((b) => b === 0)) return false; // end of archive: nothing in it
  const field = block
    .toString('latin1', 148, 156)
    .replace(/[\0 ]+$/, '')
    .replace(/^[ ]+/, '');
  if (!/^[0-7]+$/.test(field)) return false;
  const want = Number.parseInt(field, 8);
  let unsigned = 0;
  let signed = 0;
  for (let i = 0; i < 512; i++) {
    const b = i >= 148 && i < 156 ? 0x20 : block[i]!;
    unsigned += b;
    signed += b > 127 ? b - 256 : b;
  }
  return want === unsigned || want === signed;
}

/** tar-stream's header, as it is at run time. */
interface ArchiveHeader {
  name: string;
  type: string | null;
  mode: number;
  uid: number;
  gid: number;
  size: number;
  mtime: Date;
  linkname: string | null;
  devmajor: number;
  devminor: number;
}

const ARCHIVE_TYPES: Record<string, EntryType> = {
  file: 'file',
  'contiguous-file': 'file',
  directory: 'dir',
  symlink: 'symlink',
  link: 'link',
  'character-device': 'char',
  'block-device': 'block',
  fifo: 'fifo',
};

/** The entries of a local archive, re-encoded relative to the destination; owners kept, names that climb out refused. */
export async function* archiveEntries(opened: () => Promise<Readable> | Readable, abs: string): AsyncGenerator<Buffer> {
  const raw = await opened();
  const extract = tarStream.extract();
  let parseError: unknown;
  extract.on('error', (e: unknown) => {
    parseError ??= e;
  });
  try {
    const sniffed = await peekBytes(raw, SNIFF_BYTES);
    const plain = decompress(sniffed.stream, sniffCompression(sniffed.head));
    plain.on('error', (e) => extract.destroy(e));
    plain.pipe(extract as unknown as NodeJS.WritableStream);
    for await (const item of extract) {
      const h = item.header as unknown as ArchiveHeader;
      const type = h.type === null ? undefined : ARCHIVE_TYPES[h.type];
      const name = insideName(h.name, 'entry name');
      if (type === undefined || name === '') {
        item.resume();
        continue;
      }
      const mtime = Math.floor(h.mtime.getTime() / 1000);
      const head: EntryHeader = { name, type, mode: h.mode & 0o7777, uid: h.uid, gid: h.gid, mtime, size: 0 };
      if (type === 'symlink') head.linkname = h.linkname ?? '';
      if (type === 'link') head.linkname = insideName(h.linkname ?? '', 'hardlink target');
      if (type === 'char' || type === 'block') Object.assign(head, { devmajor: h.devmajor, devminor: h.devminor });
      if (type !== 'file') {
        item.resume();
        yield encodeEntryHeader(head);
        continue;
      }
      yield encodeEntryHeader({ ...head, size: h.size });
      let n = 0;
      for await (const chunk of item) {
        n += (chunk as Buffer).length;
        yield chunk as Buffer;
      }
      if (n !== h.size) throw invalidParameter(`Error processing tar file(${abs}): unexpected EOF`);
      yield bodyPadding(h.size);
    }
  } catch (e) {
    if (isEngineError(e)) throw e;
    throw invalidParameter(`Error processing tar file: ${messageOf(parseError ?? e)}`, e);
  } finally {
    extract.destroy();
    raw.destroy();
  }
}

/** A name of an archive ADD expands, relative to the destination; one that climbs out is refused, as dockerd's untar. */
function insideName(raw: string, what: string): string {
  const parts: string[] = [];
  for (const c of raw.split('/')) {
    if (c === '' || c === '.') continue;
    if (c !== '..') parts.push(c);
    else if (parts.pop() === undefined)
      throw invalidParameter(`Error processing tar file: invalid ${what} ${JSON.stringify(raw)}`);
  }
  return cleanComponents(parts.join('/'), what).join('/');
}
