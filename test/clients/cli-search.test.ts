// `docker search` (the real CLI) through berthd, against a loopback v1 index
// standing in for Docker Hub's (test/harness/search-index.ts); the CLI needs
// `host:port/term` to ask another index than Docker Hub's.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { dockerCli, type Cli } from '../harness/cli.js';
import { useEnv } from '../harness/env.js';
import { SAMPLE_RESULTS, startSearchIndex, type SearchIndex } from '../harness/search-index.js';

const ctx = useEnv();
let docker: Cli;
let index: SearchIndex;

beforeAll(async () => {
  docker = dockerCli(ctx.daemon);
  index = await startSearchIndex(SAMPLE_RESULTS);
});
afterAll(async () => {
  await index?.stop();
});

it('docker search lists what the index found, with its filters', async () => {
  const out = await docker.ok([
    'search',
    '--format',
    '{{.Name}}|{{.StarCount}}|{{.IsOfficial}}',
    `${index.host}/busybox`,
  ]);
  expect(out.trimEnd().split('\n')).toEqual(['busybox|3200|[OK]', 'someone/busybox-tools|12|', 'other/busybox-min|0|']);
  const official = await docker.ok([
    'search',
    '--filter',
    'is-official=true',
    '--format',
    '{{.Name}}',
    `${index.host}/busybox`,
  ]);
  expect(official.trim()).toBe('busybox');
  await docker.ok(['search', '--limit', '2', `${index.host}/busybox`]);
  expect(index.searches.at(-1)).toMatchObject({ q: 'busybox', n: '2' });
});

it('docker search of a registry without the v1 search API fails with a clear message', async () => {
  const r = await docker(['search', `${ctx.env.registry.host}/busybox`]);
  expect(r.code).not.toBe(0);
  expect(r.stderr).toContain('does not offer the v1 search API');
});
