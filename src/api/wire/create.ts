// POST /containers/create: the body as the engine takes it, read as the
// client's API version means it (moby's postContainersCreate). Fields that
// came with a later version are refused from an older client where dockerd
// refuses them, and what changed meaning is told to the engine plainly.
import type { z } from 'zod';
import { type CreateBodySchema, type CreateRequest, parsePlatform } from '../../engine/index.js';
import { invalidParameter } from '../../errors.js';
import { versionBelow } from '../version.js';
import { withoutNulls } from './forms.js';

type HostConfigBody = NonNullable<z.output<typeof CreateBodySchema>['HostConfig']>;

/** What an older client's HostConfig means (moby's postContainersCreate), changed in place. */
function readAsOlderClient(h: HostConfigBody, apiVersion: string): void {
  // Older clients expect shareable to be the default; with no HostConfig at all, private.
  if (versionBelow(apiVersion, '1.40') && !h.IpcMode) h.IpcMode = 'shareable';
  // Fields that came later, which dockerd does not read from a client older than them.
  for (const m of h.Mounts ?? []) {
    if (m.BindOptions && versionBelow(apiVersion, '1.40')) delete m.BindOptions.NonRecursive;
    if (m.BindOptions && versionBelow(apiVersion, '1.42')) delete m.BindOptions.CreateMountpoint;
  }
  if (versionBelow(apiVersion, '1.43')) delete h.Annotations;
}

export function createRequest(
  body: z.output<typeof CreateBodySchema>,
  query: { name?: string | undefined; platform?: string | undefined },
  apiVersion: string,
): CreateRequest {
  const { HostConfig, NetworkingConfig, ...config } = body;
  if (HostConfig) readAsOlderClient(HostConfig, apiVersion);
  // `platform` came with API 1.41.
  const platform = versionBelow(apiVersion, '1.41') || !query.platform ? undefined : parsePlatform(query.platform);
  const mounts = HostConfig?.Mounts ?? [];
  const before144 = versionBelow(apiVersion, '1.44');
  if (before144) {
    // StartInterval came with API 1.44: dockerd does not read an older client's.
    if (config.Healthcheck) delete config.Healthcheck.StartInterval;
    if (mounts.some((m) => (m.Type ?? 'bind') === 'bind' && m.BindOptions?.ReadOnlyForceRecursive)) {
      throw invalidParameter('BindOptions.ReadOnlyForceRecursive needs API v1.44 or newer');
    }
    const endpoints = Object.keys(NetworkingConfig?.EndpointsConfig ?? {});
    if (endpoints.length > 1) {
      throw invalidParameter(`Container cannot be created with multiple network endpoints: ${endpoints.join(', ')}`);
    }
  }
  if (versionBelow(apiVersion, '1.45') && mounts.some((m) => m.VolumeOptions?.Subpath)) {
    throw invalidParameter('VolumeOptions.Subpath needs API v1.45 or newer');
  }
  return {
    ...(query.name ? { name: query.name } : {}),
    ...(platform ? { platform } : {}),
    config: withoutNulls(config),
    hostConfig: withoutNulls(HostConfig ?? {}),
    ...(NetworkingConfig ? { networkingConfig: NetworkingConfig } : {}),
    // Before 1.44 read-only binds were not recursively read-only; an older client keeps that.
    ...(before144 ? { nonRecursiveReadonlyBinds: true } : {}),
  };
}
