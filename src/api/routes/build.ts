// POST /build (the classic builder), /build/prune and /build/cancel: thin
// translations between Docker's wire shapes and the build service (BuildKit's
// /grpc and /session are in buildkit.ts).
import type { FastifyInstance } from 'fastify';
import { Readable } from 'node:stream';
import { type BuildResources, decodeRegistryConfig, type Engine, stepExitCode } from '../../engine/index.js';
import { invalidParameter, messageOf, systemError } from '../../errors.js';
import { closeOnShutdown } from '../streams/hijack.js';
import { JsonLinesStream } from '../streams/progress.js';
import { allValues, boolValue, intValue, query } from '../wire/forms.js';

const BUILDKIT =
  "BuildKit is not supported by berthd on POST /build: build through buildx (BuildKit's API on /grpc and /session), or with the classic builder (DOCKER_BUILDKIT=0)";

/** A JSON query parameter (`buildargs`, `labels`, `cachefrom`), absent or empty: undefined. */
function jsonParam(raw: string | undefined, name: string): unknown {
  if (raw === undefined || raw === '') return undefined;
  try {
    return JSON.parse(raw);
  } catch (e) {
    throw invalidParameter(`invalid ${name} parameter: ${(e as Error).message}`);
  }
}

function stringMap(raw: string | undefined, name: string, nulls: boolean): Record<string, string | null> {
  const v = jsonParam(raw, name);
  if (v === undefined || v === null) return {};
  if (typeof v !== 'object' || Array.isArray(v))
    throw invalidParameter(`invalid ${name} parameter: expected an object`);
  const out: Record<string, string | null> = {};
  for (const [k, val] of Object.entries(v)) {
    if (val === null && nulls) out[k] = null;
    else if (typeof val === 'string') out[k] = val;
    else throw invalidParameter(`invalid ${name} parameter: the value of ${k} is not a string`);
  }
  return out;
}

export function buildRoutes(app: FastifyInstance, engine: Engine): void {
  /** Running builds by their client-given `buildid`, for /build/cancel. */
  const running = new Map<string, AbortController>();

  app.post('/build', async (req, reply) => {
    // A parameter given twice is read by its first value, as dockerd's Form.Get (docker-py sends `dockerfile` twice).
    const q = Object.fromEntries(
      Object.entries(query(req) as Record<string, unknown>).map(([k, v]) => [k, Array.isArray(v) ? String(v[0]) : v]),
    ) as Record<string, string | undefined>;
    const version = q.version ?? '';
    if (version === '2') throw invalidParameter(BUILDKIT);
    if (version !== '' && version !== '1') throw systemError(`invalid version "${version}"`);
    if (q.isolation && q.isolation !== 'default') throw invalidParameter(`Unsupported isolation: "${q.isolation}"`);
    if (boolValue(q.squash)) throw invalidParameter('squash is only supported with experimental mode');
    if (q.outputs) throw invalidParameter(`outputs are not supported by the classic builder: ${BUILDKIT}`);
    if (q.cgroupparent) throw invalidParameter('cgroupparent is not supported by berthd builds');
    const ulimits = jsonParam(q.ulimits, 'ulimits');
    if (Array.isArray(ulimits) && ulimits.length) throw invalidParameter('ulimits are not supported by berthd builds');
    const cacheFrom = jsonParam(q.cachefrom, 'cachefrom') ?? [];
    if (!Array.isArray(cacheFrom) || cacheFrom.some((c) => typeof c !== 'string'))
      throw invalidParameter('invalid cachefrom parameter: expected an array of strings');
    const resources: BuildResources = {};
    const memory = intValue(q.memory, 'memory');
    if (memory) resources.memory = memory;
    const memswap = intValue(q.memswap, 'memswap');
    if (memswap) resources.memorySwap = memswap;
    const cpuShares = intValue(q.cpushares, 'cpushares');
    if (cpuShares) resources.cpuShares = cpuShares;
    if (q.cpusetcpus) resources.cpusetCpus = q.cpusetcpus;
    const cpuPeriod = intValue(q.cpuperiod, 'cpuperiod');
    if (cpuPeriod) resources.cpuPeriod = cpuPeriod;
    const cpuQuota = intValue(q.cpuquota, 'cpuquota');
    if (cpuQuota) resources.cpuQuota = cpuQuota;
    const shmSize = intValue(q.shmsize, 'shmsize');
    if (shmSize) resources.shmSize = shmSize;
    const auths = decodeRegistryConfig(req.headers['x-registry-config'] as string | undefined);

    const stream = new JsonLinesStream(reply);
    closeOnShutdown(req.raw.socket);
    const gone = new AbortController();
    reply.raw.once('close', () => {
      if (!reply.raw.writableFinished) gone.abort(new Error('the client went away'));
    });
    const buildId = q.buildid;
    if (buildId) running.set(buildId, gone);
    try {
      await engine.builds.build(
        {
          // No body (a `remote` build): an empty one.
          body: (req.body as Readable | undefined) ?? Readable.from([]),
          ...(q.remote ? { remote: q.remote } : {}),
          ...(q.dockerfile ? { dockerfile: q.dockerfile } : {}),
          tags: allValues(req.query, 't').filter(Boolean),
          buildArgs: stringMap(q.buildargs, 'buildargs', true),
          ...(q.target ? { target: q.target } : {}),
          // dockerd's classic builder builds every stage up to the target (BuildKit skips unused ones).
          everyStage: true,
          ...(q.platform ? { platform: q.platform } : {}),
          labels: stringMap(q.labels, 'labels', false) as Record<string, string>,
          noCache: boolValue(q.nocache),
          pull: boolValue(q.pull),
          // dockerd: an absent or empty `rm` means remove.
          rm: q.rm === undefined || q.rm === '' ? true : boolValue(q.rm),
          forceRm: boolValue(q.forcerm),
          quiet: boolValue(q.q),
          cacheFrom: cacheFrom as string[],
          ...(q.networkmode && q.networkmode !== 'default' ? { networkMode: q.networkmode } : {}),
          extraHosts: allValues(req.query, 'extrahosts').filter(Boolean),
          resources,
          auths,
        },
        (e) => {
          if ('pull' in e) stream.progress(e.pull);
          else stream.write(e);
        },
        gone.signal,
      );
    } catch (e) {
      if (gone.signal.aborted) {
        req.log.info({ url: req.url }, 'build cancelled: the client went away');
        return stream.drop();
      }
      if (!stream.hasStarted) throw e;
      const message = messageOf(e);
      const code = stepExitCode(e);
      stream.write({ errorDetail: { ...(code !== undefined ? { code } : {}), message }, error: message });
    } finally {
      if (buildId) running.delete(buildId);
    }
    stream.end();
  });

  // The classic builder's cache is its intermediate images (docker image prune removes them); there is
  // no separate build cache to prune, as with dockerd's classic builder.
  app.post('/build/prune', async (req) => {
    const q = query(req);
    intValue(q['keep-storage'], 'keep-storage');
    boolValue(q.all);
    if (q.filters) jsonParam(q.filters, 'filters');
    return { CachesDeleted: null, SpaceReclaimed: 0 };
  });

  // dockerd's /build/cancel is BuildKit's; here it cancels a classic build started with that `buildid`.
  app.post('/build/cancel', async (req, reply) => {
    const id = query(req).id ?? '';
    if (!id) throw invalidParameter('build ID not provided');
    running.get(id)?.abort(new Error('cancelled'));
    return reply.code(200).send();
  });
}
