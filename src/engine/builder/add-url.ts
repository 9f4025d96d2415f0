// ADD <url>: the download into a file of the build, named as dockerd names it,
// to be copied as a source.
import { createWriteStream, utimesSync } from 'node:fs';
import { mkdir, rm, stat } from 'node:fs/promises';
import { posix } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { isEngineError, messageOf, systemError } from '../../errors.js';
import { getWithStatusError, type Progress, responseBody } from './context.js';
import type { CopySource } from './sources.js';

/**
 * ADD's download: the URL's body into a file of `dir` (created: a fresh
 * directory of the caller's), mode 0600, its mtime the Last-Modified header's
 * (the epoch without one), named after the URL's path or the
 * Content-Disposition's filename (dockerd's getFilenameForDownload).
 */
export async function fetchUrl(
  url: string,
  dir: string,
  signal?: AbortSignal,
  progress?: Progress,
): Promise<CopySource> {
  await mkdir(dir, { recursive: true });
  const res = await getWithStatusError(url, signal);
  const filename = downloadName(url, res.headers.get('content-disposition'));
  const abs = posix.join(dir, filename ?? '__unnamed__');
  // O_EXCL: never written through a link planted at that name.
  const out = createWriteStream(abs, { flags: 'wx', mode: 0o600 });
  try {
    await pipeline(responseBody(res, progress), out, ...(signal ? [{ signal }] : []));
  } catch (e) {
    await rm(abs, { force: true });
    throw isEngineError(e) ? e : systemError(`downloading ${url}: ${messageOf(e)}`, e);
  }
  const lastModified = Date.parse(res.headers.get('last-modified') ?? '');
  const mtime = Number.isFinite(lastModified) && lastModified > 0 ? lastModified / 1000 : 0;
  utimesSync(abs, mtime, mtime);
  const source: CopySource = { rel: filename ?? '__unnamed__', abs, stat: await stat(abs), download: true };
  if (filename === undefined) source.unnamed = true;
  return source;
}

/** The download's file name: the URL path's base, else Content-Disposition's filename; undefined when neither gives one. */
export function downloadName(url: string, disposition: string | null): string | undefined {
  let path = '';
  try {
    path = decodeURIComponent(new URL(url).pathname);
  } catch {
    path = '';
  }
  const usable = (n: string) => n !== '' && n !== '.' && n !== '..' && n !== '/' && !n.includes('\0');
  if (path !== '' && !path.endsWith('/')) {
    const base = posix.basename(path);
    if (usable(base)) return base;
  }
  const m = disposition ? /(?:^|;)\s*filename\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^;\s]+))/i.exec(disposition) : null;
  const given = m ? (m[1]?.replace(/\\(.)/g, '$1') ?? m[2] ?? '') : '';
  if (given !== '' && !given.endsWith('/')) {
    const base = posix.basename(given);
    if (usable(base)) return base;
  }
  return undefined;
}
