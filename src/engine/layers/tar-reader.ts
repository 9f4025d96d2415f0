// A layer tar as it is read: tar-stream's parser with binary xattrs kept raw,
// its failures told apart (ours, the input's, the archive's), and what an
// entry's header means once PAX records are applied (owner, mtime, xattrs).
import type { Readable } from 'node:stream';
import { finished } from 'node:stream';
import * as tarStream from 'tar-stream';
import { invalidParameter, isEngineError, messageOf, systemError, type EngineError } from '../../errors.js';
import { isPrivateXattr } from './overlay.js';
import { parsePaxXattrs } from './tarformat.js';
import { MAX_NAME_BYTES } from './tarpath.js';

/** A tar-stream header as it really is at run time (unknown type flags come out as null). */
export interface TarHeader {
  name: string;
  type: string | null;
  mode: number;
  /** Body length, from the header or its PAX `size` record. */
  size: number;
  uid: number;
  gid: number;
  mtime: Date;
  linkname: string | null;
  devmajor: number;
  devminor: number;
  pax: PaxRecords | null;
}

/** An entry body as tar-stream gives it (a streamx Readable). */
export type EntryBody = AsyncIterable<unknown> & { resume(): unknown };

const RAW_XATTRS = Symbol('berth.rawXattrs');
type PaxRecords = Record<string, string> & { [RAW_XATTRS]?: Map<string, Buffer> };

/**
 * A tar stream parsed as it is read (tar-stream, binary xattrs kept raw), with
 * the first error of its input and of the parser kept: an entry body that dies
 * with the parser only says "Stream was destroyed".
 */
export class TarReader {
  readonly extract = tarStream.extract();
  private inputError: unknown;
  private parseError: unknown;

  constructor(private readonly tar: Readable) {
    keepRawPaxXattrs(this.extract);
    finished(tar, (err) => {
      if (!err) return;
      this.inputError ??= err;
      this.extract.destroy(err);
    });
    this.extract.on('error', (err: unknown) => {
      this.parseError ??= err;
    });
    tar.pipe(this.extract as unknown as NodeJS.WritableStream);
  }

  /**
   * Stops reading after `e`, and says what failed: an engine error as it is,
   * the input's own (reading `what`) when it failed first, else the archive (400).
   */
  fail(e: unknown, what: string): EngineError {
    const error = classify(e, this.inputError, this.parseError, what);
    this.tar.unpipe(this.extract as unknown as NodeJS.WritableStream);
    this.tar.destroy();
    this.extract.destroy();
    return error;
  }
}

/**
 * Our own failures are EngineErrors already (Applier.apply wraps I/O errors);
 * the input's are I/O; anything else came out of tar-stream's parser.
 */
function classify(e: unknown, inputError: unknown, parseError: unknown, what: string): EngineError {
  if (isEngineError(e)) return e;
  if (inputError !== undefined) {
    return isEngineError(inputError)
      ? inputError
      : systemError(`reading ${what}: ${messageOf(inputError)}`, inputError);
  }
  const cause = parseError ?? e;
  return invalidParameter(`Error processing tar file: ${messageOf(cause)}`, cause);
}

/**
 * tar-stream decodes PAX values as UTF-8 text, which corrupts binary xattrs
 * (security.capability). We hook its PAX-block decoder to also keep the raw
 * xattr records beside the decoded ones. If a future tar-stream renames the
 * hook, we fall back to its text values (tests cover binary xattrs).
 */
export function keepRawPaxXattrs(extract: tarStream.Extract): void {
  type Internals = {
    _decodeLongHeader?: (buf: Buffer) => void;
    _header?: { type?: string } | null;
    _pax?: PaxRecords | null;
  };
  const ex = extract as unknown as Internals;
  const decode = ex._decodeLongHeader;
  if (typeof decode !== 'function') return;
  ex._decodeLongHeader = function (this: Internals, buf: Buffer) {
    decode.call(this, buf);
    if (this._header?.type === 'pax-header' && this._pax) {
      Object.defineProperty(this._pax, RAW_XATTRS, { value: parsePaxXattrs(buf), enumerable: false });
    }
  };
}

/** PAX uid/gid win over the header fields, which tar-stream does not apply itself. */
export function owner(h: TarHeader, field: 'uid' | 'gid'): number {
  const pax = h.pax?.[field];
  const id = pax !== undefined ? Number(pax) : h[field];
  if (!Number.isSafeInteger(id) || id < 0 || id > 0xfffffffe) {
    throw invalidParameter(`layer archive entry ${JSON.stringify(h.name)} has an invalid ${field}`);
  }
  return id;
}

/** Seconds since the epoch, with the PAX sub-second precision when present. */
export function mtimeOf(h: TarHeader): number {
  const pax = h.pax?.mtime;
  const t = pax !== undefined ? Number(pax) : h.mtime.getTime() / 1000;
  return Number.isFinite(t) ? t : 0;
}

export function entryXattrs(h: TarHeader): Array<[string, Buffer]> {
  const pax = h.pax;
  if (!pax) return [];
  const raw = pax[RAW_XATTRS];
  const out: Array<[string, Buffer]> = [];
  for (const key of Object.keys(pax)) {
    if (!key.startsWith('SCHILY.xattr.')) continue;
    const name = key.slice('SCHILY.xattr.'.length);
    if (isPrivateXattr(name)) continue;
    if (name === '' || name.includes('\0') || Buffer.byteLength(name) > MAX_NAME_BYTES) {
      throw invalidParameter(`layer archive entry ${JSON.stringify(h.name)} has an invalid xattr name`);
    }
    out.push([name, raw?.get(name) ?? Buffer.from(pax[key]!, 'utf8')]);
  }
  return out;
}
