// `docker rm`: a container's removal, forced or not, with its anonymous
// volumes or not. It answers once the container is gone from the API; its
// directory is deleted in the background.
import { conflict, messageOf, systemError } from '../../errors.js';
import type { Logger } from '../../log.js';
import type { EventBus } from '../events.js';
import { removeInBackground } from '../os/dirs.js';
import type { ExitWatcher } from '../runtime/exits.js';
import type { Runtime } from '../runtime/runtime.js';
import type { ContainerRepository } from '../store/containers.js';
import type { VolumeService } from '../volumes/service.js';
import { isRunning, publish } from './container.js';
import type { HealthMonitor } from './health.js';
import type { JsonLogs } from './io/jsonlog.js';
import type { LogRotation } from './io/logrotation.js';
import type { ContainerLookup } from './lookup.js';
import { type Bundles, releaseMounts } from './run/bundle.js';
import type { ExitHandler } from './run/exits.js';
import type { Lifecycle } from './run/lifecycle.js';
import type { Waits } from './waits.js';

/** What a removal is given. */
export interface RemoveDeps {
  repo: ContainerRepository;
  runtime: Pick<Runtime, 'delete'>;
  /** conmon's exit files (runtime/exits.ts). */
  exits: Pick<ExitWatcher, 'clear'>;
  volumes: Pick<VolumeService, 'mountsOf' | 'deactivate' | 'removed'>;
  events: EventBus;
  /** <data-root>/containers */
  root: string;
  log: Logger;
  lookup: Pick<ContainerLookup, 'find'>;
  waits: Pick<Waits, 'notify'>;
  bundles: Pick<Bundles, 'forget'>;
  health: Pick<HealthMonitor, 'removed'>;
  logRotation: Pick<LogRotation, 'removed'>;
  jsonLogs: Pick<JsonLogs, 'removed'>;
  /** Ends a running container's process (run/lifecycle.ts). */
  lifecycle: Pick<Lifecycle, 'terminate'>;
  /** Its exit's restart and tear-down (run/exits.ts). */
  exitHandler: Pick<ExitHandler, 'cancelRestart' | 'settled'>;
}

/** `volumes`: its anonymous volumes go too (`rm -v`); named ones never do. */
export async function removeContainer(
  deps: RemoveDeps,
  ref: string,
  opts: { force?: boolean; volumes?: boolean } = {},
): Promise<void> {
  const { repo, volumes, waits, exitHandler } = deps;
  const c = deps.lookup.find(ref);
  const id = c.id;
  if (isRunning(c) || c.status === 'restarting') {
    if (!opts.force) {
      throw conflict(
        `You cannot remove a ${c.status} container ${id}. Stop the container before attempting removal or force remove`,
      );
    }
    exitHandler.cancelRestart(id);
    repo.update(id, { stopped_by_user: 1 });
    if (c.status === 'restarting') repo.update(id, { status: 'exited' });
    else await deps.lifecycle.terminate(c, 'SIGKILL', -1);
  }
  // A bundle still being prepared after create must finish before it is torn down.
  await deps.bundles.forget(id);
  deps.health.removed(id);
  deps.logRotation.removed(id, c.logPath);
  await deps.jsonLogs.removed(c);
  const mounts = volumes.mountsOf(id);
  volumes.deactivate(id);
  repo.remove(id);
  // Before waiters hear of the removal: `docker run --rm` lists no volume of it once it returns.
  await volumes.removed(mounts, opts.volumes ?? false);
  // Gone from the API from here on: waiters (docker run --rm) need not wait for the
  // tear-down. A crash before it ends leaves a directory that recover() sweeps away.
  waits.notify(id, ['not-running', 'next-exit', 'removed'], c.exitCode);
  publish(deps.events, c, 'destroy');
  await exitHandler.settled(id);
  await deps.runtime.delete(id, true).catch(() => undefined);
  await deps.exits.clear(id).catch(() => undefined);
  await discardDir(deps, id, c.bundleDir);
}

/**
 * Deletes a removed container's directory in the background, its rootfs
 * unmounted first: what a container wrote can be thousands of files, and
 * unmounting an overlay syncs the filesystem under it, none of which
 * `docker rm` need wait for. A crash meanwhile leaves it renamed, for the
 * next start to sweep away (run/exits.ts).
 */
async function discardDir({ root, log }: Pick<RemoveDeps, 'root' | 'log'>, id: string, dir: string): Promise<void> {
  const onError = (err: unknown) => log.warn({ err, id }, "deleting a removed container's directory failed");
  try {
    await removeInBackground(dir, root, onError, releaseMounts);
  } catch (e) {
    throw systemError(`unable to remove filesystem for ${id}: ${messageOf(e)}`, e);
  }
}
