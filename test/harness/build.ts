// Build contexts and Dockerfiles shared by the build tests of every client
// (CLI, Python SDK, dockerode, docker-compose, testcontainers) and the raw API
// ones, and a reader for the /build JSON stream. Each scenario is the same for
// every client, so a difference between clients is the client's, not the test's.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll } from 'vitest';
import type { ApiResponse, Daemon } from './daemon.js';
import { type TarEntry, tarOf } from './tar.js';

export type ContextFiles = Record<string, string>;

/** A temp directory holding `files` (relative names, parents made); remove it with removeContext. */
export function contextDir(files: ContextFiles): string {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'berth-ctx-'));
  writeContext(dir, files);
  return dir;
}

/** (Over)writes `files` in an existing context directory. */
export function writeContext(dir: string, files: ContextFiles): void {
  for (const [name, content] of Object.entries(files)) {
    mkdirSync(path.dirname(path.join(dir, name)), { recursive: true });
    writeFileSync(path.join(dir, name), content);
  }
}

export const removeContext = (dir: string) => rmSync(dir, { recursive: true, force: true });

/** A test file's contextDir: each directory it makes is removed after all the file's tests. */
export function contextDirs(): (files: ContextFiles) => string {
  const dirs: string[] = [];
  afterAll(() => {
    for (const d of dirs.splice(0)) removeContext(d);
  });
  return (files) => {
    const d = contextDir(files);
    dirs.push(d);
    return d;
  };
}

/** A context tar of `files` (plain files, mode 0644) plus any raw entries. */
export const contextTar = (files: ContextFiles, raw: TarEntry[] = []): Promise<Buffer> =>
  tarOf([...Object.entries(files).map(([name, body]) => ({ name, body, mode: 0o644 })), ...raw], {
    mtime: new Date('2024-01-01T00:00:00Z'),
  });

export interface BuildRecord {
  stream?: string;
  aux?: { ID?: string };
  error?: string;
  errorDetail?: { code?: number; message?: string };
  [k: string]: unknown;
}

export interface BuildResult {
  response: ApiResponse;
  status: number;
  /** The JSON records, in order (empty when the answer was not a stream). */
  records: BuildRecord[];
  /** Every `stream` record's text joined: what the CLI prints. */
  text: string;
  /** The image id of the last `aux` record, if any. */
  id?: string;
  /** The last record's `error`, if any. */
  error?: string;
}

/** POST /build with `tar` as the body and `query` (a URLSearchParams init) as the query string. */
export async function buildRaw(
  d: Daemon,
  tar: Buffer,
  query: Record<string, string> = {},
  headers: Record<string, string> = {},
): Promise<BuildResult> {
  const qs = new URLSearchParams(query).toString();
  const response = await d.request('POST', `/v1.41/build${qs ? `?${qs}` : ''}`, {
    raw: tar,
    headers: { 'Content-Type': 'application/x-tar', ...headers },
  });
  return parseBuild(response);
}

export function parseBuild(response: ApiResponse): BuildResult {
  const records: BuildRecord[] = [];
  if (response.status === 200) {
    for (const line of response.text.split('\n')) {
      if (line.trim()) records.push(JSON.parse(line) as BuildRecord);
    }
  }
  const text = records.map((r) => r.stream ?? '').join('');
  const id = records.filter((r) => r.aux?.ID).at(-1)?.aux?.ID;
  const error = records.find((r) => r.error)?.error;
  return { response, status: response.status, records, text, id, error };
}

/** The number of `---> Using cache` lines in a build's printed output. */
export const cacheHits = (out: string): number => out.split('\n').filter((l) => l === ' ---> Using cache').length;

/** The step lines ("Step 2/5 : COPY a.txt /a.txt") of a build's printed output. */
export const steps = (out: string): string[] => out.split('\n').filter((l) => /^Step \d+\/\d+ : /.test(l));

// ───────────────────────────── the scenarios ─────────────────────────────
// `base` is the image every stage starts from (the test registry's busybox).

/**
 * Multi-stage: `builder` writes a file, `final` copies it with COPY --from and
 * is the target; the stage after it would fail if it were built.
 */
export const multiStage = (base: string): ContextFiles => ({
  Dockerfile: [
    `FROM ${base} AS builder`,
    'ARG GREETING=hello',
    'RUN echo "$GREETING from the builder stage" > /out.txt',
    '',
    `FROM ${base} AS final`,
    'COPY --from=builder /out.txt /copied.txt',
    'CMD ["cat", "/copied.txt"]',
    '',
    'FROM final AS after-the-target',
    'RUN echo this stage is past the target; exit 7',
    '',
  ].join('\n'),
});
/** What the image of multiStage's target prints when run. */
export const MULTI_STAGE_OUT = 'hello from the builder stage\n';

/** Two COPY steps with a RUN between: a changed b.txt invalidates from step 4 on, a changed a.txt from step 2. */
export const cacheSteps = (base: string): ContextFiles => ({
  Dockerfile: [
    `FROM ${base}`,
    'COPY a.txt /a.txt',
    'RUN cat /a.txt > /ran.txt',
    'COPY b.txt /b.txt',
    'CMD ["cat", "/ran.txt", "/b.txt"]',
    '',
  ].join('\n'),
  'a.txt': 'a-1\n',
  'b.txt': 'b-1\n',
});

