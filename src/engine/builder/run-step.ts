// RUN: the step in a real container of the current image (an empty one made for
// it on scratch: the vehicle), its output streamed into the build's, committed
// when it exits 0. The containers of the other steps are made and removed here too.
import { createHash } from 'node:crypto';
import { invalidParameter } from '../../errors.js';
import { commandLine, envKey, type RunInstr } from '../dockerfile/index.js';
import type { ContainerConfigFields } from '../images/config.js';
import { cachedImage, useCached } from './build-cache.js';
import { type Run, type StageState, type StepContext, StepFailed } from './build-types.js';
import { short } from './build-texts.js';
import { heredocCommand } from './run-heredoc.js';
import { mountCacheKey, prepareMounts, runMounts } from './run-mounts.js';
import { argValues, stepEnv } from './step-env.js';

function hostConfig(run: Run, network?: string): Record<string, unknown> {
  const r = run.req.resources;
  const mode = network ?? run.req.networkMode;
  return {
    ...(mode ? { NetworkMode: mode } : {}),
    ...(run.req.extraHosts.length ? { ExtraHosts: run.req.extraHosts } : {}),
    ...(r.shmSize ? { ShmSize: r.shmSize } : {}),
    ...(r.memory ? { Memory: r.memory } : {}),
    ...(r.memorySwap ? { MemorySwap: r.memorySwap } : {}),
    ...(r.cpuShares ? { CpuShares: r.cpuShares } : {}),
    ...(r.cpusetCpus ? { CpusetCpus: r.cpusetCpus } : {}),
    ...(r.cpuPeriod ? { CpuPeriod: r.cpuPeriod } : {}),
    ...(r.cpuQuota ? { CpuQuota: r.cpuQuota } : {}),
  };
}

/** The label of a step's container config that keys the cache on its mounts and inline script (never their content but the script's digest). */
const RUN_KEY_LABEL = 'berth.build.run';

export async function createContainer(
  cx: StepContext,
  st: StageState,
  config: ContainerConfigFields,
  mounts: Array<Record<string, unknown>> = [],
  network?: 'none' | 'host',
): Promise<string> {
  const { run } = cx;
  // A scratch stage's first container step needs an image to make a container of: an empty one, made
  // for it and removed with the container (the step's image has no parent, as dockerd's).
  const vehicle = st.imageId
    ? undefined
    : await cx.deps.commits.commitStep({ parent: null, config: {}, containerConfig: {} });
  try {
    const { Id } = await cx.deps.containers.create({
      config: { ...(config as Record<string, unknown>), Image: st.imageId ?? vehicle, Entrypoint: [] } as never,
      hostConfig: { ...hostConfig(run, network), ...(mounts.length ? { Mounts: mounts } : {}) } as never,
    });
    if (vehicle) cx.vehicles.set(Id, vehicle);
    return Id;
  } catch (e) {
    if (vehicle) await removeVehicle(cx, vehicle);
    throw e;
  }
}

export async function removeContainer(cx: StepContext, id: string): Promise<void> {
  await cx.deps.containers
    .remove(id, { force: true, volumes: true })
    .catch((err: unknown) => cx.log.warn({ err, id }, 'removing a build container failed'));
  const vehicle = cx.vehicles.get(id);
  cx.vehicles.delete(id);
  if (vehicle) await removeVehicle(cx, vehicle);
}

async function removeVehicle(cx: StepContext, id: string): Promise<void> {
  await cx.deps.images
    .remove(id, { force: true })
    .catch((err: unknown) => cx.log.warn({ err, id }, 'removing the empty image of a scratch step failed'));
}

