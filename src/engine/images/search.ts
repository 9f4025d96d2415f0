// `GET /images/search`: dockerd's term, limit and filter rules
// (daemon/pkg/registry/search.go) around the index's v1 search API
// (registry/search.ts).
import { invalidParameter } from '../../errors.js';
import { boolFilter, checkFilters, type Filters } from '../filters.js';
import type { AuthConfig } from '../registry/auth.js';
import type { RegistryClient } from '../registry/client.js';
import type { SearchResult } from '../registry/search.js';

const DEFAULT_LIMIT = 25;
const FILTERS = ['is-automated', 'is-official', 'stars'] as const;

export interface SearchOptions {
  term: string;
  /** 0 or absent: 25. */
  limit?: number;
  filters?: Filters;
  auth?: AuthConfig | undefined;
  signal?: AbortSignal;
}

/** `host/rest` when the first part names a host (has `.` or `:`, or is localhost); else Docker Hub. */
export function splitSearchTerm(term: string): { index: string; remote: string } {
  const slash = term.indexOf('/');
  const first = slash === -1 ? '' : term.slice(0, slash);
  if (slash === -1 || !(first.includes('.') || first.includes(':') || first === 'localhost')) {
    return { index: 'docker.io', remote: term };
  }
  const index = first === 'index.docker.io' ? 'docker.io' : first;
  return { index, remote: term.slice(slash + 1) };
}

/** The highest `stars=N` asked for (dockerd keeps the largest). */
function minStars(filters: Filters): number {
  let stars = 0;
  for (const v of filters.stars ?? []) {
    if (!/^[+-]?\d+$/.test(v))
      throw invalidParameter(`invalid filter 'stars=${v}': strconv.Atoi: parsing "${v}": invalid syntax`);
    stars = Math.max(stars, Number(v));
  }
  return stars;
}

export async function searchImages(registry: RegistryClient, opts: SearchOptions): Promise<SearchResult[]> {
  const filters = opts.filters ?? {};
  checkFilters(filters, FILTERS);
  // is_automated is deprecated and always false: asking for automated images finds none.
  if (boolFilter(filters, 'is-automated')) return [];
  const official = boolFilter(filters, 'is-official');
  const stars = minStars(filters);
  if (opts.term.includes('://'))
    throw invalidParameter(`invalid repository name: repository name (${opts.term}) should not have a scheme`);
  const limit = opts.limit || DEFAULT_LIMIT;
  if (limit < 1 || limit > 100) throw invalidParameter(`limit ${limit} is outside the range of [1, 100]`);
  const { index, remote } = splitSearchTerm(opts.term);
  const term = index === 'docker.io' ? remote.replace(/^library\//, '') : remote;
  const results = await registry.search({ host: index, term, limit, auth: opts.auth, signal: opts.signal });
  return results
    .filter((r) => official === undefined || r.is_official === official)
    .filter((r) => r.star_count >= stars)
    .map((r) => ({ ...r, is_automated: false }));
}
