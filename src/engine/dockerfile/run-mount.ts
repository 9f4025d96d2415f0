// `RUN --mount=…` (Dockerfile 1.2+): one flag's comma-separated fields into a
// typed mount, checked as BuildKit's instructions.parseMount checks them and
// in its words. The builder expands each value with the step's environment
// before it is read (the `expand` given); defaults that depend on the build
// (a secret's target, an ssh socket's number) are the builder's.
import { invalidParameter } from '../../errors.js';

export type MountType = 'bind' | 'cache' | 'tmpfs' | 'secret' | 'ssh';
export type CacheSharing = 'shared' | 'private' | 'locked';

export interface RunMount {
  type: MountType;
  /** A stage's name or index, or an image (bind, cache). */
  from?: string;
  source?: string;
  target?: string;
  readOnly: boolean;
  /** tmpfs size in bytes. */
  size?: number;
  /** The cache's, secret's or ssh agent's id. */
  id?: string;
  sharing?: CacheSharing;
  required: boolean;
  mode?: number;
  uid?: number;
  gid?: number;
}

const TYPES: readonly MountType[] = ['bind', 'cache', 'tmpfs', 'secret', 'ssh'];
const SHARING: readonly CacheSharing[] = ['shared', 'private', 'locked'];
const bad = (m: string) => invalidParameter(m);

/** Go's encoding/csv on one record: commas separate fields, `"…"` quotes one (`""` is a quote in it). */
export function csvFields(s: string): string[] {
  const out: string[] = [];
  let i = 0;
  for (;;) {
    let field = '';
    if (s[i] === '"') {
      i++;
      for (;;) {
        if (i >= s.length) throw bad(`failed to parse csv mounts: extraneous or missing " in quoted-field`);
        if (s[i] === '"') {
          if (s[i + 1] === '"') {
            field += '"';
            i += 2;
            continue;
          }
          i++;
          break;
        }
        field += s[i++];
      }
      if (i < s.length && s[i] !== ',')
        throw bad(`failed to parse csv mounts: extraneous or missing " in quoted-field`);
    } else {
      const end = s.indexOf(',', i);
      field = s.slice(i, end < 0 ? s.length : end);
      i = end < 0 ? s.length : end;
    }
    out.push(field);
    if (i >= s.length) return out;
    i++; // the comma
  }
}

/** go-units' RAMInBytes: `64m`, `1g`, `512k`, bytes without a unit (binary multiples, case-insensitive, optional `b`/`ib`). */
export function ramInBytes(s: string): number {
  const m = /^\s*(\d+(?:\.\d+)?)\s*([kmgtp]?)(i?b)?\s*$/i.exec(s);
  if (!m) throw bad(`invalid size: '${s}'`);
  const pow = ['', 'k', 'm', 'g', 't', 'p'].indexOf((m[2] ?? '').toLowerCase());
  return Math.floor(Number(m[1]) * 1024 ** pow);
}

const parseBool = (key: string, v: string): boolean => {
  const l = v.toLowerCase();
  if (['1', 't', 'true'].includes(l)) return true;
  if (['0', 'f', 'false'].includes(l)) return false;
  throw bad(`invalid value for ${key}: ${v}`);
};

const parseUint = (key: string, v: string, radix: 8 | 10): number => {
  const ok = radix === 8 ? /^[0-7]+$/.test(v) : /^\d+$/.test(v);
  const n = Number.parseInt(v, radix);
  if (!ok || n > 0xffffffff) throw bad(`invalid value ${v} for ${key}`);
  return n;
};

