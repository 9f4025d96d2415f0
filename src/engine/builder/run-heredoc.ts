// A RUN with here-documents as the command it runs, as BuildKit's dispatchRun
// makes it: `RUN <<EOF` alone runs its body with the shell, or, when the body
// starts with `#!`, as a script of its own (bound read-only at /dev/pipes/);
// any other line (`RUN <<EOF bash`, `RUN cat <<A <<B`) goes to the shell with
// the bodies after it and their terminators, for the shell to read them.
import { invalidParameter } from '../../errors.js';
import { heredocBody, parseHeredocWord, type RunInstr } from '../dockerfile/index.js';
import type { InlineFile } from './run-mounts.js';

const PIPES = '/dev/pipes';

export function heredocCommand(instr: RunInstr): { args: string[]; inline?: InlineFile } {
  const docs = instr.heredocs;
  if (docs.length === 0) return { args: instr.args };
  if (instr.args.length !== 1 || instr.json)
    throw invalidParameter(`parsing produced an invalid run command: [${instr.args.join(' ')}]`);
  const line = instr.args[0]!;
  if (parseHeredocWord(line)) {
    const first = docs[0]!;
    const data = heredocBody(first);
    if (!data.startsWith('#!')) return { args: [data] };
    return { args: [`${PIPES}/${first.name}`], inline: { dir: PIPES, name: first.name, data, mode: 0o755 } };
  }
  return { args: [line + docs.map((d) => `\n${d.content}${d.name}`).join('')] };
}
