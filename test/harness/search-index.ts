// A small loopback server speaking the v1 search API (`GET /v1/_ping`,
// `GET /v1/search?q=&n=`) of an index. It stands in for Docker Hub's index
// (index.docker.io), which is unreachable from the tests and has no
// self-hostable implementation (CNCF distribution answers 404 there).
import http from 'node:http';
import type { AddressInfo } from 'node:net';

export interface IndexResult {
  name: string;
  description: string;
  star_count: number;
  is_official: boolean;
  is_automated: boolean;
}

export interface SearchIndex {
  /** '127.0.0.1:PORT' */
  host: string;
  /** Every search request: its query and Authorization header. */
  searches: { q: string | null; n: string | null; authorization?: string | undefined }[];
  stop(): Promise<void>;
}

/** Answers a search with the results whose name contains `q`, up to `n`. */
export async function startSearchIndex(results: IndexResult[]): Promise<SearchIndex> {
  const searches: SearchIndex['searches'] = [];
  const server = http.createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://index');
    if (url.pathname === '/v1/_ping') {
      res.setHeader('X-Docker-Registry-Standalone', 'true');
      return res.end('true');
    }
    if (url.pathname !== '/v1/search') {
      res.statusCode = 404;
      return res.end('not found');
    }
    const q = url.searchParams.get('q');
    const n = url.searchParams.get('n');
    searches.push({ q, n, authorization: req.headers.authorization });
    const hits = results.filter((r) => r.name.includes(q ?? '')).slice(0, Number(n) || 25);
    res.setHeader('Content-Type', 'application/json');
    res.end(JSON.stringify({ query: q, num_results: hits.length, num_pages: 1, page: 1, results: hits }));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    host: `127.0.0.1:${port}`,
    searches,
    stop: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** What the fake index holds in the tests. */
export const SAMPLE_RESULTS: IndexResult[] = [
  { name: 'busybox', description: 'Busybox base image.', star_count: 3200, is_official: true, is_automated: false },
  { name: 'someone/busybox-tools', description: 'Tools.', star_count: 12, is_official: false, is_automated: true },
  { name: 'other/busybox-min', description: '', star_count: 0, is_official: false, is_automated: false },
];
