// The bits of the tar format we read or write by hand.
//
// Reading is tar-stream's job, except for one thing it cannot give us: PAX
// record values as bytes. It decodes them as UTF-8, which mangles binary
// xattrs such as security.capability, so apply.ts re-reads the xattr records
// from the raw PAX block with parsePaxXattrs.
//
// Writing is ours (diff.ts): tar-stream's pack also writes PAX values as
// UTF-8 text and names every PAX-carrying entry "PaxHeader", and a layer tar
// must be byte-for-byte reproducible, so encodeEntryHeader builds the ustar
// header (plus a PAX header when something does not fit) itself.

const BLOCK = 512;
const XATTR_RECORD = 'SCHILY.xattr.';

/** All `SCHILY.xattr.<name>` records of a PAX extended header, values as raw bytes. */
export function parsePaxXattrs(block: Buffer): Map<string, Buffer> {
  const out = new Map<string, Buffer>();
  let pos = 0;
  while (pos < block.length) {
    const space = block.indexOf(0x20, pos);
    if (space < 0) break;
    const len = Number.parseInt(block.toString('latin1', pos, space), 10);
    // Malformed records are left for tar-stream's own parser to judge; we just stop.
    if (!Number.isSafeInteger(len) || len <= space - pos || pos + len > block.length) break;
    const record = block.subarray(space + 1, pos + len - 1); // drops the trailing '\n'
    const eq = record.indexOf(0x3d); // '='
    if (eq > 0) {
      const key = record.toString('utf8', 0, eq);
      if (key.startsWith(XATTR_RECORD)) out.set(key.slice(XATTR_RECORD.length), Buffer.from(record.subarray(eq + 1)));
    }
    pos += len;
  }
  return out;
}

export type EntryType = 'file' | 'link' | 'symlink' | 'char' | 'block' | 'dir' | 'fifo';

const TYPEFLAG: Record<EntryType | 'pax', string> = {
  file: '0',
  link: '1',
  symlink: '2',
  char: '3',
  block: '4',
  dir: '5',
  fifo: '6',
  pax: 'x',
};

export interface EntryHeader {
  /** Relative path, '/'-separated, no leading '/'; directories without the trailing '/' (added here). */
  name: string;
  type: EntryType;
  mode: number;
  uid: number;
  gid: number;
  size: number;
  /** Whole seconds since the epoch (Docker truncates layer mtimes to seconds too). */
  mtime: number;
  linkname?: string;
  devmajor?: number;
  devminor?: number;
  xattrs?: ReadonlyArray<readonly [string, Buffer]>;
}

// biome-ignore lint/suspicious/noControlCharactersInRegex: ASCII is 0x01-0x7f; NUL ends a tar field.
const isAscii = (s: string) => /^[\x01-\x7f]*$/.test(s);

/** Writes `value` as a NUL-terminated octal field, or GNU base-256 when octal cannot hold it. */
function writeNumber(buf: Buffer, offset: number, width: number, value: number): void {
  const octal = Math.trunc(value).toString(8);
  if (value >= 0 && octal.length < width) {
    buf.write(octal.padStart(width - 1, '0'), offset, 'latin1');
    return;
  }
  // Base-256: high bit of the first byte set, big-endian two's complement in the rest.
  let v = BigInt(Math.trunc(value));
  for (let i = width - 1; i > 0; i--) {
    buf[offset + i] = Number(BigInt.asUintN(8, v));
    v >>= 8n;
  }
  buf[offset] = value < 0 ? 0xff : 0x80;
}

/** Splits a long ASCII name into ustar's prefix (≤155) and name (≤100) at a '/', if possible. */
function splitUstarName(name: string): [prefix: string, name: string] | null {
  if (!isAscii(name)) return null;
  if (name.length <= 100) return ['', name];
  for (let i = name.indexOf('/'); i >= 0; i = name.indexOf('/', i + 1)) {
    if (i > 155) break;
    if (name.length - i - 1 <= 100 && i > 0 && i < name.length - 1) return [name.slice(0, i), name.slice(i + 1)];
  }
  return null;
}

