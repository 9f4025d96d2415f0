// Dependencies point one way: nothing in engine/ knows about the HTTP server or api/.
import { readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';

const SRC = path.resolve(__dirname, '../../src');

function files(dir: string): string[] {
  return readdirSync(dir).flatMap((f) => {
    const p = path.join(dir, f);
    return statSync(p).isDirectory() ? files(p) : p.endsWith('.ts') ? [p] : [];
  });
}

const imports = (file: string) =>
  [...readFileSync(file, 'utf8').matchAll(/^\s*(?:import|export)\s[^'"]*?from\s+['"]([^'"]+)['"]/gm)].map((m) => m[1]!);

describe('architecture', () => {
  const engineFiles = files(path.join(SRC, 'engine'));

  it('has engine files to check', () => expect(engineFiles.length).toBeGreaterThan(3));

  it.each(engineFiles.map((f) => [path.relative(SRC, f), f]))('%s imports no HTTP server or api/', (_rel, file) => {
    for (const spec of imports(file)) {
      expect(spec).not.toMatch(/^fastify/);
      // The registry client is an HTTP client; nothing else in the engine speaks HTTP.
      if (!file.includes(`${path.sep}registry${path.sep}`)) expect(spec).not.toMatch(/^(node:)?https?$/);
      const resolved = spec.startsWith('.') ? path.resolve(path.dirname(file), spec) : spec;
      expect(resolved.startsWith(path.join(SRC, 'api'))).toBe(false);
    }
  });
});
