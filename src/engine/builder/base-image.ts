// A stage's base image: the platform asked for checked against the host's, the
// image found locally or pulled with the credentials of its registry.
import { invalidParameter, isEngineError } from '../../errors.js';
import { parseReference } from '../reference.js';
import { formatPlatform, hostPlatform, parsePlatform, platformMatches } from '../registry/manifest.js';
import type { StepContext } from './build-types.js';
import { findDockerHub } from './build-texts.js';

/** An unparsable platform gets containerd's words; a foreign one is refused: berth runs the steps here. */
export function checkPlatform(platform: string): void {
  const want = parsePlatform(platform);
  const host = hostPlatform();
  if (!platformMatches(host, want))
    throw invalidParameter(`platform ${platform} is not supported: berthd builds for ${formatPlatform(host)} only`);
}

/** The base image: present (unless `pull`), or pulled with the credentials of its registry. */
export async function baseImage(cx: StepContext, name: string): Promise<string> {
  const { run } = cx;
  const present = () => {
    try {
      return cx.deps.images.find(name).id;
    } catch (e) {
      if (isEngineError(e, 'not-found')) return undefined;
      throw e;
    }
  };
  const have = present();
  // An image id is never pulled.
  if (have && (!run.req.pull || /^(sha256:)?[0-9a-f]{12,64}$/.test(name))) {
    run.req.steps?.({ type: 'cached' });
    return have;
  }
  const ref = parseReference(name);
  const auth =
    run.req.auths[ref.domain] ??
    (ref.domain === 'docker.io' ? findDockerHub(run.req.auths) : undefined) ??
    (await run.req.session?.credentials?.(ref.domain));
  try {
    await cx.deps.images.pull(name, undefined, auth, (e) => run.emit({ pull: e }), { signal: run.signal });
  } catch (e) {
    if (have && run.req.pull) {
      cx.log.info({ err: e, name }, 'pull of a base image failed; the local one is used');
      return have;
    }
    throw e;
  }
  return cx.deps.images.find(name).id;
}
