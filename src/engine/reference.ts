// Image references: Docker's grammar (distribution's reference package) and its
// normalisation rules, with the error texts dockerd answers (400 on the API).
//
//   busybox                      → docker.io/library/busybox:latest
//   127.0.0.1:5000/x:tag         → 127.0.0.1:5000/x:tag
//   x@sha256:<64 hex>            → docker.io/library/x@sha256:…
//
// The first path component is a registry host only when it contains "." or ":"
// or is exactly "localhost" (dockerd 20.10's rule); "index.docker.io" is the
// legacy spelling of "docker.io".
//
// A leaf: imports nothing of the engine's folders, so that images, registry and
// content can all use it without needing each other.
import { isDigest, parseDigest } from './digest.js';
import { invalidParameter } from '../errors.js';

export const DEFAULT_DOMAIN = 'docker.io';
const DEFAULT_TAG = 'latest';
const LEGACY_DEFAULT_DOMAIN = 'index.docker.io';
const OFFICIAL_REPO_PREFIX = 'library/';
/** distribution's NameTotalLengthMax: the whole name, domain included. */
const NAME_TOTAL_LENGTH_MAX = 255;

export interface Reference {
  /** Registry host, with port when given: `docker.io`, `127.0.0.1:5000`. */
  domain: string;
  /** Repository path inside the registry: `library/busybox`. */
  path: string;
  /** Fully qualified name: `docker.io/library/busybox`. */
  name: string;
  /** The name as docker shows it: `busybox`, `127.0.0.1:5000/x`. */
  familiar: string;
  tag?: string;
  digest?: string;
}

// ---- grammar -----------------------------------------------------------------
// Built from the same pieces as distribution's regexp.go so the two can be read
// side by side. Inputs are length-capped before matching (see parse) so that
// backtracking over the nested quantifiers stays cheap.

const ALNUM = '[a-z0-9]+';
const SEPARATOR = '(?:[._]|__|[-]+)';
const PATH_COMPONENT = `${ALNUM}(?:${SEPARATOR}${ALNUM})*`;
const REMOTE_NAME = `${PATH_COMPONENT}(?:/${PATH_COMPONENT})*`;
const DOMAIN_COMPONENT = '(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])';
const IPV6 = '\\[(?:[a-fA-F0-9:]+)\\]';
const HOST = `(?:${DOMAIN_COMPONENT}(?:\\.${DOMAIN_COMPONENT})*|${IPV6})`;
const DOMAIN_AND_PORT = `${HOST}(?::[0-9]+)?`;
const TAG = '[\\w][\\w.-]{0,127}';
const DIGEST = '[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}';
const NAME = `(?:${DOMAIN_AND_PORT}/)?${REMOTE_NAME}`;

const REFERENCE_RE = new RegExp(`^(${NAME})(?::(${TAG}))?(?:@(${DIGEST}))?$`);
const ANCHORED_NAME_RE = new RegExp(`^(?:(${DOMAIN_AND_PORT})/)?(${REMOTE_NAME})$`);
const ANCHORED_TAG_RE = new RegExp(`^${TAG}$`);
const ANCHORED_DIGEST_RE = new RegExp(`^${DIGEST}$`);
const IDENTIFIER_RE = /^[a-f0-9]{64}$/;

/** Longest possible valid reference: 255 name + ":" + 128 tag + "@" + sha512 digest. */
const MAX_REFERENCE_LENGTH = NAME_TOTAL_LENGTH_MAX + 1 + 128 + 1 + 'sha512:'.length + 128;

// ---- parsing -----------------------------------------------------------------

const invalidFormat = () => invalidParameter('invalid reference format');
const mustBeLowercase = () => invalidParameter('invalid reference format: repository name must be lowercase');

/** Splits off the registry host the way dockerd 20.10 does (see the file comment). */
function splitDockerDomain(s: string): { domain: string; remainder: string } {
  const slash = s.indexOf('/');
  const first = slash === -1 ? '' : s.slice(0, slash);
  let domain = DEFAULT_DOMAIN;
  let remainder = s;
  if (slash !== -1 && (first === 'localhost' || /[.:]/.test(first))) {
    domain = first === LEGACY_DEFAULT_DOMAIN ? DEFAULT_DOMAIN : first;
    remainder = s.slice(slash + 1);
  }
  if (domain === DEFAULT_DOMAIN && !remainder.includes('/')) remainder = OFFICIAL_REPO_PREFIX + remainder;
  return { domain, remainder };
}

function familiarize(domain: string, path: string): string {
  if (domain !== DEFAULT_DOMAIN) return `${domain}/${path}`;
  if (path.startsWith(OFFICIAL_REPO_PREFIX)) {
    const rest = path.slice(OFFICIAL_REPO_PREFIX.length);
    if (!rest.includes('/')) return rest;
  }
  return path;
}

