// Protocol Buffers' wire format for the few dozen messages of BuildKit's API
// (docs/buildkit/plan.md, "Protobuf by hand"): a message is described by a
// table of its fields, and encode/decode walk the table. What it writes is what
// BuildKit's gogo-generated code writes, byte for byte: fields in number
// order, proto3's zero values left out, a message field written whenever it is
// present (even empty), repeated numbers packed, map entries sorted by key
// with both key and value written. Unknown fields are skipped when read, so a
// newer client's additions cost nothing. 64-bit integers are bigints (fsutil's
// modification times in nanoseconds pass 2^53); 32-bit ones are numbers.
import { invalidParameter } from '../../../errors.js';

export type Scalar = 'string' | 'bytes' | 'bool' | 'int32' | 'uint32' | 'enum' | 'int64' | 'uint64';

/** A map field: its key and value types (keys are strings in every message used here). */
export interface MapOf {
  readonly map: Scalar | MessageType;
}

export type FieldType = Scalar | MessageType | MapOf;

export interface Field {
  readonly no: number;
  readonly name: string;
  readonly type: FieldType;
  readonly repeated: boolean;
}

export interface MessageType {
  readonly name: string;
  /** In field-number order. */
  readonly fields: readonly Field[];
  readonly byNumber: ReadonlyMap<number, Field>;
}

/** A decoded message: field names to values (absent fields are absent). */
export type Msg = Record<string, unknown>;

/** One field's description: `[name, type]`, or `[name, [type]]` for a repeated field. */
export type FieldSpec = readonly [string, FieldType | readonly [Scalar | MessageType]];

/** A message type from its fields by number; a type used before its definition comes as a thunk. */
export function message(name: string, spec: Record<number, FieldSpec>): MessageType {
  const fields = Object.entries(spec)
    .map(([no, [fieldName, t]]): Field => {
      const repeated = Array.isArray(t);
      return {
        no: Number(no),
        name: fieldName,
        type: repeated ? (t as readonly [FieldType])[0] : (t as FieldType),
        repeated,
      };
    })
    .sort((a, b) => a.no - b.no);
  return { name, fields, byNumber: new Map(fields.map((f) => [f.no, f])) };
}

export const mapOf = (value: Scalar | MessageType): MapOf => ({ map: value });

const isMessage = (t: FieldType): t is MessageType => typeof t === 'object' && 'fields' in t;
const isMap = (t: FieldType): t is MapOf => typeof t === 'object' && 'map' in t;

const VARINT = 0;
const FIXED64 = 1;
const LENGTH = 2;
const FIXED32 = 5;

const wireTypeOf = (t: Scalar | MessageType): number =>
  typeof t === 'string' && t !== 'string' && t !== 'bytes' ? VARINT : LENGTH;

// ------------------------------------------------------------------ encoding

class Writer {
  private readonly chunks: Buffer[] = [];
  private pending: number[] = [];

  varint(v: number | bigint): void {
    let n = typeof v === 'bigint' ? BigInt.asUintN(64, v) : v;
    if (typeof n === 'number' && (n < 0 || n > 0x7fffffff)) n = BigInt.asUintN(64, BigInt(n));
    if (typeof n === 'number') {
      while (n > 0x7f) {
        this.pending.push((n & 0x7f) | 0x80);
        n >>>= 7;
      }
      this.pending.push(n);
      return;
    }
    while (n > 0x7fn) {
      this.pending.push(Number(n & 0x7fn) | 0x80);
      n >>= 7n;
    }
    this.pending.push(Number(n));
  }

  tag(no: number, wireType: number): void {
    this.varint(no * 8 + wireType);
  }

  bytes(b: Buffer): void {
    this.varint(b.length);
    this.flush();
    this.chunks.push(b);
  }

  finish(): Buffer {
    this.flush();
    return this.chunks.length === 1 ? this.chunks[0]! : Buffer.concat(this.chunks);
  }

  private flush(): void {
    if (!this.pending.length) return;
    this.chunks.push(Buffer.from(this.pending));
    this.pending = [];
  }
}

/** The message `value` of type `type`, in wire form. */
export function encode(type: MessageType, value: Msg): Buffer {
  const w = new Writer();
  for (const f of type.fields) {
    const v = value[f.name];
    if (v === undefined || v === null) continue;
    if (isMap(f.type)) writeMap(w, f, f.type.map, v as Record<string, unknown>);
    else if (f.repeated) writeRepeated(w, f, f.type, v as unknown[]);
    else writeOne(w, f.no, f.type, v, false);
  }
  return w.finish();
}

function writeRepeated(w: Writer, f: Field, t: Scalar | MessageType, vs: unknown[]): void {
  if (!vs.length) return;
  if (wireTypeOf(t) === VARINT) {
    const packed = new Writer();
    for (const v of vs) packed.varint(scalarNumber(t as Scalar, v));
    w.tag(f.no, LENGTH);
    w.bytes(packed.finish());
    return;
  }
  for (const v of vs) writeOne(w, f.no, t, v, true);
}

function writeMap(w: Writer, f: Field, valueType: Scalar | MessageType, m: Record<string, unknown>): void {
  for (const key of Object.keys(m).sort(compareKeys)) {
    const entry = new Writer();
    writeOne(entry, 1, 'string', key, true);
    writeOne(entry, 2, valueType, m[key], true);
    w.tag(f.no, LENGTH);
    w.bytes(entry.finish());
  }
}

/** Go's sort.Strings: by bytes, not by UTF-16 units. */
const compareKeys = (a: string, b: string): number => Buffer.compare(Buffer.from(a), Buffer.from(b));

