// A create's `platform` (API 1.41): the image must be for it, as dockerd's
// GetImage checks once it found the image (daemon/images/image.go): else a
// 404 in dockerd's words. With none asked, an image for another platform is
// still created, with dockerd's warning (daemon/create.go).
import { notFound } from '../../errors.js';
import type { ImageConfig } from '../images/config.js';
import { formatPlatform, hostPlatform, parsePlatform, type Platform, samePlatform } from '../registry/manifest.js';

const numbered = (v: string | undefined) => (v && /^v\d+$/.test(v) ? Number(v.slice(1)) : undefined);

/**
 * dockerd's OnlyPlatformWithFallback: the same platform, an older numbered
 * variant of it (arm/v6 runs on arm/v7), or an image that names no variant
 * for the same OS and architecture.
 */
function runsOn(want: Platform, image: Platform): boolean {
  const bare = (p: Platform) => ({ os: p.os, architecture: p.architecture });
  if (!samePlatform(bare(want), bare(image))) return false;
  if (!image.variant || samePlatform(want, image)) return true;
  const w = numbered(want.variant);
  const i = numbered(image.variant);
  return w !== undefined && i !== undefined && i <= w;
}

const imagePlatform = (c: ImageConfig): Platform => ({
  os: c.os ?? '',
  architecture: c.architecture ?? '',
  ...(c.variant ? { variant: c.variant } : {}),
});

/** Throws dockerd's 404 when `asked` (the query's `os[/arch[/variant]]`) is not the image's; warns when none was asked and the host's is not. */
export function checkImagePlatform(
  ref: string,
  image: ImageConfig,
  asked: string | undefined,
  warnings: string[],
): void {
  const actual = imagePlatform(image);
  if (asked) {
    const want = parsePlatform(asked);
    if (!runsOn(want, actual)) {
      throw notFound(
        `image with reference ${ref} was found but does not match the specified platform: wanted ${formatPlatform(want)}, actual: ${formatPlatform(actual)}`,
      );
    }
    return;
  }
  const host = hostPlatform();
  if (actual.os && actual.architecture && !runsOn(host, actual)) {
    warnings.push(
      `The requested image's platform (${formatPlatform(actual)}) does not match the detected host platform (${formatPlatform(host)}) and no specific platform was requested`,
    );
  }
}
