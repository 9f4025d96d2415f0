// Bundles dist/main.js (tsc's output) and its JavaScript dependencies into
// CommonJS files: the daemon's, the API's it loads after its first answer
// (bundle-split.mjs), and the layer extraction threads' script; then starts
// berthd once on a scratch data root so the launcher (bin/berthd.cjs) writes
// their V8 code caches. Native addons stay outside.
import { build } from 'esbuild';
import { buildSplit } from './bundle-split.mjs';
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import { existsSync, mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';

const root = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');
const out = path.join(root, 'dist/berthd.bundle.cjs');
const apiOut = path.join(root, 'dist/berthd-api.bundle.cjs');
for (const cache of ['berthd.bundle.cache', 'berthd-api.bundle.cache'])
  rmSync(path.join(root, 'dist', cache), { force: true });

/**
 * Built-in modules that load when first used rather than as the bundle loads,
 * none of them needed before the first answer:
 * - Fastify requires node:http2, node:https and node:dns as it loads, for
 *   servers berthd never makes (HTTP/2, TLS) and for host names it never
 *   listens on (~13 ms of a fresh start).
 * - berth's own imports of node:crypto, node:dgram, node:dns/promises and
 *   node:worker_threads, which ids, digests, proxies, registries and
 *   extraction threads use (~10 ms; docs/decisions/performance.md, "Start-up, second
 *   pass"). node:child_process is not among them: modules promisify its
 *   execFile as they load. node:http2 is BuildKit's (api/routes/buildkit.ts).
 * - node:assert, which pino's writer (sonic-boom) requires as it loads and
 *   calls only on a misuse (~6 ms).
 * Such an import becomes a module that loads the real one when first used. It
 * names the real one's exports without loading it (listed here, at build
 * time): esbuild's interop for an ES module's import of it copies their names
 * as it loads, and reads each value at its use. A built-in that is a function
 * (assert) is stood in for by a function that calls it.
 */
const LAZY_IN_FASTIFY = /^node:(http2|https|dns)$/;
const LAZY_IN_BERTH = /^node:(crypto|dgram|dns\/promises|http2|worker_threads)$/;
const LAZY_IN_SONIC_BOOM = /^(node:)?assert$/;
const within = (pkg, importer) => new RegExp(`[\\\\/]node_modules[\\\\/]${pkg}[\\\\/]`).test(importer);
const lazyBuiltins = {
  name: 'lazy-builtins',
  setup(b) {
    b.onResolve({ filter: /^(node:[a-z0-9_/]+|assert)$/ }, (args) =>
      (LAZY_IN_FASTIFY.test(args.path) && within('fastify', args.importer)) ||
      (LAZY_IN_BERTH.test(args.path) && args.importer.startsWith(path.join(root, 'dist') + path.sep)) ||
      (LAZY_IN_SONIC_BOOM.test(args.path) && within('sonic-boom', args.importer))
        ? { path: args.path.replace(/^(node:)?/, 'node:'), namespace: 'lazy-builtin' }
        : undefined,
    );
    b.onLoad({ filter: /.*/, namespace: 'lazy-builtin' }, (args) => {
      const real = process.getBuiltinModule(args.path);
      return {
        contents: `let m; const names = ${JSON.stringify(Object.keys(real))};
const load = () => (m ??= process.getBuiltinModule(${JSON.stringify(args.path)}));
module.exports = new Proxy(${typeof real === 'function' ? '() => {}' : '{}'}, {
  apply: (_, self, args) => Reflect.apply(load(), self, args),
  get: (_, k) => load()[k],
  ownKeys: () => [...names],
  getOwnPropertyDescriptor: (_, k) => (names.includes(k) ? { configurable: true, enumerable: true, writable: true, value: undefined } : undefined),
});`,
        loader: 'js',
      };
    });
  },
};

/**
 * berth's imports of package `name` get `contents` instead: a stand-in that
 * requires the real package when first used (its own require of the name is
 * resolved as usual and bundled, to run at that require).
 */
function lazyPackage(name, contents) {
  const namespace = `lazy-${name}`;
  return {
    name: namespace,
    setup(b) {
      b.onResolve({ filter: new RegExp(`^${name}$`) }, (args) =>
        args.namespace === namespace ? undefined : { path: name, namespace },
      );
      b.onLoad({ filter: /.*/, namespace }, () => ({ contents, loader: 'js', resolveDir: root }));
    },
  };
}

/**
 * pino-pretty, berthd's log format on a terminal only: evaluated when a logger
 * asks for it (src/log.ts), not by every start. Its export is the stream
 * factory: the stand-in is a function that requires it at its first call (in
 * Node's interop an ES module's default import of it is module.exports).
 */
const lazyPinoPretty = lazyPackage(
  'pino-pretty',
  `let m;
module.exports = (...args) => (m ??= require('pino-pretty'))(...args);`,
);

/**
 * zod, evaluated at its first use rather than as the bundle loads (~13 ms of
 * every start before the first answer; berth's schemas are built at first use
 * too: src/lazy-schema.ts). berth's imports of 'zod' (`z`, and `ZodError` for
 * instanceof) get a module that requires the real one when first asked, which
 * esbuild then wraps to run at that require. Before zod is loaded, no ZodError
 * can exist: `ZodError` is then a class nothing is an instance of.
 */
const lazyZod = lazyPackage(
  'zod',
  `let zod; class NotLoaded {}
module.exports = {
  get z() { return (zod ??= require('zod')).z; },
  get ZodError() { return zod ? zod.ZodError : NotLoaded; },
};`,
);

/**
 * find-my-way compiles, for each static node of the route tree, a function
 * that compares the node's prefix char by char (`new Function`): ~150 of them
 * as berthd's routes are added, ~5-10 ms of every start before the first
 * answer, none of it in the code cache. Here the comparison is a closure over
 * the prefix (`startsWith` at the same place gives the same answer); the
 * routes that reach find-my-way at all are those the fast lane leaves to
 * Fastify (src/api/fastlane.ts).
 */
const COMPILED_PREFIX_MATCH = /const lines = \[\][\s\S]*?return new Function\('path', 'i', [^\n]*\n/;
const plainPrefixMatch = {
  name: 'plain-prefix-match',
  setup(b) {
    b.onLoad({ filter: /[\\/]node_modules[\\/]find-my-way[\\/]lib[\\/]node\.js$/ }, (args) => {
      const text = readFileSync(args.path, 'utf8');
      if (!COMPILED_PREFIX_MATCH.test(text))
        throw new Error(`bundle: find-my-way's prefix match changed (${args.path})`);
      return {
        contents: text.replace(COMPILED_PREFIX_MATCH, 'return (path, i) => path.startsWith(prefix, i)\n'),
        loader: 'js',
      };
    });
  },
};

/**
 * pino takes its caller's stack (node:util getCallSites) for every logger it
 * makes, to resolve a transport's target relative to the caller; berthd's
 * logger has a transport only on a terminal. A stack through the bundle's top
 * level makes V8 work out that 3.4 MB function's source positions (the code
 * cache holds none): ~12 ms of every start, in `createLogger`. The bundle's
 * pino takes the stack only when the options ask for a transport.
 */
const PINO_CALLER = 'normalize(instance, caller(), ...args)';
const pinoCallerOnlyForTransports = {
  name: 'pino-caller-only-for-transports',
  setup(b) {
    b.onLoad({ filter: /[\\/]node_modules[\\/]pino[\\/]pino\.js$/ }, (args) => {
      const text = readFileSync(args.path, 'utf8');
      if (!text.includes(PINO_CALLER)) throw new Error(`bundle: pino's caller lookup changed (${args.path})`);
      return {
        contents: text.replace(PINO_CALLER, 'normalize(instance, args[0]?.transport ? caller() : [], ...args)'),
        loader: 'js',
      };
    });
  },
};

/**
 * thread-stream, which pino's transports run in (berthd uses none: src/log.ts),
 * evaluated when a transport is made rather than as pino loads: it requires
 * node:worker_threads and node:assert at its top (~4 ms of every start).
 */
const lazyThreadStream = lazyPackage(
  'thread-stream',
  `let m;
module.exports = function ThreadStream(...args) {
  return new (m ??= require('thread-stream'))(...args);
};`,
);

/**
 * pino asks node:worker_threads whether it runs on the main thread as it loads
 * (~2.5 ms of every start), to register an exit flush only there. berthd's
 * bundle runs on the main thread alone (its threads run extract-worker.cjs,
 * which has no pino), so the answer is written in.
 */
const PINO_MAIN_THREAD = "const { isMainThread } = require('worker_threads')";
const pinoOnTheMainThread = {
  name: 'pino-on-the-main-thread',
  setup(b) {
    b.onLoad({ filter: /[\\/]node_modules[\\/]pino[\\/]lib[\\/]tools\.js$/ }, (args) => {
      const text = readFileSync(args.path, 'utf8');
      if (!text.includes(PINO_MAIN_THREAD)) throw new Error(`bundle: pino's main-thread check changed (${args.path})`);
      return { contents: text.replace(PINO_MAIN_THREAD, 'const isMainThread = true'), loader: 'js' };
    });
  },
};

/**
 * The SQLite addon better-sqlite3 picks on this machine, relative to dist/, for
 * src/engine/store/sqlite.ts (BERTH_SQLITE_ADDON): a start then loads it
 * without searching for it.
 */
function sqliteAddon() {
  const req = createRequire(path.join(root, 'package.json'));
  req(path.join(path.dirname(req.resolve('better-sqlite3/package.json')), 'lib/binding.js')).getBinding();
  const file = Object.keys(req.cache).find((f) => /[\\/]better-sqlite3[\\/].*\.node$/.test(f));
  if (!file) throw new Error('bundle: better-sqlite3 loaded no addon');
  return path.relative(path.join(root, 'dist'), file);
}

const common = {
  bundle: true,
  platform: 'node',
  format: 'cjs',
  target: 'node20',
  // The optional pretty printer loads at run time from node_modules (better-sqlite3's
  // JavaScript is bundled; its addon is found by store/sqlite.ts).
  external: ['pino-pretty'],
  plugins: [
    lazyBuiltins,
    lazyZod,
    lazyPinoPretty,
    lazyThreadStream,
    plainPrefixMatch,
    pinoCallerOnlyForTransports,
    pinoOnTheMainThread,
  ],
  define: { 'import.meta.url': '__berth_import_meta_url', BERTH_SQLITE_ADDON: JSON.stringify(sqliteAddon()) },
  banner: { js: "var __berth_import_meta_url = require('node:url').pathToFileURL(__filename).href;" },
  logLevel: 'error',
};
const worker = path.join(root, 'dist/extract-worker.cjs');
// The daemon's bundle and the API's, which it loads after its first answer (bundle-split.mjs).
await buildSplit(common, { root, out, apiOut });
// The layer extraction threads' script (src/engine/layers/extractor.ts).
await build({ ...common, entryPoints: [path.join(root, 'dist/engine/layers/extract-worker.js')], outfile: worker });

/**
 * esbuild's `__toESM` makes, for every module that imports a CommonJS one (each
 * node: built-in is one), a namespace object with a getter for each export:
 * node:fs's ~100 getters made again for each of the ~200 modules that import
 * it (~5 ms of every start). Its getters read the module's exports at each use,
 * so one namespace a module (and mode) serves every importer: made once here.
 */
const TO_ESM = 'var __toESM = (mod, isNodeMode, target) =>';
const TO_ESM_ONCE = `var __toESMOnce = [new WeakMap(), new WeakMap()];
var __toESM = (mod, isNodeMode) => {
  if (mod === null || (typeof mod !== "object" && typeof mod !== "function")) return __toESMNew(mod, isNodeMode);
  const made = __toESMOnce[isNodeMode ? 1 : 0];
  let ns = made.get(mod);
  if (!ns) made.set(mod, (ns = __toESMNew(mod, isNodeMode)));
  return ns;
};
var __toESMNew = (mod, isNodeMode, target) =>`;

// V8 keeps a script's source for as long as its functions live (it compiles
// them when first called), one byte a character when every character is
// Latin-1 and two otherwise. esbuild escapes what is beyond ASCII in strings
// but leaves comments and regular expressions as written, so one arrow in a
// comment doubled the daemon's biggest object. A \uXXXX escape is the same
// character in a string and a regular expression, and harmless in a comment.
// Escaping everything beyond ASCII also lets the launcher read the bundle as
// Latin-1, which is quicker than decoding UTF-8 that is not all ASCII
// (19 -> 9 ms of each start here: docs/decisions/performance.md, "Start-up (issue 32)").
for (const file of [out, apiOut, worker]) {
  const text = readFileSync(file, 'utf8');
  if (text.split(TO_ESM).length !== 2) throw new Error(`bundle: esbuild's __toESM changed (${file})`);
  const ascii = text.replace(TO_ESM, TO_ESM_ONCE).replace(/(\\*)([^\0-\x7f])/g, (_, slashes, ch) => {
    // An odd run of backslashes would escape the escape's own backslash.
    if (slashes.length % 2) throw new Error(`bundle: ${JSON.stringify(ch)} after a backslash in ${file}`);
    return `${slashes}\\u${ch.charCodeAt(0).toString(16).padStart(4, '0')}`;
  });
  writeFileSync(file, ascii);
}

// A new data root's database starts as a copy of this one (src/engine/store/db.ts, EMPTY_DB_TEMPLATE):
// made by the same migrations as every other, so it holds what they make and nothing else.
{
  const { EMPTY_DB_TEMPLATE, openDb } = await import(path.join(root, 'dist/engine/store/db.js'));
  const tmp = `${EMPTY_DB_TEMPLATE}.${process.pid}`;
  openDb(tmp).close(); // closing checkpoints the log into the file and removes it
  renameSync(tmp, EMPTY_DB_TEMPLATE);
}

// Warm the code cache: start, answer one ping, stay long enough for the cache write, stop.
const dir = mkdtempSync(path.join(os.tmpdir(), 'berth-warm-'));
const sock = path.join(dir, 's.sock');
const child = spawn(
  process.execPath,
  [
    path.join(root, 'bin/berthd.cjs'),
    '-H',
    `unix://${sock}`,
    '--data-root',
    `${dir}/data`,
    '--exec-root',
    `${dir}/exec`,
    '--config-file',
    '/dev/null',
    '--log-level',
    'error',
    // Nothing on the host's network for a warm-up: no default bridge, no firewall chains.
    '--bridge',
    'none',
    '--iptables=false',
  ],
  { stdio: 'inherit' },
);
const ping = () =>
  new Promise((r) =>
    http
      .get({ socketPath: sock, path: '/_ping' }, (res) => {
        res.resume();
        r(res.statusCode === 200);
      })
      .on('error', () => r(false)),
  );
const deadline = Date.now() + 20_000;
while (!(existsSync(sock) && (await ping()))) {
  if (child.exitCode !== null || Date.now() > deadline)
    throw new Error('bundle: berthd did not start for the cache warm-up');
  await new Promise((r) => setTimeout(r, 20));
}
await new Promise((r) => setTimeout(r, 2500));
child.kill('SIGTERM');
await new Promise((r) => child.once('exit', r));
rmSync(dir, { recursive: true, force: true });
for (const cache of ['berthd.bundle.cache', 'berthd-api.bundle.cache'])
  if (!existsSync(path.join(root, 'dist', cache))) throw new Error(`bundle: no code cache was written (${cache})`);
