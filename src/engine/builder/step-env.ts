// The words a step's variables are expanded in: the meta ARGs, the stage's
// config Env, its declared args and the proxy args given.
import { envKey } from '../dockerfile/index.js';
import { formatPlatform, hostPlatform, parsePlatform } from '../registry/manifest.js';
import type { Run, StageState } from './build-types.js';

/** dockerd's predefined build args: usable without an ARG, never reported unused, kept out of the cache key. */
export const PROXY_ARGS = new Set([
  'HTTP_PROXY',
  'http_proxy',
  'HTTPS_PROXY',
  'https_proxy',
  'FTP_PROXY',
  'ftp_proxy',
  'NO_PROXY',
  'no_proxy',
  'ALL_PROXY',
  'all_proxy',
]);
export const DEFAULT_PATH = 'PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

export function metaEnv(run: Run): string[] {
  return [...run.metaArgs].filter(([, v]) => v !== undefined).map(([k, v]) => `${k}=${v}`);
}

/** The environment words are expanded in: the config's Env, then the declared args with values. */
export function stepEnv(run: Run, st: StageState): string[] {
  const env = [...(st.config.Env ?? [])];
  const keys = new Set(env.map(envKey));
  for (const [k, v] of argValues(run, st)) if (!keys.has(k)) env.push(`${k}=${v}`);
  return env;
}

/** The declared args that have a value, and the proxy args given; in declaration order. */
export function argValues(run: Run, st: StageState): Array<[string, string]> {
  const out: Array<[string, string]> = [];
  for (const [k, v] of st.args) if (v !== undefined) out.push([k, v]);
  for (const k of PROXY_ARGS) {
    const v = run.req.buildArgs[k];
    if (v != null && !st.args.has(k)) out.push([k, v]);
  }
  return out;
}

/**
 * BuildKit's automatic platform args: meta args every build has (FROM can use
 * them; a stage's `ARG TARGETARCH` takes their value). berth builds for the
 * host, so the target is the build platform unless the request names its
 * equal.
 */
export function platformArgs(platform: string | undefined): Map<string, string> {
  const build = hostPlatform();
  const target = platform ? parsePlatform(platform) : build;
  const out = new Map<string, string>();
  for (const [prefix, p] of [
    ['BUILD', build],
    ['TARGET', target],
  ] as const) {
    const formatted = formatPlatform(p);
    out.set(`${prefix}PLATFORM`, formatted);
    out.set(`${prefix}OS`, p.os);
    out.set(`${prefix}ARCH`, p.architecture);
    out.set(`${prefix}VARIANT`, formatted.split('/')[2] ?? '');
  }
  return out;
}
