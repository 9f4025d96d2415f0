// The engine's face: all that api/ sees of it. api/ imports nothing else of
// engine/ (test/unit/architecture.test.ts holds it to that), so what the
// routes need is named here: the services, the shapes they hand out, and the
// few functions that turn wire input into engine terms.
import type { ArchiveService } from './archive/service.js';
import type { BuildService } from './builder/service.js';
import type { CommitService } from './commit/service.js';
import type { ExecService } from './containers/exec.js';
import type { ContainerService } from './containers/service.js';
import type { EventBus } from './events.js';
import type { ImageService } from './images/service.js';
import type { NetworkService } from './network/service.js';
import type { PluginService } from './plugins/service.js';
import type { SystemService } from './system.js';
import type { VolumeService } from './volumes/service.js';

export interface Engine {
  system: SystemService;
  images: ImageService;
  containers: ContainerService;
  execs: ExecService;
  events: EventBus;
  commits: CommitService;
  networks: NetworkService;
  archives: ArchiveService;
  volumes: VolumeService;
  builds: BuildService;
  plugins: PluginService;
}

export type { ArchiveService, PathStat, PutOptions } from './archive/service.js';
export type { BuildEvent, BuildRequest, BuildResources, BuildSession, StepEvent } from './builder/build-types.js';
export type { BuildService } from './builder/service.js';
export { failedStep, stepExitCode } from './builder/build-types.js';
export { readIgnoreFile } from './builder/dockerignore.js';
export type { CommitRequest, CommitService } from './commit/service.js';
export type { AttachSession } from './containers/io/attach.js';
export type { ContainerConfig, CreateRequest, HostConfig } from './containers/config.js';
export { CreateBodySchema, ExecCreateSchema, UpdateBodySchema } from './containers/config.js';
export type { ExecInstance, ExecService } from './containers/exec.js';
export type { Container } from './containers/container.js';
export type { ContainerService } from './containers/service.js';
export type { WaitCondition, WaitResult } from './containers/waits.js';
export type { EngineEvent, EventBus } from './events.js';
export type { Filters } from './filters.js';
export type { ContainerConfigFields, ImageConfig } from './images/config.js';
export type { ImageTree, TreeEntry, TreeEntryKind } from './images/image-tree.js';
export type { ImageManifest } from './images/manifests.js';
export type { PullEvent, PullOptions } from './images/pull.js';
export type { PushEvent } from './images/push.js';
export type { DistributionInspect } from './images/distribution.js';
export type { SearchResult } from './registry/search.js';
export type { LoadEvent } from './images/load.js';
export type { SavedArchive } from './images/save.js';
export type { DeleteItem, HistoryItem, Image, ImageDetails, ImageService } from './images/service.js';
export type { AuthConfig } from './registry/auth.js';
export type { LogEntry } from './runtime/logs.js';
export type { SystemService } from './system.js';

export { visibleLogPath } from './containers/io/jsonlog.js';
export { reportedExposedPorts } from './containers/spec/network.js';
export { protectedPaths } from './containers/spec/paths.js';
export { isoOrZero, statusText } from './containers/status.js';
export { BEHIND_EVENTS } from './events.js';
export { createdSeconds, dockerConfig } from './images/config.js';
export { peerClosed, setSendBuffer, unreadBytes } from './os/sockets.js';
export { decodeRegistryAuth, decodeRegistryConfig } from './registry/auth.js';
export { decodePlatform, parsePlatform } from './registry/manifest.js';
export { formatTimestamp } from './runtime/logs.js';
export type { ContainerNetworking, Endpoint as ContainerEndpoint, EndpointSettings } from './network/endpoints.js';
export type { PortBinding } from './network/ports.js';
export type { CreateNetworkRequest, Network, NetworkEndpoint } from './network/service.js';
export { NetworkCreateSchema } from './network/service.js';
export type { ContainerMount } from './containers/create/mounts.js';
export type { MountPoint, Volume, VolumeService } from './volumes/service.js';
export type { PluginService } from './plugins/service.js';
export { VolumeCreateSchema } from './volumes/service.js';
