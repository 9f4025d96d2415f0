// The v1 search API (`GET /v1/search?q=&n=`) of an index, as dockerd asks it
// (daemon/pkg/registry/search*.go): Docker Hub's index directly; any other
// host after a `/v1/_ping` over HTTPS, falling back to plain HTTP only for
// insecure registries. Mirrors never apply. Credentials go as Basic, only to
// the index's own origin (the transport drops them on cross-origin redirects).
import { invalidParameter, systemError } from '../../errors.js';
import { basicCredentials, basicHeader, type AuthConfig } from './auth.js';
import { discard, readBody, TransportError, type HttpResponse, type HttpTransport } from './transport.js';

/** Docker Hub's v1 index, which dockerd asks without a ping. */
export const HUB_INDEX = 'https://index.docker.io';
/** A search answer is small; a larger one is not a search answer. */
const RESULTS_LIMIT = 4 * 1024 * 1024;

export interface SearchResult {
  name: string;
  description: string;
  star_count: number;
  is_official: boolean;
  is_automated: boolean;
}

export interface IndexQuery {
  /** The index's host (`host:port`), or docker.io for Docker Hub's. */
  host: string;
  term: string;
  limit: number;
  auth?: AuthConfig | undefined;
  signal?: AbortSignal | undefined;
}

export interface IndexAccess {
  http: HttpTransport;
  isInsecure(host: string): Promise<boolean>;
  /** Where an operator puts a registry's CA (for the hint in errors). */
  certsDir: string;
}

/** The base URL (scheme and host) to search `host` at, with dockerd's ping and fallback. */
async function indexBase(access: IndexAccess, host: string, signal?: AbortSignal): Promise<string> {
  if (host === 'docker.io') return HUB_INDEX;
  const ping = async (base: string) => {
    // dockerd reads nothing from the answer that matters here: any HTTP answer will do.
    discard(
      await access.http.follow({ method: 'GET', url: new URL(`${base}/v1/_ping`), ...(signal ? { signal } : {}) }),
    );
  };
  try {
    await ping(`https://${host}`);
    return `https://${host}`;
  } catch (e) {
    if (!(e instanceof TransportError)) throw e;
    if (!(await access.isInsecure(host))) {
      throw invalidParameter(
        `invalid registry endpoint https://${host}/v1/: ${e.message}. If this private registry supports only HTTP or HTTPS with an unknown CA certificate, add \`--insecure-registry ${host}\` to the daemon's arguments. In the case of HTTPS, if you have access to the registry's CA certificate, no need for the flag; place the CA certificate at ${access.certsDir}/${host}/ca.crt`,
      );
    }
    try {
      await ping(`http://${host}`);
    } catch (e2) {
      if (!(e2 instanceof TransportError)) throw e2;
      throw invalidParameter(
        `invalid registry endpoint "http://${host}/v1/". HTTPS attempt: ${e.message}. HTTP attempt: ${e2.message}`,
      );
    }
    return `http://${host}`;
  }
}

/** `GET /v1/search` on the index of `host` (docker.io for Docker Hub): its results, unfiltered. */
export async function searchIndex(access: IndexAccess, query: IndexQuery): Promise<SearchResult[]> {
  const { host, term, limit, auth, signal } = query;
  const base = await indexBase(access, host, signal);
  const url = new URL(`${base}/v1/search?q=${encodeURIComponent(term)}&n=${limit}`);
  const creds = basicCredentials(auth);
  let res: HttpResponse;
  try {
    res = await access.http.follow({
      method: 'GET',
      url,
      headers: { 'X-Docker-Token': 'true', ...(creds ? { Authorization: basicHeader(creds) } : {}) },
      ...(signal ? { signal } : {}),
    });
  } catch (e) {
    throw systemError((e as Error).message, e);
  }
  if (res.status !== 200) {
    discard(res);
    // dockerd's words; a registry without the v1 API (CNCF distribution) answers 404: say so.
    const why = res.status === 404 ? `: ${base} does not offer the v1 search API (GET /v1/search)` : '';
    throw systemError(`unexpected status code ${res.status}${why}`);
  }
  try {
    const doc = JSON.parse((await readBody(res, RESULTS_LIMIT, 'search results')).toString('utf8')) as {
      results?: unknown;
    };
    if (!Array.isArray(doc.results) && doc.results != null) throw new Error('results is not a list');
    return ((doc.results ?? []) as Record<string, unknown>[]).map(toResult);
  } catch (e) {
    throw systemError(`error decoding registry search results: ${(e as Error).message}`, e);
  }
}

/** One result in Docker's shape, whatever extra fields the index sent. */
function toResult(r: Record<string, unknown>): SearchResult {
  if (typeof r !== 'object' || r === null) throw new Error('a result is not an object');
  return {
    name: String(r.name ?? ''),
    description: String(r.description ?? ''),
    star_count: Number(r.star_count ?? 0) || 0,
    is_official: r.is_official === true,
    is_automated: r.is_automated === true,
  };
}
