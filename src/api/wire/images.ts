// Docker's wire shapes for images.
import { z } from 'zod';
import { lazySchema } from '../../lazy-schema.js';
import { createdSeconds, dockerConfig, type Image, type ImageDetails, type ImageManifest } from '../../engine/index.js';
import { versionBelow } from '../version.js';

/** Before API 1.43 dockerd shows an untagged image as <none>:<none> / <none>@<none>; from 1.43, empty lists. */
function references(img: Image, apiVersion: string): { RepoDigests: string[]; RepoTags: string[] } {
  if (!versionBelow(apiVersion, '1.43')) return { RepoDigests: img.repoDigests, RepoTags: img.repoTags };
  const untagged = img.repoTags.length === 0 && img.repoDigests.length === 0;
  return {
    RepoDigests: untagged ? ['<none>@<none>'] : img.repoDigests,
    RepoTags: img.repoTags.length === 0 ? ['<none>:<none>'] : img.repoTags,
  };
}

/** One entry of `GET /images/json`; `manifests` when the request asked for them (API 1.47). */
export function imageSummary(img: Image, apiVersion: string, manifests?: ImageManifest[]): Record<string, unknown> {
  const out: Record<string, unknown> = {
    Containers: img.containers,
    Created: createdSeconds(img.created),
    Id: img.id,
    Labels: img.config.config?.Labels ?? {},
    ParentId: img.parent,
    ...references(img, apiVersion),
    // -1: not counted (the list was not asked for `shared-size`).
    SharedSize: img.sharedSize ?? -1,
    Size: img.size,
  };
  if (versionBelow(apiVersion, '1.44')) out.VirtualSize = img.size;
  // Omitted when empty, as dockerd's omitempty (a committed image has no manifest).
  if (manifests?.length) out.Manifests = manifests.map(manifestSummary);
  return out;
}

/** dockerd's ManifestSummary: berth's manifests are all images' (no attestations are pulled). */
function manifestSummary(m: ImageManifest): Record<string, unknown> {
  return {
    ID: m.descriptor.digest,
    Descriptor: m.descriptor,
    Available: m.available,
    Size: { Content: m.contentSize, Total: m.contentSize + m.unpackedSize },
    Kind: 'image',
    ImageData: {
      Platform: m.platform,
      Containers: m.containers.length ? m.containers : null,
      Size: { Unpacked: m.unpackedSize },
    },
  };
}

/** An image config without a creation time: Go's zero time before API 1.44, no `Created` from 1.44. */
function created(time: string | undefined, apiVersion: string): { Created?: string } {
  if (time) return { Created: time };
  return versionBelow(apiVersion, '1.44') ? { Created: '0001-01-01T00:00:00Z' } : {};
}

/** `GET /images/{name}/json`. */
export function imageInspect(img: ImageDetails, apiVersion: string): Record<string, unknown> {
  const c = img.config;
  const lower = img.layerDirs;
  const out: Record<string, unknown> = {
    Id: img.id,
    RepoTags: img.repoTags,
    RepoDigests: img.repoDigests,
    Parent: img.parent,
    Comment: c.comment ?? '',
    ...created(c.created, apiVersion),
    // Gone from API 1.45.
    ...(versionBelow(apiVersion, '1.45')
      ? { Container: c.container ?? '', ContainerConfig: c.container_config ?? dockerConfig({}) }
      : {}),
    DockerVersion: c.docker_version ?? '',
    Author: c.author ?? '',
    // Docker's full container.Config shape (API 1.50 made it the OCI image config's omitempty one).
    Config: c.config ? dockerConfig(c.config) : null,
    Architecture: c.architecture ?? 'amd64',
    ...(c.variant ? { Variant: c.variant } : {}),
    Os: c.os ?? 'linux',
    ...(c['os.version'] ? { OsVersion: c['os.version'] } : {}),
    Size: img.size,
    GraphDriver: {
      Data: lower.length
        ? { MergedDir: '', UpperDir: lower[0], LowerDir: lower.slice(1).join(':') || undefined, WorkDir: '' }
        : null,
      Name: 'overlay2',
    },
    RootFS: { Type: 'layers', Layers: c.rootfs?.diff_ids ?? [] },
    Metadata: { LastTagTime: '0001-01-01T00:00:00Z' },
  };
  if (versionBelow(apiVersion, '1.44')) out.VirtualSize = img.size;
  return out;
}

/** `POST /auth`: docker login's credentials. */
export const AuthBody = lazySchema(() =>
  z.looseObject({
    username: z.string().nullish(),
    password: z.string().nullish(),
    serveraddress: z.string().nullish(),
    identitytoken: z.string().nullish(),
    registrytoken: z.string().nullish(),
    email: z.string().nullish(),
  }),
);
