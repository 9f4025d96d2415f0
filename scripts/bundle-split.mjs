// berthd as two bundles: the daemon's (dist/main.js and all a start evaluates)
// and the API's (dist/api/server.js: Fastify, the routes, BuildKit), which the
// daemon imports only after its first answer (src/daemon.ts, src/api/front.ts).
// Each is a script of its own with its own V8 code cache (bin/berthd.cjs): a
// start reads and deserialises the daemon's alone, about half of the code
// (docs/decisions/performance.md, "Two bundles").
//
// The two share their modules' instances: whatever the API's modules import
// that the daemon's bundle holds (the engine's face, errors, the logger's
// module, zod, pino, ...) is taken from the daemon's bundle at run time, not
// bundled twice; one copy of a class or of a module's state, as in one bundle.
// The daemon's bundle hands them over in a registry (globalThis, by module
// key); the API's bundle reads it through a stand-in module for each.
import { build } from 'esbuild';
import path from 'node:path';

const REGISTRY = "globalThis[Symbol.for('berth.core')]";
const LOAD_API = "globalThis[Symbol.for('berth.loadApi')]";

/** esbuild's key for a resolved module: the path from `root` for a file, `namespace:path` otherwise. */
const keyOf = (root, r) => (r.namespace === 'file' ? path.relative(root, r.path) : `${r.namespace}:${r.path}`);

/** In the daemon's bundle, the API's module is what the launcher's loader returns: the API's bundle run. */
function apiFromLauncher(apiEntry) {
  return {
    name: 'api-from-launcher',
    setup(b) {
      b.onResolve({ filter: /[\\/]api[\\/]server\.js$/ }, (args) =>
        path.resolve(args.resolveDir, args.path) === apiEntry ? { path: apiEntry, namespace: 'api-bundle' } : undefined,
      );
      b.onLoad({ filter: /.*/, namespace: 'api-bundle' }, () => ({
        contents: `module.exports = ${LOAD_API}();`,
        loader: 'js',
      }));
    },
  };
}

/** In the API's bundle, a module the daemon's bundle holds is a stand-in that returns the daemon's instance. */
function fromDaemon(root, daemonInputs, used) {
  return {
    name: 'from-daemon',
    setup(b) {
      b.onResolve({ filter: /.*/ }, async (args) => {
        if (args.pluginData?.fromDaemon || args.kind === 'entry-point') return undefined;
        const r = await b.resolve(args.path, {
          kind: args.kind,
          importer: args.importer,
          namespace: args.namespace,
          resolveDir: args.resolveDir,
          pluginData: { fromDaemon: true },
        });
        // Built-ins the API's own stand-ins load as well (lazy or not, they are Node's one instance).
        if (r.errors.length || r.external || r.namespace === 'lazy-builtin') return undefined;
        const key = keyOf(root, r);
        if (!daemonInputs[key]) return undefined;
        used.set(key, r);
        return { path: key, namespace: 'from-daemon' };
      });
      b.onLoad({ filter: /.*/, namespace: 'from-daemon' }, (args) => ({
        contents: `module.exports = ${REGISTRY}.get(${JSON.stringify(args.path)});`,
        loader: 'js',
      }));
    },
  };
}

/**
 * The daemon's entry: dist/main.js, after the registry of what the API takes
 * from it. An ES module's namespace goes in as CommonJS exports marked
 * `__esModule` (its getters kept: bindings stay live), so that the API's
 * imports of it read its named and default exports as esbuild's own interop does.
 */
function daemonEntry(mainJs, used, daemonInputs) {
  const lines = [
    `const esm = (ns) => Object.defineProperties(Object.create(null), {
  ...Object.getOwnPropertyDescriptors(ns),
  __esModule: { value: true },
});`,
  ];
  const entries = [];
  [...used.keys()].sort().forEach((key, i) => {
    const r = used.get(key);
    const spec = JSON.stringify(r.path);
    if (daemonInputs[key].format === 'esm') {
      lines.push(`import * as m${i} from ${spec};`);
      entries.push(`[${JSON.stringify(key)}, esm(m${i})]`);
    } else {
      entries.push(`[${JSON.stringify(key)}, require(${spec})]`);
    }
  });
  lines.push(`${REGISTRY} = new Map([${entries.join(', ')}]);`);
  lines.push(`import ${JSON.stringify(mainJs)};`);
  return lines.join('\n');
}

/**
 * Builds the daemon's bundle at `out` and the API's at `apiOut` with esbuild's
 * options `common`: the daemon's once to learn what it holds, the API's taking
 * from it what it holds, the daemon's again with the registry the API reads.
 */
export async function buildSplit(common, { root, out, apiOut }) {
  const mainJs = path.join(root, 'dist/main.js');
  const apiEntry = path.join(root, 'dist/api/server.js');
  const daemonPlugins = [apiFromLauncher(apiEntry), ...common.plugins];
  const first = await build({
    ...common,
    plugins: daemonPlugins,
    entryPoints: [mainJs],
    outfile: out,
    metafile: true,
    absWorkingDir: root,
  });
  const used = new Map();
  await build({
    ...common,
    plugins: [fromDaemon(root, first.metafile.inputs, used), ...common.plugins],
    entryPoints: [apiEntry],
    outfile: apiOut,
    absWorkingDir: root,
  });
  const entry = daemonEntry(mainJs, used, first.metafile.inputs);
  const final = await build({
    ...common,
    plugins: daemonPlugins,
    stdin: { contents: entry, resolveDir: path.join(root, 'dist'), sourcefile: 'berthd-entry.js', loader: 'js' },
    outfile: out,
    metafile: true,
    absWorkingDir: root,
  });
  const missing = [...used.keys()].filter((key) => !final.metafile.inputs[key]);
  if (missing.length) throw new Error(`bundle: the daemon's bundle lacks what the API takes from it: ${missing}`);
  return { shared: used.size };
}
