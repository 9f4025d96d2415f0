// Manifest and index documents: media types, strict parsing, and choosing the
// host's platform from a list/index.
//
// Parsing refuses what containers/image and umoci refuse since CVE-2021-41190:
// a document that is both a manifest and an index (has `layers` and
// `manifests`), and one whose declared `mediaType` contradicts the
// Content-Type it was served with, so that one digest cannot mean two things.
import { z } from 'zod';
import { lazySchema } from '../../lazy-schema.js';
import { invalidParameter, notFound } from '../../errors.js';
import { isDigest } from '../digest.js';

export const MediaTypes = {
  dockerManifest: 'application/vnd.docker.distribution.manifest.v2+json',
  dockerList: 'application/vnd.docker.distribution.manifest.list.v2+json',
  ociManifest: 'application/vnd.oci.image.manifest.v1+json',
  ociIndex: 'application/vnd.oci.image.index.v1+json',
  dockerSchema1: 'application/vnd.docker.distribution.manifest.v1+json',
  dockerSchema1Signed: 'application/vnd.docker.distribution.manifest.v1+prettyjws',
  dockerConfig: 'application/vnd.docker.container.image.v1+json',
  ociConfig: 'application/vnd.oci.image.config.v1+json',
} as const;

const MANIFEST_TYPES: ReadonlySet<string> = new Set([MediaTypes.dockerManifest, MediaTypes.ociManifest]);
const INDEX_TYPES: ReadonlySet<string> = new Set([MediaTypes.dockerList, MediaTypes.ociIndex]);
const SCHEMA1_TYPES: ReadonlySet<string> = new Set([MediaTypes.dockerSchema1, MediaTypes.dockerSchema1Signed]);

/** Accept header for manifest GETs: every format berth can pull, nothing it cannot. */
export const MANIFEST_ACCEPT = [
  MediaTypes.ociIndex,
  MediaTypes.dockerList,
  MediaTypes.ociManifest,
  MediaTypes.dockerManifest,
].join(', ');

const isManifestType = (t: string) => MANIFEST_TYPES.has(t);
const isIndexType = (t: string) => INDEX_TYPES.has(t);

const PlatformSchema = lazySchema(() =>
  z.object({
    architecture: z.string(),
    os: z.string(),
    variant: z.string().optional(),
    'os.version': z.string().optional(),
    'os.features': z.array(z.string()).optional(),
  }),
);

const DescriptorSchema = lazySchema(() =>
  z.object({
    mediaType: z.string().min(1),
    digest: z.string().refine(isDigest, 'not a valid digest'),
    size: z.number().int().nonnegative().max(Number.MAX_SAFE_INTEGER),
    urls: z.array(z.string()).optional(),
    annotations: z.record(z.string(), z.string()).optional(),
    platform: PlatformSchema.optional(),
    artifactType: z.string().optional(),
  }),
);

const ManifestSchema = lazySchema(() =>
  z.object({
    schemaVersion: z.literal(2),
    mediaType: z.string().optional(),
    config: DescriptorSchema,
    layers: z.array(DescriptorSchema),
    annotations: z.record(z.string(), z.string()).optional(),
    subject: DescriptorSchema.optional(),
  }),
);

const IndexSchema = lazySchema(() =>
  z.object({
    schemaVersion: z.literal(2),
    mediaType: z.string().optional(),
    manifests: z.array(DescriptorSchema),
    annotations: z.record(z.string(), z.string()).optional(),
  }),
);

export type Platform = z.infer<typeof PlatformSchema>;
export type Descriptor = z.infer<typeof DescriptorSchema>;
export type ImageManifest = z.infer<typeof ManifestSchema>;
export type ImageIndex = z.infer<typeof IndexSchema>;

export type ManifestDocument =
  | { kind: 'manifest'; mediaType: string; manifest: ImageManifest }
  | { kind: 'index'; mediaType: string; index: ImageIndex };

const invalidManifest = (why: string) => invalidParameter(`invalid manifest: ${why}`);
/** dockerd's unsupportedMediaTypeError. */
const unsupportedMediaType = (t: string) => invalidParameter(`unsupported media type ${t}`);

/** `application/json; charset=utf-8` → `application/json`. */
const baseMediaType = (contentType: string | undefined) => (contentType ?? '').split(';')[0]!.trim().toLowerCase();

/**
 * Parses a manifest or index and decides what it is from, in order: the
 * document's own `mediaType`, the Content-Type, its shape. The caller caps the
 * bytes before this and verifies their digest.
 */
