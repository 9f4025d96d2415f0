// Docker's `filters` query parameter: JSON of {"key": ["v", …]} or the older
// {"key": {"v": true}} form.
import { invalidParameter } from '../../errors.js';
import type { Filters } from '../../engine/index.js';

export function parseFilters(raw: string | undefined): Filters {
  if (raw === undefined || raw === '') return {};
  let json: unknown;
  try {
    json = JSON.parse(raw);
  } catch {
    throw invalidParameter(`invalid filters: ${JSON.stringify(raw)} is not JSON`);
  }
  if (typeof json !== 'object' || json === null || Array.isArray(json))
    throw invalidParameter('invalid filters: expected a JSON object');
  const out: Filters = {};
  for (const [k, v] of Object.entries(json)) {
    if (Array.isArray(v) && v.every((x) => typeof x === 'string')) out[k] = v;
    else if (typeof v === 'object' && v !== null && Object.values(v).every((x) => typeof x === 'boolean')) {
      out[k] = Object.entries(v)
        .filter(([, b]) => b)
        .map(([s]) => s);
    } else throw invalidParameter(`invalid filters: values of "${k}" must be a list of strings`);
  }
  return out;
}