/** One `--mount` value, each field's value expanded by `expand` first. */
export function parseMount(value: string, expand: (w: string) => string = (w) => w): RunMount {
  const m: RunMount = { type: 'bind', readOnly: true, required: false };
  let roAuto = true;
  for (const field of csvFields(value)) {
    const eq = field.indexOf('=');
    const key = (eq < 0 ? field : field.slice(0, eq)).toLowerCase();
    if (eq < 0) {
      if (key === 'readonly' || key === 'ro') [m.readOnly, roAuto] = [true, false];
      else if (key === 'readwrite' || key === 'rw') [m.readOnly, roAuto] = [false, false];
      else if (key === 'required' && (m.type === 'secret' || m.type === 'ssh')) m.required = true;
      else if (key === 'required') throw bad(`unexpected key '${key}' for mount type '${m.type}'`);
      else throw bad(`invalid field '${field}' must be a key=value pair`);
      continue;
    }
    const v = expand(field.slice(eq + 1));
    switch (key) {
      case 'type': {
        const t = v.toLowerCase() as MountType;
        if (!TYPES.includes(t)) throw bad(`unsupported mount type "${v}"`);
        m.type = t;
        break;
      }
      case 'from':
        m.from = v;
        break;
      case 'source':
      case 'src':
        m.source = v;
        break;
      case 'target':
      case 'dst':
      case 'destination':
        m.target = v;
        break;
      case 'readonly':
      case 'ro':
        m.readOnly = parseBool(key, v);
        roAuto = false;
        break;
      case 'readwrite':
      case 'rw':
        m.readOnly = !parseBool(key, v);
        roAuto = false;
        break;
      case 'required':
        if (m.type !== 'secret' && m.type !== 'ssh') throw bad(`unexpected key '${key}' for mount type '${m.type}'`);
        m.required = parseBool(key, v);
        break;
      case 'size':
        if (m.type !== 'tmpfs') throw bad(`unexpected key '${key}' for mount type '${m.type}'`);
        try {
          m.size = ramInBytes(v);
        } catch {
          throw bad(`invalid value for ${key}: ${v}`);
        }
        break;
      case 'id':
        m.id = v;
        break;
      case 'sharing': {
        const s = v.toLowerCase() as CacheSharing;
        if (!SHARING.includes(s)) throw bad(`unsupported sharing value "${v}"`);
        m.sharing = s;
        break;
      }
      case 'mode':
        m.mode = parseUint('mode', v, 8);
        break;
      case 'uid':
        m.uid = parseUint('uid', v, 10);
        break;
      case 'gid':
        m.gid = parseUint('gid', v, 10);
        break;
      case 'env':
        // A secret as an environment variable would be written into the build container's record.
        throw bad(`mount key 'env' is not supported by berth's builder`);
      default:
        throw bad(`unexpected key '${key}' in '${field}'`);
    }
  }
  if (m.type !== 'secret' && m.type !== 'ssh' && m.type !== 'cache') {
    for (const k of ['mode', 'uid', 'gid'] as const)
      if (m[k] !== undefined) throw bad(`${k} not allowed for "${m.type}" type mounts`);
  }
  if (roAuto) m.readOnly = m.type !== 'cache' && m.type !== 'tmpfs';
  if (m.type === 'secret') {
    if (m.from !== undefined) throw bad('secret mount should not have a from');
    if (m.sharing) throw bad('secret mount should not define sharing');
    if (!m.source && !m.target && !m.id) throw bad('invalid secret mount. one of source, target required');
    if (m.source && m.id) throw bad("both source and id can't be set");
  }
  if (m.sharing && m.type !== 'cache') throw bad(`invalid cache sharing set for ${m.type} mount`);
  return m;
}

/** The mount as the step's cache key and history know it: its options, never a secret's value. */
export function mountKey(m: RunMount): string {
  const parts: string[] = [`type=${m.type}`];
  for (const k of ['id', 'target', 'from', 'source', 'sharing', 'size', 'mode', 'uid', 'gid'] as const)
    if (m[k] !== undefined) parts.push(`${k}=${k === 'mode' ? m[k]!.toString(8) : m[k]}`);
  if (m.readOnly) parts.push('ro');
  if (m.required) parts.push('required');
  return parts.join(',');
}