export function parseManifest(bytes: Buffer, contentType?: string): ManifestDocument {
  let doc: unknown;
  try {
    doc = JSON.parse(bytes.toString('utf8'));
  } catch (e) {
    throw invalidManifest((e as Error).message);
  }
  if (typeof doc !== 'object' || doc === null || Array.isArray(doc)) throw invalidManifest('not a JSON object');
  const obj = doc as Record<string, unknown>;
  const served = baseMediaType(contentType);
  if (obj.schemaVersion === 1 || SCHEMA1_TYPES.has(served)) {
    throw unsupportedMediaType(SCHEMA1_TYPES.has(served) ? served : MediaTypes.dockerSchema1Signed);
  }
  if ('layers' in obj && 'manifests' in obj) {
    throw invalidManifest(
      'document has both "layers" and "manifests", so it could be read as an image or as an index (CVE-2021-41190)',
    );
  }
  const mediaType = decideMediaType(obj, served);
  return isIndexType(mediaType) ? parseIndex(obj, mediaType) : parseImageManifest(obj, mediaType);
}

function decideMediaType(obj: Record<string, unknown>, served: string): string {
  const declared = typeof obj.mediaType === 'string' ? obj.mediaType : undefined;
  if (obj.mediaType !== undefined && declared === undefined) throw invalidManifest('mediaType must be a string');
  const servedKnown = isManifestType(served) || isIndexType(served);
  if (declared !== undefined && servedKnown && declared !== served) {
    throw invalidManifest(`mediaType ${declared} contradicts the Content-Type ${served} it was served with`);
  }
  // A generic Content-Type (application/json, octet-stream) leaves the shape to decide.
  const type = declared ?? (servedKnown ? served : 'manifests' in obj ? MediaTypes.ociIndex : MediaTypes.ociManifest);
  if (!isManifestType(type) && !isIndexType(type)) throw unsupportedMediaType(type);
  return type;
}

function parseIndex(obj: Record<string, unknown>, mediaType: string): ManifestDocument {
  if ('config' in obj || 'layers' in obj) throw invalidManifest(`${mediaType} must not have "config" or "layers"`);
  const r = IndexSchema.safeParse(obj);
  if (!r.success) throw invalidManifest(describeIssues(r.error));
  return { kind: 'index', mediaType, index: r.data };
}

function parseImageManifest(obj: Record<string, unknown>, mediaType: string): ManifestDocument {
  if ('manifests' in obj) throw invalidManifest(`${mediaType} must not have "manifests"`);
  const r = ManifestSchema.safeParse(obj);
  if (!r.success) throw invalidManifest(describeIssues(r.error));
  return { kind: 'manifest', mediaType, manifest: r.data };
}

function describeIssues(err: z.ZodError): string {
  return err.issues.map((i) => `${i.path.length ? i.path.join('.') : 'document'}: ${i.message}`).join('; ');
}

// ---- platforms -------------------------------------------------------------------

/** Node's process.arch → the OCI/Go GOARCH names image indexes use. */
const ARCH: Record<string, string> = {
  x64: 'amd64',
  arm64: 'arm64',
  arm: 'arm',
  ia32: '386',
  ppc64: 'ppc64le',
  s390x: 's390x',
  riscv64: 'riscv64',
  loong64: 'loong64',
  mips: 'mips',
  mipsel: 'mipsle',
};
/** Node's process.arch in Go's GOARCH spelling. */
export const goArch = (a: string = process.arch): string => ARCH[a] ?? a;

/** Spellings people and old images use for the same architecture. */
const ARCH_ALIASES: Record<string, { architecture: string; variant?: string }> = {
  x86_64: { architecture: 'amd64' },
  'x86-64': { architecture: 'amd64' },
  aarch64: { architecture: 'arm64' },
  armhf: { architecture: 'arm', variant: 'v7' },
  armel: { architecture: 'arm', variant: 'v6' },
  i386: { architecture: '386' },
  i686: { architecture: '386' },
};
/** The variant an index entry means when it names none (containerd's normalisation). */
const DEFAULT_VARIANT: Record<string, string> = { amd64: 'v1', arm64: 'v8', arm: 'v7' };

/** The platform this daemon runs containers for. */
export function hostPlatform(): Platform {
  const os = process.platform === 'win32' ? 'windows' : process.platform;
  const architecture = goArch();
  const armVersion = (process.config.variables as { arm_version?: string }).arm_version;
  const variant = architecture === 'arm' && armVersion ? `v${armVersion}` : DEFAULT_VARIANT[architecture];
  return normalizePlatform({ os, architecture, ...(variant ? { variant } : {}) });
}

