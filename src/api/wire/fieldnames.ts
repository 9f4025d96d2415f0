// Go's encoding/json, which dockerd decodes every body with, matches a key to a
// struct field case-insensitively ("detachKeys" sets DetachKeys: docker-py
// sends that spelling). berth's schemas name Docker's fields exactly, so a
// body's keys are put in the schema's spelling first. Only struct fields fold:
// map keys (Labels, ExposedPorts, Sysctls…) stay as given, as Go keeps them.
import type { z } from 'zod';

type Schema = z.ZodType;
interface Def {
  type: string;
  innerType?: Schema;
  shape?: Record<string, Schema>;
  element?: Schema;
  valueType?: Schema;
  options?: Schema[];
  in?: Schema;
  items?: Schema[];
}

const defOf = (s: Schema) => (s as unknown as { _zod: { def: Def } })._zod.def;

/** Each object schema's field names by their lower case. */
const lowerNames = new WeakMap<object, Map<string, string>>();

function fieldNames(shape: Record<string, Schema>): Map<string, string> {
  let names = lowerNames.get(shape);
  if (!names) {
    names = new Map(Object.keys(shape).map((k) => [k.toLowerCase(), k]));
    lowerNames.set(shape, names);
  }
  return names;
}

/** The object schema a value is read by, through optional, nullable, default and transform wrappers and unions. */
function objectShape(s: Schema): Record<string, Schema> | undefined {
  const d = defOf(s);
  if (d.type === 'object') return d.shape;
  if (d.innerType) return objectShape(d.innerType);
  if (d.type === 'pipe' && d.in) return objectShape(d.in);
  if (d.type === 'union') {
    for (const o of d.options ?? []) {
      const shape = objectShape(o);
      if (shape) return shape;
    }
  }
  return undefined;
}

/** The schema of an array's elements, a record's values, or a tuple's items, through wrappers. */
function childSchema(s: Schema, index: number | string): Schema | undefined {
  const d = defOf(s);
  if (d.type === 'array') return d.element;
  if (d.type === 'record') return d.valueType;
  if (d.type === 'tuple') return typeof index === 'number' ? d.items?.[index] : undefined;
  if (d.innerType) return childSchema(d.innerType, index);
  if (d.type === 'pipe' && d.in) return childSchema(d.in, index);
  if (d.type === 'union') {
    for (const o of d.options ?? []) {
      const child = childSchema(o, index);
      if (child) return child;
    }
  }
  return undefined;
}

/**
 * `value` with every struct key in its schema's spelling, as Go would read it.
 * A key that folds to a field is that field; given twice, the later wins (Go
 * decodes keys in order). Keys no field takes stay as they are.
 */
export function foldFieldNames(schema: Schema, value: unknown): unknown {
  if (typeof value !== 'object' || value === null) return value;
  if (Array.isArray(value)) {
    return value.map((v, i) => {
      const child = childSchema(schema, i);
      return child ? foldFieldNames(child, v) : v;
    });
  }
  const shape = objectShape(schema);
  const entries = Object.entries(value).map(([key, v]): [string, unknown] => {
    if (!shape) {
      const child = childSchema(schema, key);
      return [key, child ? foldFieldNames(child, v) : v];
    }
    const name = Object.hasOwn(shape, key) ? key : (fieldNames(shape).get(key.toLowerCase()) ?? key);
    const field = Object.hasOwn(shape, name) ? shape[name] : undefined;
    return [name, field ? foldFieldNames(field, v) : v];
  });
  // fromEntries defines own properties: a "__proto__" key stays a key.
  return Object.fromEntries(entries);
}
