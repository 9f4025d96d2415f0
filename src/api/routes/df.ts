// GET /system/df: what images, containers, volumes and the build cache take
// on disk, in dockerd's shape before API 1.52 (berth speaks up to 1.47).
import type { FastifyInstance } from 'fastify';
import type { Engine } from '../../engine/index.js';
import { invalidParameter } from '../../errors.js';
import { versionBelow } from '../version.js';
import { imageSummary } from '../wire/images.js';
import { volumeShape } from '../wire/volumes.js';
import { containerList } from './containers.js';

const TYPES = ['container', 'image', 'volume', 'build-cache'] as const;
type UsageType = (typeof TYPES)[number];

/** The `type` filter (API 1.42): all types without it, or below 1.42; dockerd's 400 for an unknown one. */
function wantedTypes(raw: unknown, apiVersion: string): Set<UsageType> {
  if (raw === undefined || versionBelow(apiVersion, '1.42')) return new Set(TYPES);
  const asked = (Array.isArray(raw) ? raw : [raw]).map(String);
  for (const t of asked) {
    if (!(TYPES as readonly string[]).includes(t)) throw invalidParameter(`unknown object type: ${t}`);
  }
  return new Set(asked as UsageType[]);
}

/** Every volume with its UsageData (Size, RefCount), as dockerd's df lists them. */
const volumeUsage = (engine: Engine): Promise<Record<string, unknown>[]> =>
  Promise.all(engine.volumes.list().map(async (v) => volumeShape(v, await engine.volumes.usage(v.name))));

export function dfRoutes(app: FastifyInstance, engine: Engine): void {
  app.get('/system/df', async (req) => {
    const want = wantedTypes((req.query as Record<string, unknown>).type, req.apiVersion);
    const out: Record<string, unknown> = {};
    if (want.has('image')) {
      const layers = engine.images.layersSize();
      if (layers > 0) out.LayersSize = layers; // omitempty
      out.Images = engine.images.list({ sharedSize: true }).map((i) => imageSummary(i, req.apiVersion));
    }
    if (want.has('container')) {
      out.Containers = await containerList(engine, engine.containers.list({ all: true }), true, req.apiVersion);
    }
    if (want.has('volume')) out.Volumes = await volumeUsage(engine);
    if (want.has('build-cache')) out.BuildCache = []; // berth builds nothing: an empty cache, as a daemon with a builder reports
    return out;
  });
}