function normalizePlatform(p: Platform): Platform {
  const alias = ARCH_ALIASES[p.architecture.toLowerCase()];
  const architecture = alias?.architecture ?? p.architecture.toLowerCase();
  const variant = (p.variant || alias?.variant || DEFAULT_VARIANT[architecture] || '').toLowerCase();
  return { ...p, os: p.os.toLowerCase(), architecture, ...(variant ? { variant } : { variant: undefined }) };
}

/** `linux/arm64/v8`, `linux/amd64` (the default variant is not shown). */
export function formatPlatform(p: Platform): string {
  const n = normalizePlatform(p);
  const showVariant = n.variant && n.variant !== DEFAULT_VARIANT[n.architecture];
  return [n.os, n.architecture, ...(showVariant ? [n.variant] : [])].join('/');
}

/** The same platform, once normalised (arm64 is arm64/v8). */
export function samePlatform(a: Platform, b: Platform): boolean {
  const x = normalizePlatform(a);
  const y = normalizePlatform(b);
  return x.os === y.os && x.architecture === y.architecture && x.variant === y.variant;
}

/** A JSON-encoded OCI platform (push's `platform=`, API 1.46), checked as dockerd's DecodePlatform does. */
export function decodePlatform(json: string): Platform {
  let p: Partial<Platform>;
  try {
    p = JSON.parse(json) as Partial<Platform>;
  } catch (e) {
    throw invalidParameter(`failed to parse platform: ${(e as Error).message}`);
  }
  if (typeof p !== 'object' || p === null) throw invalidParameter('failed to parse platform: not an object');
  if (!p.os || !p.architecture) {
    const optional = p.variant || p['os.version'] || p['os.features']?.length;
    throw invalidParameter(
      !p.os && !p.architecture && optional
        ? 'optional platform fields provided, but OS and Architecture are missing'
        : 'both OS and Architecture must be provided',
    );
  }
  return p as Platform;
}

/** GOOS values (Go's syslist, as containerd's platforms package knows them). */
const KNOWN_OS: ReadonlySet<string> = new Set(
  'aix android darwin dragonfly freebsd hurd illumos ios js linux nacl netbsd openbsd plan9 solaris windows zos'.split(
    ' ',
  ),
);
/** GOARCH values (Go's syslist, as containerd's platforms package knows them). */
const KNOWN_ARCH: ReadonlySet<string> = new Set(
  '386 amd64 amd64p32 arm armbe arm64 arm64be ppc64 ppc64le loong64 mips mipsle mips64 mips64le mips64p32 mips64p32le ppc riscv riscv64 s390 s390x sparc sparc64 wasm'.split(
    ' ',
  ),
);
const COMPONENT = /^[A-Za-z0-9_.-]+$/;
/** `os[(version[+feature]*)]`, containerd's first component. */
const OS_COMPONENT = /^([A-Za-z0-9_-]+)(?:\(([A-Za-z0-9_.%-]*)((?:\+[A-Za-z0-9_.%-]+)*)\))?$/;
const quote = (s: string) => JSON.stringify(s);
const badPlatform = (message: string) => invalidParameter(`${message}: invalid argument`);

/** containerd's normalizeArch: the architecture's canonical name, and the variant it implies. */
function canonicalArch(arch: string, variant: string): { architecture: string; variant: string } {
  const a = arch.toLowerCase();
  const v = variant.toLowerCase();
  if (a === 'i386') return { architecture: '386', variant: '' };
  if (a === 'x86_64' || a === 'x86-64' || a === 'amd64') return { architecture: 'amd64', variant: v === 'v1' ? '' : v };
  if (a === 'aarch64' || a === 'arm64') {
    const level = ['8', 'v8', 'v8.0'].includes(v) ? '' : ['9', '9.0', 'v9.0'].includes(v) ? 'v9' : v;
    return { architecture: 'arm64', variant: level };
  }
  if (a === 'armhf') return { architecture: 'arm', variant: 'v7' };
  if (a === 'armel') return { architecture: 'arm', variant: 'v6' };
  if (a === 'arm')
    return { architecture: 'arm', variant: v === '' || v === '7' ? 'v7' : /^[568]$/.test(v) ? `v${v}` : v };
  return { architecture: a, variant: v };
}

/**
 * Parses a platform specifier, `os[(version)]`, `arch` or `os/arch[/variant]`
 * (the API's `platform=` on pull, import, create and build, and FROM
 * --platform), as containerd's platforms.Parse does, with its words: every
 * place that takes one answers an unparsable one alike, before any work.
 */
