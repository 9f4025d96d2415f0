// GET /images/search: the v1 search API of the term's registry. The happy path
// runs against a loopback v1 index (test/harness/search-index.ts) that stands in
// for Docker Hub's index, which has no self-hostable implementation; a real
// registry (CNCF distribution, no v1 API) gets a clear Docker-shaped error.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { useEnv } from '../harness/env.js';
import { SAMPLE_RESULTS, startSearchIndex, type SearchIndex } from '../harness/search-index.js';

const ctx = useEnv();
let index: SearchIndex;

beforeAll(async () => {
  index = await startSearchIndex(SAMPLE_RESULTS);
});
afterAll(async () => {
  await index?.stop();
});

const q = encodeURIComponent;
const search = (term: string, extra = '', headers?: Record<string, string>) =>
  ctx.daemon.request('GET', `/images/search?term=${q(term)}${extra}`, headers ? { headers } : {});
const filters = (f: Record<string, string[]>) => `&filters=${q(JSON.stringify(f))}`;

describe('GET /images/search', () => {
  it('returns what the index found, in Docker shape, asking for 25 by default', async () => {
    const r = await search(`${index.host}/busybox`);
    expect(r.status).toBe(200);
    expect(r.json).toEqual(SAMPLE_RESULTS.map((x) => ({ ...x, is_automated: false })));
    expect(index.searches.at(-1)).toMatchObject({ q: 'busybox', n: '25' });
  });

  it('passes the limit and applies the filters as dockerd', async () => {
    await search(`${index.host}/busybox`, '&limit=2');
    expect(index.searches.at(-1)).toMatchObject({ n: '2' });
    const official = await search(`${index.host}/busybox`, filters({ 'is-official': ['true'] }));
    expect(official.json.map((x: { name: string }) => x.name)).toEqual(['busybox']);
    const stars = await search(`${index.host}/busybox`, filters({ stars: ['10', '3'] }));
    expect(stars.json.map((x: { name: string }) => x.name)).toEqual(['busybox', 'someone/busybox-tools']);
    // is_automated is deprecated: always false, so asking for automated images finds none.
    expect((await search(`${index.host}/busybox`, filters({ 'is-automated': ['true'] }))).json).toEqual([]);
  });

  it('sends the X-Registry-Auth credentials to the index as Basic auth', async () => {
    const auth = Buffer.from(JSON.stringify({ username: 'berth', password: 's3cret' })).toString('base64url');
    await search(`${index.host}/busybox`, '', { 'X-Registry-Auth': auth });
    expect(index.searches.at(-1)?.authorization).toBe(`Basic ${Buffer.from('berth:s3cret').toString('base64')}`);
  });

  it('refuses bad limits, filters and terms with 400 and dockerd words', async () => {
    const over = await search(`${index.host}/busybox`, '&limit=101');
    expect(over.status).toBe(400);
    expect(over.json.message).toBe('limit 101 is outside the range of [1, 100]');
    const nan = await search(`${index.host}/busybox`, '&limit=many');
    expect(nan.status).toBe(400);
    expect(nan.json.message).toMatch(/^invalid limit specified/);
    const filter = await search(`${index.host}/busybox`, filters({ label: ['x'] }));
    expect(filter.status).toBe(400);
    expect(filter.json.message).toBe("invalid filter 'label'");
    const stars = await search(`${index.host}/busybox`, filters({ stars: ['many'] }));
    expect(stars.status).toBe(400);
    expect(stars.json.message).toMatch(/^invalid filter 'stars=many'/);
    const scheme = await search(`http://${index.host}/busybox`);
    expect(scheme.status).toBe(400);
    expect(scheme.json.message).toBe(
      `invalid repository name: repository name (http://${index.host}/busybox) should not have a scheme`,
    );
  });

  it('says clearly when the registry does not offer the v1 search API', async () => {
    const r = await search(`${ctx.env.registry.host}/busybox`);
    expect(r.status).toBe(500);
    expect(r.json.message).toBe(
      `unexpected status code 404: http://${ctx.env.registry.host} does not offer the v1 search API (GET /v1/search)`,
    );
  });

  it('reports an index that does not answer', async () => {
    const gone = await startSearchIndex([]);
    await gone.stop();
    const r = await search(`${gone.host}/busybox`);
    expect(r.status).toBe(400);
    expect(r.json.message).toMatch(
      /^invalid registry endpoint "http:\/\/127\.0\.0\.1:\d+\/v1\/"\. HTTPS attempt: .*connection refused\. HTTP attempt: .*connection refused$/,
    );
  });
});