function ustarBlock(h: {
  name: string;
  prefix: string;
  typeflag: string;
  mode: number;
  uid: number;
  gid: number;
  size: number;
  mtime: number;
  linkname: string;
  devmajor: number;
  devminor: number;
}): Buffer {
  const buf = Buffer.alloc(BLOCK);
  buf.write(h.name, 0, 100, 'utf8');
  writeNumber(buf, 100, 8, h.mode);
  writeNumber(buf, 108, 8, h.uid);
  writeNumber(buf, 116, 8, h.gid);
  writeNumber(buf, 124, 12, h.size);
  writeNumber(buf, 136, 12, h.mtime);
  buf.write(h.typeflag, 156, 'latin1');
  buf.write(h.linkname, 157, 100, 'utf8');
  buf.write('ustar\x0000', 257, 'latin1');
  writeNumber(buf, 329, 8, h.devmajor);
  writeNumber(buf, 337, 8, h.devminor);
  buf.write(h.prefix, 345, 155, 'utf8');
  buf.fill(0x20, 148, 156); // the checksum is computed with its own field as spaces
  let sum = 0;
  for (let i = 0; i < BLOCK; i++) sum += buf[i]!;
  buf.write(`${sum.toString(8).padStart(6, '0')}\0 `, 148, 'latin1');
  return buf;
}

/** One PAX record: "<len> <key>=<value>\n", where <len> counts the whole record including itself. */
function paxRecord(key: string, value: Buffer): Buffer {
  const body = Buffer.concat([Buffer.from(` ${key}=`, 'utf8'), value, Buffer.from('\n')]);
  let len = body.length + 1;
  while (String(len).length + body.length !== len) len = String(len).length + body.length;
  return Buffer.concat([Buffer.from(String(len), 'latin1'), body]);
}

const padding = (size: number): Buffer => Buffer.alloc((BLOCK - (size % BLOCK)) % BLOCK);

/** Zero bytes that bring an entry body of `size` bytes to a block boundary. */
export const bodyPadding = padding;

/** The two zero blocks that end an archive. */
export const endOfArchive = (): Buffer => Buffer.alloc(2 * BLOCK);

/** The header block(s) of one entry: a PAX header first when a field does not fit ustar. */
export function encodeEntryHeader(h: EntryHeader): Buffer {
  const name = h.type === 'dir' ? `${h.name}/` : h.name;
  const linkname = h.linkname ?? '';
  const records: Buffer[] = [];
  const split = splitUstarName(name);
  if (!split) records.push(paxRecord('path', Buffer.from(name, 'utf8')));
  const linkFits = isAscii(linkname) && linkname.length <= 100;
  if (!linkFits) records.push(paxRecord('linkpath', Buffer.from(linkname, 'utf8')));
  for (const [key, value] of h.xattrs ?? []) records.push(paxRecord(XATTR_RECORD + key, value));

  const main = ustarBlock({
    name: split ? split[1] : asciiFallback(name, 100),
    prefix: split ? split[0] : '',
    typeflag: TYPEFLAG[h.type],
    mode: h.mode,
    uid: h.uid,
    gid: h.gid,
    size: h.size,
    mtime: h.mtime,
    linkname: linkFits ? linkname : asciiFallback(linkname, 100),
    devmajor: h.devmajor ?? 0,
    devminor: h.devminor ?? 0,
  });
  if (records.length === 0) return main;

  const pax = Buffer.concat(records);
  const paxHeader = ustarBlock({
    name: asciiFallback(`PaxHeaders/${name.replace(/\/$/, '').split('/').pop() ?? ''}`, 100),
    prefix: '',
    typeflag: TYPEFLAG.pax,
    mode: 0o644,
    uid: 0,
    gid: 0,
    size: pax.length,
    mtime: h.mtime,
    linkname: '',
    devmajor: 0,
    devminor: 0,
  });
  return Buffer.concat([paxHeader, pax, padding(pax.length), main]);
}

/** What readers that ignore PAX see instead of a name that did not fit: its ASCII, truncated. */
function asciiFallback(s: string, max: number): string {
  // biome-ignore lint/suspicious/noControlCharactersInRegex: ASCII is 0x01-0x7f; NUL ends a tar field.
  return s.replace(/[^\x01-\x7f]/g, '_').slice(0, max);
}