function makeReference(domain: string, path: string, tag?: string, digest?: string): Reference {
  const ref: Reference = { domain, path, name: `${domain}/${path}`, familiar: familiarize(domain, path) };
  if (tag) ref.tag = tag;
  if (digest) ref.digest = digest;
  return ref;
}

export interface ParseOptions {
  /** Add `:latest` when neither a tag nor a digest is given (default true). */
  defaultTag?: boolean;
}

/**
 * Parses and normalises a reference as dockerd does for `docker pull NAME`:
 * `busybox` → docker.io/library/busybox:latest. Throws `invalid` EngineErrors
 * with dockerd's wording. A reference may carry both a tag and a digest; the
 * digest is what gets pulled.
 */
export function parseReference(s: string, opts: ParseOptions = {}): Reference {
  if (IDENTIFIER_RE.test(s)) {
    throw invalidParameter(`invalid repository name (${s}), cannot specify 64-byte hexadecimal strings`);
  }
  if (s.length > MAX_REFERENCE_LENGTH) throw invalidFormat();
  const { domain, remainder } = splitDockerDomain(s);
  const colon = remainder.indexOf(':');
  const remote = colon === -1 ? remainder : remainder.slice(0, colon);
  if (remote.toLowerCase() !== remote) throw mustBeLowercase();

  const full = `${domain}/${remainder}`;
  const m = REFERENCE_RE.exec(full);
  if (!m) {
    if (REFERENCE_RE.test(full.toLowerCase())) throw mustBeLowercase();
    throw invalidFormat();
  }
  const [, name = '', tag, digest] = m;
  if (name.length > NAME_TOTAL_LENGTH_MAX) {
    throw invalidParameter(`repository name must not be more than ${NAME_TOTAL_LENGTH_MAX} characters`);
  }
  if (digest !== undefined) parseDigest(digest);
  const parts = ANCHORED_NAME_RE.exec(name);
  // The domain was split off above, so the name regex always yields both parts.
  const ref = makeReference(parts?.[1] ?? domain, parts?.[2] ?? remainder, tag, digest);
  if (!ref.tag && !ref.digest && opts.defaultTag !== false) ref.tag = DEFAULT_TAG;
  return ref;
}

/** A new reference with `tag` (validated), keeping the name and any digest. */
export function withTag(ref: Reference, tag: string): Reference {
  if (!ANCHORED_TAG_RE.test(tag)) throw invalidParameter('invalid tag format');
  return makeReference(ref.domain, ref.path, tag, ref.digest);
}

/** A new reference naming only `digest` (any tag is dropped, as dockerd's TrimNamed). */
function withDigest(ref: Reference, digest: string): Reference {
  if (!ANCHORED_DIGEST_RE.test(digest)) throw invalidParameter('invalid digest format');
  parseDigest(digest);
  return makeReference(ref.domain, ref.path, undefined, digest);
}

/**
 * `POST /images/create?fromImage=…&tag=…` semantics (dockerd's PullImage):
 * a trailing ":" on fromImage is ignored; `tag` may be a digest, which then
 * replaces any tag or digest in fromImage; a plain tag replaces fromImage's tag.
 *
 * Deviation: when neither names a tag or digest dockerd pulls *every* tag of
 * the repository; berth pulls `latest`, which is what the docker CLI asks for.
 */
export function normalizeTag(fromImage: string, tag?: string): Reference {
  const image = fromImage.endsWith(':') ? fromImage.slice(0, -1) : fromImage;
  let ref = parseReference(image, { defaultTag: false });
  if (tag) ref = isDigest(tag) ? withDigest(ref, tag) : withTag(ref, tag);
  if (!ref.tag && !ref.digest) ref = withTag(ref, DEFAULT_TAG);
  return ref;
}

// ---- formatting --------------------------------------------------------------

const suffix = (ref: Pick<Reference, 'tag' | 'digest'>) =>
  (ref.tag ? `:${ref.tag}` : '') + (ref.digest ? `@${ref.digest}` : '');

/** `busybox`, `127.0.0.1:5000/busybox`, `user/app`. */
export const familiarName = (ref: Reference): string => ref.familiar;

/** `busybox:latest`, `127.0.0.1:5000/busybox:latest`, `busybox@sha256:…`. */
export const familiarString = (ref: Reference): string => ref.familiar + suffix(ref);

/** `docker.io/library/busybox:latest`. */
export const referenceString = (ref: Reference): string => ref.name + suffix(ref);

/** What the registry is asked for: the digest when there is one, else the tag. */
export const manifestReference = (ref: Reference): string => ref.digest ?? ref.tag ?? DEFAULT_TAG;