/**
 * .dockerignore with Docker's rules: a wildcard, a directory, an exception,
 * `**`. The image lists what COPY . saw.
 */
export const dockerignore = (base: string): ContextFiles => ({
  Dockerfile: [`FROM ${base}`, 'COPY . /ctx/', 'RUN cd /ctx && find . | sort > /listing.txt', ''].join('\n'),
  '.dockerignore': ['# comments are ignored', '*.log', '!keep.log', 'secret', '**/tmp-*', ''].join('\n'),
  'a.txt': 'a\n',
  'x.log': 'ignored\n',
  'keep.log': 'kept by the exception\n',
  'secret/key': 'never copied\n',
  'sub/b.txt': 'b\n',
  'sub/deeper/tmp-1': 'ignored by **\n',
});
/** `find . | sort` in /ctx after COPY . of dockerignore (as dockerd 20.10 + the CLI give it). */
export const DOCKERIGNORE_LISTING = [
  '.',
  './.dockerignore',
  './Dockerfile',
  './a.txt',
  './keep.log',
  './sub',
  './sub/b.txt',
  './sub/deeper',
  '',
].join('\n');

/**
 * ARG before FROM, ARG with a default overridden by a build arg, ENV using it,
 * WORKDIR/COPY/RUN expanding ${}, ${:-} and ${:+}. Build args: BASE_IMAGE
 * (required), DIR=/srv.
 */
export const argEnv = (): ContextFiles => ({
  Dockerfile: [
    'ARG BASE_IMAGE',
    'FROM ${BASE_IMAGE}',
    'ARG DIR=/opt',
    'ENV APP=${DIR}/app NAME=berth',
    'WORKDIR $APP',
    'COPY a.txt ${APP}/',
    'RUN echo "$NAME ${NAME:-x} ${UNSET:-dflt} ${NAME:+alt} $(pwd) $DIR" > /out.txt && ls $APP >> /out.txt',
    'CMD ["cat", "/out.txt"]',
    '',
  ].join('\n'),
  'a.txt': 'a\n',
});
/** What argEnv's image prints with DIR=/srv. */
export const ARG_ENV_OUT = 'berth berth dflt alt /srv/app /srv\na.txt\n';

/** An image with ONBUILD triggers: a COPY from the child's context and a RUN. */
export const onbuildBase = (base: string): ContextFiles => ({
  Dockerfile: [
    `FROM ${base}`,
    'ONBUILD COPY trigger.txt /trigger.txt',
    'ONBUILD RUN echo ran the RUN trigger >> /trigger.txt',
    '',
  ].join('\n'),
});
/** A child of `parent` (built from onbuildBase): its triggers run right after its FROM. */
export const onbuildChild = (parent: string): ContextFiles => ({
  Dockerfile: [`FROM ${parent}`, 'CMD ["cat", "/trigger.txt"]', ''].join('\n'),
  'trigger.txt': "copied from the child's context\n",
});
export const ONBUILD_OUT = "copied from the child's context\nran the RUN trigger\n";

/** A RUN that exits 3 after one that succeeds; the step after it never runs. */
export const failingRun = (base: string): ContextFiles => ({
  Dockerfile: [`FROM ${base}`, 'RUN echo before the failure', 'RUN exit 3', 'RUN echo never', ''].join('\n'),
});
export const FAILING_RUN_ERROR = "The command '/bin/sh -c exit 3' returned a non-zero code: 3";

/** One ARG, consumed; a build arg UNUSED is not. */
export const buildArgs = (base: string): ContextFiles => ({
  Dockerfile: [
    `FROM ${base}`,
    'ARG USED=default',
    'RUN echo "used=$USED" > /used.txt',
    'CMD ["cat", "/used.txt"]',
    '',
  ].join('\n'),
});
export const UNUSED_WARNING = '[Warning] One or more build-args [UNUSED] were not consumed';

/**
 * The containers a daemon holds other than failed RUN steps' (a RUN that
 * exited non-zero keeps its container without forcerm, as with dockerd, for
 * `docker commit` or `docker logs` of it): after the builds of a test file,
 * nothing else may be left.
 */
export async function buildLeftovers(d: Daemon): Promise<{ others: string[]; failedSteps: string[] }> {
  const all = ((await d.request('GET', '/containers/json?all=1')).json ?? []) as {
    Id: string;
    Command: string;
    State: string;
    Status: string;
  }[];
  const failed = (c: (typeof all)[number]) =>
    c.State === 'exited' && !/^Exited \(0\)/.test(c.Status) && /^\/bin\/sh -c .*exit \d/.test(c.Command);
  return {
    others: all.filter((c) => !failed(c)).map((c) => `${c.Id.slice(0, 12)} ${c.Command} ${c.Status}`),
    failedSteps: all.filter(failed).map((c) => c.Command),
  };
}
