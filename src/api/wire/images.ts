// Docker's wire shapes for images.
import { z } from 'zod';
import { createdSeconds, dockerConfig, type Image, type ImageDetails } from '../../engine/index.js';
import { versionBelow } from '../version.js';

/** One entry of `GET /images/json`. */
export function imageSummary(img: Image, apiVersion: string): Record<string, unknown> {
  const untagged = img.repoTags.length === 0 && img.repoDigests.length === 0;
  const out: Record<string, unknown> = {
    Containers: img.containers,
    Created: createdSeconds(img.created),
    Id: img.id,
    Labels: img.config.config?.Labels ?? {},
    ParentId: img.parent,
    // dockerd 20.10 shows an untagged image as <none>:<none> / <none>@<none>.
    RepoDigests: untagged ? ['<none>@<none>'] : img.repoDigests,
    RepoTags: untagged || img.repoTags.length === 0 ? ['<none>:<none>'] : img.repoTags,
    SharedSize: -1,
    Size: img.size,
  };
  if (versionBelow(apiVersion, '1.44')) out.VirtualSize = img.size;
  return out;
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
    Created: c.created ?? new Date(0).toISOString(),
    Container: c.container ?? '',
    ContainerConfig: c.container_config ?? dockerConfig({}),
    DockerVersion: c.docker_version ?? '',
    Author: c.author ?? '',
    Config: c.config ?? null,
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
export const AuthBody = z.looseObject({
  username: z.string().nullish(),
  password: z.string().nullish(),
  serveraddress: z.string().nullish(),
  identitytoken: z.string().nullish(),
  registrytoken: z.string().nullish(),
  email: z.string().nullish(),
});
