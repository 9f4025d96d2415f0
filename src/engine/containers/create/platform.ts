// A create's `platform` (API 1.41): the image must be for it, as dockerd's
// GetImage checks once it found the image (daemon/images/image.go): else a
// 404 in dockerd's words. With none asked, an image for another platform is
// still created, with dockerd's warning (daemon/create.go).
import { notFound } from '../../../errors.js';
import type { ImageConfig } from '../../images/config.js';
import { formatPlatform, goArch, hostPlatform, type Platform, platformMatches } from '../../registry/manifest.js';

/** An image's platform; one that names none (an old commit's, an import's) is taken as the host's. */
const imagePlatform = (c: ImageConfig): Platform => ({
  os: c.os || 'linux',
  architecture: c.architecture || goArch(),
  ...(c.variant ? { variant: c.variant } : {}),
});

/** Throws dockerd's 404 when `asked` is not the image's platform; warns when none was asked and the host's is not. */
export function checkImagePlatform(
  ref: string,
  image: ImageConfig,
  asked: Platform | undefined,
  warnings: string[],
): void {
  const actual = imagePlatform(image);
  if (asked) {
    if (!platformMatches(asked, actual)) {
      throw notFound(
        `image with reference ${ref} was found but does not match the specified platform: wanted ${formatPlatform(asked)}, actual: ${formatPlatform(actual)}`,
      );
    }
    return;
  }
  const host = hostPlatform();
  if (!platformMatches(host, actual)) {
    warnings.push(
      `The requested image's platform (${formatPlatform(actual)}) does not match the detected host platform (${formatPlatform(host)}) and no specific platform was requested`,
    );
  }
}
