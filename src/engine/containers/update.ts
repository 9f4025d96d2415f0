// `POST /containers/{id}/update` (docker update): a container's limits and
// restart policy changed after create, as dockerd changes them (moby
// daemon/update.go, container.UpdateContainer): each field given (non-zero)
// replaces the stored one; a running or paused container's cgroups take the
// new limits at once (runc update), any other's at its next start; the restart
// policy counts from its next exit.
import { conflict, EngineError, isEngineError, messageOf, systemError } from '../../errors.js';
import type { EventBus } from '../events.js';
import type { Runtime } from '../runtime/runtime.js';
import type { ContainerRepository } from '../store/containers.js';
import type { Given, HostConfig, RestartPolicy, UpdateBody } from './config.js';
import { type Container, isRunning, publish } from './container.js';
import { checkRestartPolicy } from './create/create.js';
import { verifyResources } from './create/resources.js';
import { refuseUnhonouredUpdate } from './create/unsupported.js';
import type { ContainerLookup } from './lookup.js';
import type { Bundles } from './run/bundle.js';
import { updatedResources } from './spec/limits.js';

/** What an update is given. */
export interface UpdateDeps {
  repo: ContainerRepository;
  runtime: Pick<Runtime, 'update'>;
  events: EventBus;
  lookup: Pick<ContainerLookup, 'find' | 'byId'>;
  /** A bundle prepared early is written again by the start (run/bundle.ts). */
  bundles: Pick<Bundles, 'reconfigured'>;
  /** The start of a container under way, if any (run/lifecycle.ts). */
  startOf(id: string): Promise<unknown> | undefined;
}

export async function updateContainer(
  s: UpdateDeps,
  ref: string,
  body: Given<UpdateBody>,
): Promise<{ Warnings: string[] | null }> {
  refuseUnhonouredUpdate(body);
  const { resources, warnings } = verifyResources(body, { update: true });
  const policy = body.RestartPolicy ? checkRestartPolicy({ RestartPolicy: body.RestartPolicy }) : undefined;
  // A start under way has read the configuration already: the update comes after it.
  await s.startOf(s.lookup.find(ref).id)?.catch(() => undefined);
  const c = s.lookup.find(ref);
  if (c.status === 'removing' || c.status === 'dead') {
    throw cannotUpdate(c, systemError('container is marked for removal and cannot be "update"'));
  }
  const hostConfig = updatedHostConfig(c, resources, policy);
  const { repo, runtime, events } = s;
  repo.update(c.id, { host_config: JSON.stringify(hostConfig) });
  await s.bundles.reconfigured(c.id);
  publish(events, c, 'update');
  if (isRunning(c)) {
    try {
      await runtime.update(c.id, updatedResources(hostConfig));
    } catch (e) {
      // Gone meanwhile: its next start takes the stored limits, as a stopped one's does.
      const now = s.lookup.byId(c.id);
      if (now && isRunning(now)) {
        repo.update(c.id, { host_config: JSON.stringify(c.hostConfig) });
        throw cannotUpdate(c, isEngineError(e) ? e : systemError(messageOf(e), e));
      }
    }
  }
  // dockerd answers null when there is nothing to warn of.
  return { Warnings: warnings.length ? warnings : null };
}

/** The stored HostConfig with the update's fields over it, refused where dockerd refuses the mix. */
function updatedHostConfig(c: Container, u: Given<UpdateBody>, policy: RestartPolicy | undefined): HostConfig {
  const h: HostConfig = { ...c.hostConfig };
  refuseCpuSwitch(c, u);
  if (u.BlkioWeight) h.BlkioWeight = u.BlkioWeight;
  if (u.CpuShares) h.CpuShares = u.CpuShares;
  if (u.NanoCpus) h.NanoCpus = u.NanoCpus;
  if (u.CpuPeriod) h.CpuPeriod = u.CpuPeriod;
  if (u.CpuQuota) h.CpuQuota = u.CpuQuota;
  if (u.CpusetCpus) h.CpusetCpus = u.CpusetCpus;
  if (u.CpusetMems) h.CpusetMems = u.CpusetMems;
  if (u.Memory) {
    if (u.Memory > swapLimit(c.hostConfig) && !u.MemorySwap) {
      throw cannotUpdate(
        c,
        conflict(
          'Memory limit should be smaller than already set memoryswap limit, update the memoryswap at the same time',
        ),
      );
    }
    h.Memory = u.Memory;
  }
  if (u.MemorySwap) h.MemorySwap = u.MemorySwap;
  if (u.MemoryReservation) h.MemoryReservation = u.MemoryReservation;
  if (u.KernelMemory) h.KernelMemory = u.KernelMemory;
  // dockerd's router: 0 and any negative value both mean unlimited.
  if (u.PidsLimit !== undefined) h.PidsLimit = Math.max(u.PidsLimit, 0);
  if (policy && policy.Name !== '') {
    if (h.AutoRemove && policy.Name !== 'no') {
      throw cannotUpdate(
        c,
        conflict('Restart policy cannot be updated because AutoRemove is enabled for the container'),
      );
    }
    h.RestartPolicy = policy;
  }
  return h;
}

/**
 * NanoCpus sets the CFS period and quota: once either way is set, the other
 * cannot be updated (dockerd's UpdateContainer).
 */
function refuseCpuSwitch(c: Container, u: Given<UpdateBody>): void {
  const had = c.hostConfig;
  const refuse = (what: string) => {
    throw cannotUpdate(c, conflict(`Conflicting options: ${what}`));
  };
  if (u.NanoCpus && u.NanoCpus > 0 && (had.CpuPeriod ?? 0) > 0) {
    refuse('Nano CPUs cannot be updated as CPU Period has already been set');
  }
  if (u.NanoCpus && u.NanoCpus > 0 && (had.CpuQuota ?? 0) > 0) {
    refuse('Nano CPUs cannot be updated as CPU Quota has already been set');
  }
  if (u.CpuPeriod && u.CpuPeriod > 0 && had.NanoCpus > 0) {
    refuse('CPU Period cannot be updated as NanoCPUs has already been set');
  }
  if (u.CpuQuota && u.CpuQuota > 0 && had.NanoCpus > 0) {
    refuse('CPU Quota cannot be updated as NanoCPUs has already been set');
  }
}

/**
 * The memory+swap limit as dockerd stores it. berth kept 0 for a memory limit
 * without one before it stored dockerd's default; twice the memory, as applied.
 */
const swapLimit = (h: HostConfig) => (h.Memory > 0 && h.MemorySwap === 0 ? h.Memory * 2 : h.MemorySwap);

/** dockerd's wrapping of an update's failure; the kind (status) is the cause's. */
function cannotUpdate(c: Container, cause: EngineError): EngineError {
  return new EngineError(cause.kind, `Cannot update container ${c.id}: ${cause.message}`, { cause });
}
