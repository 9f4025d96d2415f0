// COPY and ADD: the sources (the context, a stage's or an image's tree, URLs for
// ADD) put into a container of the current image through the archive path, and
// the helpers that look into that container (directories, owners, files).
import { mkdtemp, rm } from 'node:fs/promises';
import path from 'node:path';
import { Readable as ReadableStream } from 'node:stream';
import tar from 'tar-stream';
import { invalidParameter, isEngineError, messageOf } from '../../errors.js';
import { type CopyInstr, expandCopy } from '../dockerfile/index.js';
import type { ContainerConfigFields } from '../images/config.js';
import { fetchUrl } from './add-url.js';
import { cachedImage, useCached } from './build-cache.js';
import type { StageState, StepContext } from './build-types.js';
import { downloading, hasWildcard, shellOf, short } from './build-texts.js';
import { sourceChecksum } from './checksum.js';
import { createContainer, removeContainer } from './run-step.js';
import { type CopySource, resolveSources, type SourceTree } from './sources.js';
import { sourcesTar, withMode } from './sources-tar.js';
import { checkChecksumUse, inlineSources, verifyChecksum } from './copy-inline.js';
import { stepEnv } from './step-env.js';
import { imageTree } from './trees.js';

export async function copyStep(cx: StepContext, st: StageState, instr: CopyInstr): Promise<void> {
  const { run } = cx;
  const CMD = instr.kind.toUpperCase();
  const env = stepEnv(run, st);
  const { sources: patterns, dest: destWord, chown: chownSpec, contents } = expandCopy(instr, env);
  const temps: Array<() => Promise<void>> = [];
  try {
    // As dockerd 20.10, --from is not expanded.
    const tree: SourceTree = instr.from ? await imageTree(cx, instr.from, temps) : run.ctx;
    const sources: CopySource[] = [];
    const local = patterns.filter((p) => !/^https?:\/\//.test(p));
    const urls = instr.kind === 'add' ? patterns.filter((p) => /^https?:\/\//.test(p)) : [];
    if (instr.checksum) checkChecksumUse(instr.checksum, patterns, urls, contents.length);
    try {
      for (const url of urls) {
        const dir = await mkdtemp(path.join(cx.deps.tmpDir, 'add-'));
        temps.push(() => rm(dir, { recursive: true, force: true }));
        const got = await fetchUrl(url, dir, run.signal, downloading(run));
        if (instr.checksum) await verifyChecksum(url, got.abs, instr.checksum);
        sources.push(got);
      }
      if (local.length || (instr.kind === 'copy' && patterns.length))
        sources.unshift(...resolveSources(tree, instr.kind === 'copy' ? patterns : local));
      if (contents.length) sources.push(...(await inlineSources(cx, contents, temps)));
    } catch (e) {
      if (isEngineError(e) && /^digest mismatch/.test(e.message)) throw e;
      throw invalidParameter(`${CMD} failed: ${messageOf(e)}`, e);
    }
    if (!sources.length) throw invalidParameter(`${CMD} failed: no source files were specified`);
    const sum = await sourceChecksum(sources);
    const text = `${CMD} ${instr.chmod ? `--chmod=${instr.chmod} ` : ''}${sum} in ${destWord} `;
    const probe: ContainerConfigFields = { ...st.config, Cmd: [...shellOf(st.config), `#(nop) ${text}`] };
    const cached = await cachedImage(cx, st, probe, st.config);
    if (cached) {
      useCached(run, st, cached);
      return;
    }
    const id = await createContainer(cx, st, { ...st.config, Cmd: probe.Cmd });
    try {
      const chown = chownSpec ? await owner(cx, id, chownSpec) : undefined;
      const dest = destWord.startsWith('/')
        ? destWord
        : path.posix.join('/', st.config.WorkingDir || '/', destWord) + (destWord.endsWith('/') ? '/' : '');
      const single = sources.length === 1 && !patterns.some(hasWildcard) ? sources[0]! : undefined;
      const tarOf = (o: Parameters<typeof sourcesTar>[0]) =>
        instr.chmod ? withMode(sourcesTar(o), Number.parseInt(instr.chmod, 8)) : sourcesTar(o);
      let destIsDir = dest.endsWith('/') || !single || single.stat.isDirectory();
      if (!destIsDir && (await isDir(cx, id, dest))) destIsDir = true;
      if (single?.unnamed && destIsDir) throw invalidParameter(`cannot determine filename for source ${patterns[0]}`);
      const dir = destIsDir ? dest : path.posix.dirname(dest);
      await makeDirs(cx, id, dir, chown);
      await cx.deps.archives.put(
        id,
        dir,
        tarOf({
          sources,
          destIsDir,
          ...(destIsDir ? {} : { destName: path.posix.basename(dest) }),
          ...(chown ? { chown } : {}),
          extractArchives: instr.kind === 'add',
        }),
        { noOverwriteDirNonDir: false, copyUIDGID: false },
      );
      st.imageId = await cx.deps.commits.commitStep({
        container: id,
        parent: st.imageId,
        config: { ...st.config, Image: st.imageId ?? '' },
        containerConfig: { ...probe, Image: st.imageId ?? '' },
        ...(st.author ? { author: st.author } : {}),
      });
    } catch (e) {
      if (isEngineError(e) && !/^(COPY|ADD) failed/.test(e.message) && e.kind === 'invalid')
        throw invalidParameter(`${CMD} failed: ${e.message}`, e);
      throw e;
    } finally {
      await removeContainer(cx, id);
    }
    run.emit({ stream: ` ---> ${short(st.imageId)}\n` });
  } finally {
    for (const t of temps.reverse()) await t().catch(() => undefined);
  }
}

async function isDir(cx: StepContext, id: string, p: string): Promise<boolean> {
  try {
    const s = await cx.deps.archives.stat(id, p);
    return (s.mode & 0x80000000) !== 0; // Go's os.ModeDir
  } catch (e) {
    if (isEngineError(e, 'not-found')) return false;
    throw e;
  }
}

/** Creates the missing directories of `dir` in the container (owned by `chown` when given, as dockerd). */
export async function makeDirs(
  cx: StepContext,
  id: string,
  dir: string,
  chown?: { uid: number; gid: number },
): Promise<void> {
  const parts = dir.split('/').filter(Boolean);
  let k = parts.length;
  while (k > 0 && !(await isDir(cx, id, `/${parts.slice(0, k).join('/')}`))) k--;
  if (k === parts.length) return;
  const pack = tar.pack();
  for (let i = k; i < parts.length; i++) {
    pack.entry({
      name: `${parts.slice(k, i + 1).join('/')}/`,
      type: 'directory',
      mode: 0o755,
      uid: chown?.uid ?? 0,
      gid: chown?.gid ?? 0,
      mtime: new Date(),
    });
  }
  pack.finalize();
  await cx.deps.archives.put(id, `/${parts.slice(0, k).join('/')}`, ReadableStream.from(pack), {
    noOverwriteDirNonDir: false,
    copyUIDGID: false,
  });
}

/** --chown: numbers as they are, names looked up in the container's /etc/passwd and /etc/group. */
async function owner(cx: StepContext, id: string, spec: string): Promise<{ uid: number; gid: number }> {
  const [user = '', group] = spec.split(':');
  const lookup = async (file: string, name: string, what: string): Promise<number> => {
    if (/^\d+$/.test(name)) return Number(name);
    const text = await readFile(cx, id, file).catch(() => '');
    const line = text.split('\n').find((l) => l.split(':')[0] === name);
    if (!line)
      throw invalidParameter(`unable to convert uid/gid chown string to host mapping: no such ${what}: ${name}`);
    return Number(line.split(':')[2]);
  };
  const uid = await lookup('/etc/passwd', user, 'user');
  let gid = uid;
  if (group !== undefined) gid = await lookup('/etc/group', group, 'group');
  else if (!/^\d+$/.test(user)) {
    const text = await readFile(cx, id, '/etc/passwd').catch(() => '');
    gid = Number(
      text
        .split('\n')
        .find((l) => l.split(':')[0] === user)
        ?.split(':')[3] ?? uid,
    );
  }
  return { uid, gid };
}

async function readFile(cx: StepContext, id: string, file: string): Promise<string> {
  const { tar: archive } = await cx.deps.archives.get(id, file);
  const extract = tar.extract();
  const chunks: Buffer[] = [];
  const done = new Promise<void>((resolve, reject) => {
    extract.on('entry', (_h, stream, next) => {
      stream.on('data', (c: unknown) => chunks.push(c as Buffer));
      stream.on('end', next);
      stream.resume();
    });
    extract.on('finish', resolve);
    extract.on('error', reject);
  });
  archive.pipe(extract);
  await done;
  return Buffer.concat(chunks).toString('utf8');
}
