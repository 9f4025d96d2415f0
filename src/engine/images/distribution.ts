// `GET /distribution/{name}/json`: what a registry holds under a reference,
// asked of the registry (nothing local): the descriptor of the document the
// reference names and the platforms it offers — an index's entries, or an
// image manifest's config's os/architecture.
import { invalidParameter, messageOf, systemError } from '../../errors.js';
import { parseReference, withTag, type Reference } from '../reference.js';
import type { AuthConfig } from '../registry/auth.js';
import type { RegistryClient } from '../registry/client.js';
import type { Platform } from '../registry/manifest.js';

export interface DistributionInspect {
  Descriptor: { mediaType: string; digest: string; size: number; urls?: string[] };
  Platforms: Platform[];
}

/** The reference as dockerd reads it: a bare full image id is no reference; no tag means `latest`. */
function distributionReference(name: string): Reference {
  // dockerd answers this one with an unclassified error (500).
  if (/^(?:sha256:)?[0-9a-f]{64}$/.test(name)) throw systemError('no manifest found for full image ID');
  const ref = parseReference(name, { defaultTag: false });
  return ref.tag || ref.digest ? ref : withTag(ref, 'latest');
}

/** The config's platform fields, when it has any (dockerd leaves Platforms empty otherwise). */
function configPlatform(bytes: Buffer): Platform[] {
  try {
    const c = JSON.parse(bytes.toString('utf8')) as Partial<Platform>;
    if (!c.os && !c.architecture) return [];
    return [
      {
        architecture: c.architecture ?? '',
        os: c.os ?? '',
        ...(c['os.version'] ? { 'os.version': c['os.version'] } : {}),
        ...(c['os.features'] ? { 'os.features': c['os.features'] } : {}),
        ...(c.variant ? { variant: c.variant } : {}),
      },
    ];
  } catch (e) {
    throw invalidParameter(`invalid image config: ${messageOf(e)}`);
  }
}

export async function inspectDistribution(
  registry: RegistryClient,
  name: string,
  auth: AuthConfig | undefined,
  signal?: AbortSignal,
): Promise<DistributionInspect> {
  const ref = distributionReference(name);
  const { bytes, digest, doc } = await registry.fetchDocument(ref, auth, { signal });
  const Descriptor = { mediaType: doc.mediaType, digest, size: bytes.length };
  if (doc.kind === 'index') {
    return { Descriptor, Platforms: doc.index.manifests.flatMap((m) => (m.platform ? [m.platform] : [])) };
  }
  const config = await registry.fetchConfig(ref, doc.manifest.config, auth, { signal });
  return { Descriptor, Platforms: configPlatform(config) };
}