export function parsePlatform(specifier: string): Platform {
  if (specifier.includes('*')) throw badPlatform(`${quote(specifier)}: wildcards not yet supported`);
  const parts = specifier.split('/');
  if (parts.length > 4) parts.splice(3, parts.length, parts.slice(3).join('/'));
  const osMatch = OS_COMPONENT.exec(parts[0]!);
  if (!osMatch) {
    throw badPlatform(
      `${quote(parts[0]!)} is an invalid OS component of ${quote(specifier)}: OSAndVersion specifier component must match ${quote(OS_COMPONENT.source)}`,
    );
  }
  for (const part of parts.slice(1)) {
    if (!COMPONENT.test(part)) {
      throw badPlatform(
        `${quote(part)} is an invalid component of ${quote(specifier)}: platform specifier component must match ${quote(COMPONENT.source)}`,
      );
    }
  }
  const os = osMatch[1]!.toLowerCase() === 'macos' ? 'darwin' : osMatch[1]!.toLowerCase();
  const decodeEscapes = (v: string) => {
    try {
      return decodeURIComponent(v);
    } catch {
      throw badPlatform(`${quote(specifier)} has an invalid OS option ${quote(v)}`);
    }
  };
  const osOptions = {
    ...(osMatch[2] ? { 'os.version': decodeEscapes(osMatch[2]) } : {}),
    ...(osMatch[3] ? { 'os.features': osMatch[3].slice(1).split('+').map(decodeEscapes) } : {}),
  };
  const withVariant = (p: { architecture: string; variant: string }) => ({
    architecture: p.architecture,
    ...(p.variant ? { variant: p.variant } : {}),
  });
  // Without a variant named, arm means arm/v7, which containerd leaves unsaid.
  const archOnly = (word: string) => {
    const arch = canonicalArch(word, '');
    return withVariant(arch.architecture === 'arm' && arch.variant === 'v7' ? { ...arch, variant: '' } : arch);
  };
  if (parts.length === 1) {
    const host = hostPlatform();
    // A known OS takes this machine's architecture; else the word may be an architecture, on this OS.
    if (KNOWN_OS.has(os)) return { os, ...osOptions, architecture: host.architecture };
    const arch = archOnly(parts[0]!);
    if (KNOWN_ARCH.has(arch.architecture)) return { os: host.os, ...arch };
    throw badPlatform(`${quote(specifier)}: unknown operating system or architecture`);
  }
  if (parts.length === 2) return { os, ...osOptions, ...archOnly(parts[1]!) };
  if (parts.length === 3) {
    const arch = canonicalArch(parts[1]!, parts[2]!);
    return {
      os,
      ...osOptions,
      ...withVariant(arch.architecture === 'arm64' && !arch.variant ? { ...arch, variant: 'v8' } : arch),
    };
  }
  throw badPlatform(`${quote(specifier)}: cannot parse platform specifier`);
}

/**
 * Whether an image of platform `image` is one of `want` (dockerd's
 * OnlyPlatformWithFallback): a compatible variant, or none named on the image.
 */
export function platformMatches(want: Platform, image: Platform): boolean {
  if (platformScore(want, image) !== undefined) return true;
  const w = normalizePlatform(want);
  const i = normalizePlatform({ ...image, variant: undefined });
  return !image.variant && w.os === i.os && w.architecture === i.architecture;
}

const variantLevel = (v: string | undefined) => (v && /^v\d+$/.test(v) ? Number(v.slice(1)) : undefined);

/**
 * How well `candidate` runs on `want`: undefined when it cannot, else higher is
 * better. Numbered variants are backward compatible (an arm/v7 host runs v6
 * and v5 images, preferring v7), other variants must match exactly.
 */
function platformScore(want: Platform, candidate: Platform): number | undefined {
  const w = normalizePlatform(want);
  const c = normalizePlatform(candidate);
  if (w.os !== c.os || w.architecture !== c.architecture) return undefined;
  if (w.variant === c.variant) return 1000;
  const wl = variantLevel(w.variant);
  const cl = variantLevel(c.variant);
  if (wl === undefined || cl === undefined || cl > wl) return undefined;
  return cl;
}

/** The index entry to pull for `want`, or a not-found error in dockerd's words. */
export function selectManifest(index: ImageIndex, want: Platform): Descriptor {
  let best: { d: Descriptor; score: number } | undefined;
  for (const d of index.manifests) {
    if (!d.platform || !(isManifestType(d.mediaType) || isIndexType(d.mediaType))) continue;
    const score = platformScore(want, d.platform);
    if (score !== undefined && (!best || score > best.score)) best = { d, score };
  }
  if (!best) throw notFound(`no matching manifest for ${formatPlatform(want)} in the manifest list entries`);
  return best.d;
}