/** One value; `always`: written even when it is the zero value (an element of a list or a map). */
function writeOne(w: Writer, no: number, t: Scalar | MessageType, v: unknown, always: boolean): void {
  if (isMessage(t)) {
    w.tag(no, LENGTH);
    w.bytes(encode(t, v as Msg));
    return;
  }
  if (t === 'string' || t === 'bytes') {
    const b = typeof v === 'string' ? Buffer.from(v) : (v as Buffer);
    if (!b.length && !always) return;
    w.tag(no, LENGTH);
    w.bytes(b);
    return;
  }
  const n = scalarNumber(t, v);
  if (!always && (n === 0 || n === 0n)) return;
  w.tag(no, VARINT);
  w.varint(n);
}

function scalarNumber(t: Scalar, v: unknown): number | bigint {
  if (t === 'bool') return v ? 1 : 0;
  if (t === 'int64' || t === 'uint64') return BigInt(v as bigint | number);
  return Number(v);
}

// ------------------------------------------------------------------ decoding

class Reader {
  pos = 0;
  constructor(readonly buf: Buffer) {}

  get done(): boolean {
    return this.pos >= this.buf.length;
  }

  varint(): bigint {
    let result = 0n;
    for (let shift = 0n; shift < 70n; shift += 7n) {
      if (this.pos >= this.buf.length) throw malformed('a varint runs past the end');
      const b = this.buf[this.pos++]!;
      result |= BigInt(b & 0x7f) << shift;
      if (b < 0x80) return BigInt.asUintN(64, result);
    }
    throw malformed('a varint is too long');
  }

  take(n: number): Buffer {
    if (n < 0 || this.pos + n > this.buf.length) throw malformed('a length runs past the end');
    const b = this.buf.subarray(this.pos, this.pos + n);
    this.pos += n;
    return b;
  }

  lengthDelimited(): Buffer {
    return this.take(Number(this.varint()));
  }

  skip(wireType: number): void {
    if (wireType === VARINT) this.varint();
    else if (wireType === FIXED64) this.take(8);
    else if (wireType === LENGTH) this.lengthDelimited();
    else if (wireType === FIXED32) this.take(4);
    else throw malformed(`wire type ${wireType} is not one of proto3's`);
  }
}

const malformed = (what: string) => invalidParameter(`malformed protobuf message: ${what}`);

/** A message of type `type` from its wire form; throws invalidParameter on malformed input. */
export function decode(type: MessageType, buf: Buffer): Msg {
  const r = new Reader(buf);
  const out: Msg = {};
  while (!r.done) {
    const key = r.varint();
    const no = Number(key >> 3n);
    const wireType = Number(key & 7n);
    const f = type.byNumber.get(no);
    if (!f) {
      r.skip(wireType);
      continue;
    }
    if (isMap(f.type)) {
      if (wireType !== LENGTH) throw malformed(`${type.name}.${f.name} is not a map entry`);
      const [k, v] = readEntry(r.lengthDelimited(), f.type.map);
      // Keys are the peer's: no prototype for one named __proto__ to reach.
      out[f.name] ??= Object.create(null);
      (out[f.name] as Record<string, unknown>)[k] = v;
      continue;
    }
    if (f.repeated) {
      out[f.name] ??= [];
      const list = out[f.name] as unknown[];
      if (wireType === LENGTH && wireTypeOf(f.type) === VARINT) {
        const packed = new Reader(r.lengthDelimited());
        while (!packed.done) list.push(fromVarint(f.type as Scalar, packed.varint()));
      } else list.push(readOne(r, f, wireType));
      continue;
    }
    out[f.name] = readOne(r, f, wireType);
  }
  return out;
}

function readEntry(buf: Buffer, valueType: Scalar | MessageType): [string, unknown] {
  const r = new Reader(buf);
  let key = '';
  let value: unknown = zeroOf(valueType);
  while (!r.done) {
    const tag = r.varint();
    const no = Number(tag >> 3n);
    const wireType = Number(tag & 7n);
    if (no === 1 && wireType === LENGTH) key = r.lengthDelimited().toString('utf8');
    else if (no === 2) value = readOne(r, { no: 2, name: 'value', type: valueType, repeated: false }, wireType);
    else r.skip(wireType);
  }
  return [key, value];
}

function zeroOf(t: Scalar | MessageType): unknown {
  if (isMessage(t)) return {};
  if (t === 'string') return '';
  if (t === 'bytes') return Buffer.alloc(0);
  if (t === 'bool') return false;
  return t === 'int64' || t === 'uint64' ? 0n : 0;
}

function readOne(r: Reader, f: Field, wireType: number): unknown {
  const t = f.type as Scalar | MessageType;
  const expected = wireTypeOf(t);
  if (wireType !== expected) throw malformed(`field ${f.name} has wire type ${wireType}, not ${expected}`);
  if (isMessage(t)) return decode(t, r.lengthDelimited());
  if (t === 'string') return r.lengthDelimited().toString('utf8');
  if (t === 'bytes') return Buffer.from(r.lengthDelimited());
  return fromVarint(t, r.varint());
}

function fromVarint(t: Scalar, v: bigint): unknown {
  switch (t) {
    case 'bool':
      return v !== 0n;
    case 'int64':
      return BigInt.asIntN(64, v);
    case 'uint64':
      return v;
    case 'int32':
    case 'enum':
      return Number(BigInt.asIntN(32, v));
    default:
      return Number(BigInt.asUintN(32, v));
  }
}
