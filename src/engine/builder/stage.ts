// A stage: its steps numbered and told as they run, its FROM (the scratch, an earlier stage or an image, with the image's
// ONBUILD triggers run first) and each instruction handed to its step.
import { invalidParameter } from '../../errors.js';
import {
  applyConfigInstruction,
  envKey,
  expandWord,
  type FromInstr,
  type Instruction,
  isConfigInstruction,
  nopCommand,
  parseTrigger,
  type Stage,
  sourceCode,
} from '../dockerfile/index.js';
import type { ImageConfig } from '../images/config.js';
import { baseImage, checkPlatform } from './base-image.js';
import type { StageState, StepContext } from './build-types.js';
import { fromName, short, stepText } from './build-texts.js';
import { copyStep } from './copy-step.js';
import { argStep, commitMeta, hasDir, metaStep, workdirStep } from './meta-steps.js';
import { runStep } from './run-step.js';
import { DEFAULT_PATH, metaEnv, stepEnv } from './step-env.js';

export async function from(cx: StepContext, stage: Stage): Promise<StageState> {
  const { run } = cx;
  const instr: FromInstr = stage.from;
  if (instr.platform) checkPlatform(expandWord(instr.platform, metaEnv(run), instr.node.escape));
  const name = expandWord(instr.image, metaEnv(run), instr.node.escape);
  if (!name) throw invalidParameter('base name (${BASE}) should not be blank'.replace('${BASE}', instr.image));
  const scratch = name.toLowerCase() === 'scratch';
  const built = scratch ? undefined : run.stages.get(name.toLowerCase());
  const image = scratch || built ? undefined : fromName(name);
  const steps = run.req.steps ?? (() => undefined);
  steps({
    type: 'stage',
    index: stage.index,
    ...(stage.name ? { name: stage.name } : {}),
    stages: run.stageCount,
    commands: stage.instructions.length + (image ? 1 : 0),
    ...(image ? { image } : {}),
  });
  const st: StageState = {
    stage,
    imageId: null,
    config: { Env: [DEFAULT_PATH] },
    cfg: { cmdSet: false },
    args: new Map(),
  };
  if (scratch) return st;
  if (image) steps({ type: 'step', kind: 'from', text: `FROM ${image}` });
  const imageId = built ?? (await baseImage(cx, name));
  if (image) steps({ type: 'done' });
  const config = JSON.parse(cx.deps.repo.find(imageId)!.config) as ImageConfig;
  st.imageId = imageId;
  st.config = structuredClone(config.config ?? {});
  if (!st.config.Env?.some((e) => envKey(e) === 'PATH')) st.config.Env = [...(st.config.Env ?? []), DEFAULT_PATH];
  const triggers = st.config.OnBuild ?? [];
  st.config.OnBuild = null;
  if (triggers.length) {
    run.emit({ stream: `# Executing ${triggers.length} build trigger` });
    if (triggers.length > 1) run.emit({ stream: 's' });
    run.emit({ stream: '\n' });
    for (const t of triggers) await dispatch(cx, st, parseTrigger(t));
  }
  run.emit({ stream: ` ---> ${short(st.imageId!)}\n` });
  return st;
}

export async function dispatch(cx: StepContext, st: StageState, instr: Instruction): Promise<void> {
  const { run } = cx;
  if (instr.kind === 'run') return runStep(cx, st, instr);
  if (instr.kind === 'copy' || instr.kind === 'add') return copyStep(cx, st, instr);
  if (instr.kind === 'arg') return argStep(cx, st, instr);
  if (instr.kind === 'from') throw invalidParameter('FROM is not allowed here');
  if (!isConfigInstruction(instr)) throw invalidParameter(`unknown instruction: ${String(instr)}`);
  const env = stepEnv(run, st);
  const config = structuredClone(st.config);
  const comment = applyConfigInstruction(config, instr, env, st.cfg);
  if (instr.kind === 'maintainer') st.author = instr.name;
  if (instr.kind === 'workdir' && config.WorkingDir && !(await hasDir(cx, st, config.WorkingDir)))
    return workdirStep(cx, st, nopCommand(config, comment), config);
  await metaStep(cx, st, nopCommand(config, comment), config);
}

/** Where a stage's steps are numbered from in the classic stream, and the steps added to it (the request's labels). */
export interface StageSteps {
  first: number;
  total: number;
  labels: Instruction[];
}

/** Builds one stage from its FROM to its last step (and the labels' steps); returns its image id. */
export async function buildStage(cx: StepContext, stage: Stage, n: StageSteps): Promise<string> {
  const { run } = cx;
  const steps = run.req.steps ?? (() => undefined);
  let at = n.first;
  const header = (instr: Instruction) => {
    run.emit({ stream: `Step ${at++}/${n.total} : ${sourceCode(instr)}` });
    run.emit({ stream: '\n' });
  };
  run.signal.throwIfAborted();
  header(stage.from);
  const st = await from(cx, stage);
  /** One instruction: its header, its step events around it; `text` is the step's as BuildKit shows it. */
  const step = async (instr: Instruction, text: () => string, synthetic?: true) => {
    run.signal.throwIfAborted();
    header(instr);
    steps({ type: 'step', kind: instr.kind, text: text(), ...(synthetic ? { synthetic } : {}) });
    await dispatch(cx, st, instr);
    steps({ type: 'done' });
  };
  for (const instr of stage.instructions) await step(instr, () => stepText(instr, stepEnv(run, st)));
  for (const instr of n.labels) await step(instr, () => sourceCode(instr), true);
  if (!st.imageId) {
    // Only metadata on scratch and nothing else: still an image.
    st.imageId = await commitMeta(cx, st, nopCommand(st.config, 'FROM scratch'), st.config);
  }
  run.emit({ aux: { ID: st.imageId } });
  return st.imageId;
}