export async function runStep(cx: StepContext, st: StageState, instr: RunInstr): Promise<void> {
  const { run } = cx;
  const env = stepEnv(run, st);
  const { args, inline } = heredocCommand(instr);
  const cmd = commandLine(args, instr.json, st.config) ?? [];
  const mounts = runMounts(instr, env, st.config.WorkingDir);
  // The host's network only for a build that was given it (BuildKit: the network.host entitlement).
  if (instr.network === 'host' && run.req.networkMode !== 'host') throw invalidParameter('network.host is not allowed');
  // As dockerd: the declared build args in use prefix the cached command (`|N k=v … cmd`); the proxy args do not.
  const declared = argValues(run, st).filter(([k]) => st.args.has(k));
  const envKeys = new Set((st.config.Env ?? []).map(envKey));
  const keyArgs = declared
    .filter(([k]) => !envKeys.has(k))
    .map(([k, v]) => `${k}=${v}`)
    .sort();
  const saveCmd = keyArgs.length ? [`|${keyArgs.length}`, ...keyArgs, ...cmd] : cmd;
  const runKey: string[] = [];
  for (const m of mounts) runKey.push(await mountCacheKey(cx, m));
  if (instr.network) runKey.push(`--network=${instr.network}`);
  if (inline) runKey.push(`${inline.dir}/${inline.name}=${createHash('sha256').update(inline.data).digest('hex')}`);
  const probe: ContainerConfigFields = {
    ...st.config,
    Cmd: saveCmd,
    Entrypoint: null,
    ...(runKey.length ? { Labels: { ...st.config.Labels, [RUN_KEY_LABEL]: runKey.join(' ') } } : {}),
  };
  const cached = await cachedImage(cx, st, probe, st.config);
  if (cached) {
    useCached(run, st, cached);
    return;
  }
  const prepared = await prepareMounts(cx, mounts, inline);
  try {
    await runIn(
      cx,
      st,
      probe,
      cmd,
      { ...st.config, Env: [...env, ...prepared.env], Cmd: cmd },
      prepared,
      instr.network,
    );
  } finally {
    await prepared.release();
  }
}

async function runIn(
  cx: StepContext,
  st: StageState,
  probe: ContainerConfigFields,
  cmd: string[],
  config: ContainerConfigFields,
  prepared: { mounts: Array<Record<string, unknown>>; targets: string[] },
  network: 'none' | 'host' | undefined,
): Promise<void> {
  const { run } = cx;
  const id = await createContainer(cx, st, config, prepared.mounts, network);
  if (run.signal.aborted) {
    await removeContainer(cx, id);
    run.signal.throwIfAborted();
  }
  run.emit({ stream: ` ---> Running in ${short(id)}\n` });
  let removed = false;
  const remove = async () => {
    if (removed) return;
    removed = true;
    await removeContainer(cx, id);
    run.emit({ stream: `Removing intermediate container ${short(id)}\n` });
  };
  try {
    const code = await runContainer(cx, id);
    if (code !== 0) {
      if (run.req.forceRm) await remove();
      throw new StepFailed(`The command '${cmd.join(' ')}' returned a non-zero code: ${code}`, code, cmd);
    }
    const imageId = await cx.deps.commits.commitStep({
      container: id,
      parent: st.imageId,
      config: { ...st.config, Image: st.imageId ?? '' },
      containerConfig: { ...probe, Image: st.imageId ?? '' },
      ...(st.author ? { author: st.author } : {}),
      ...(prepared.targets.length ? { mountPoints: prepared.targets } : {}),
    });
    if (run.req.rm || run.req.forceRm) await remove();
    st.imageId = imageId;
    run.emit({ stream: ` ---> ${short(imageId)}\n` });
  } catch (e) {
    // A cancelled build leaves nothing behind, whatever rm says.
    if (run.signal.aborted) await removeContainer(cx, id);
    throw e;
  }
}

/** Starts the container, streams its output into the build's, and returns its exit code. */
async function runContainer(cx: StepContext, id: string): Promise<number> {
  const { run } = cx;
  const { containers } = cx.deps;
  await containers.start(id);
  const follow = new AbortController();
  const reading = (async () => {
    for await (const entry of containers.logs(id, {
      follow: true,
      stdout: true,
      stderr: true,
      signal: follow.signal,
    })) {
      run.req.steps?.({ type: 'log', stream: entry.stream === 'stderr' ? 2 : 1, data: entry.line });
      const text = entry.line.toString('utf8');
      run.emit({ stream: entry.stream === 'stderr' ? `\u001b[91m${text}\u001b[0m` : text });
    }
  })();
  const stop = () => void containers.kill(id, 'SIGKILL').catch(() => undefined);
  run.signal.addEventListener('abort', stop, { once: true });
  if (run.signal.aborted) stop(); // it went while the container was starting
  try {
    const result = await containers.wait(id, 'not-running');
    follow.abort();
    await reading;
    run.signal.throwIfAborted();
    return result.StatusCode;
  } finally {
    follow.abort();
    await reading.catch(() => undefined);
    run.signal.removeEventListener('abort', stop);
  }
}
