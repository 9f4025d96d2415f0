// The `# syntax=` parser directive. BuildKit pulls the frontend image it names
// and runs the Dockerfile with it; berth runs no frontend image: its own parser
// and builder are the Dockerfile 1.x syntax, so `docker/dockerfile:1…` (any
// 1.x tag, `-labs` too, a digest or not) is taken as that, and any other image
// is refused by name rather than built with another syntax than asked.
import { invalidParameter } from '../../errors.js';

const BUILTIN =
  /^(?:(?:docker\.io|index\.docker\.io|registry-1\.docker\.io)\/)?docker\/dockerfile(?::(1(?:\.\d+){0,2}(?:-labs)?|labs|latest))?(?:@sha256:[0-9a-f]{64})?$/;

/**
 * The directive's image when it names BuildKit's Dockerfile 1.x frontend, as
 * berth takes it; throws for any other. Undefined without a directive.
 */
export function builtinSyntax(directives: ReadonlyMap<string, string>): string | undefined {
  const image = directives.get('syntax');
  if (image === undefined) return undefined;
  if (BUILTIN.test(image.trim())) return image.trim();
  throw invalidParameter(
    `the syntax directive names the frontend image ${image}: berthd runs no frontend image, it builds with its own Dockerfile 1.x syntax (docker/dockerfile:1); remove the directive or name docker/dockerfile:1`,
  );
}
