// zod schemas built at their first use rather than as their module loads.
// Building berth's module-level schemas, and evaluating zod itself (which the
// bundle loads at its first use: scripts/bundle.mjs), took ~35 ms of every
// start before the first answer, for requests (a create, a network, a pull)
// that come after it (docs/decisions/performance.md, "Start-up, second pass").
//
// A lazy schema is a stand-in that builds the real one when first touched and
// then forwards to it: `X.parse(...)`, `X.shape`, `X.nullish()` and the
// schemas made from it are the real schema's (zod's methods are closures over
// their own schema, so the stand-in is never their `this`). Its type is the
// real schema's, `z.output<typeof X>` included.

const builders: (() => unknown)[] = [];

export function lazySchema<T extends object>(make: () => T): T {
  let built: T | undefined;
  const schema = (): T => {
    built ??= make();
    return built;
  };
  builders.push(schema);
  return new Proxy({} as T, {
    get: (_, key) => Reflect.get(schema(), key),
    set: (_, key, value) => Reflect.set(schema(), key, value),
    has: (_, key) => Reflect.has(schema(), key),
    getPrototypeOf: () => Reflect.getPrototypeOf(schema()),
  });
}

/**
 * Builds every lazy schema not built yet, one a turn of the event loop (a
 * request that comes meanwhile waits for one schema, not all): once the daemon
 * is serving, so that its first create does not build them.
 */
export async function buildLazySchemas(): Promise<void> {
  for (const build of builders) {
    build();
    await new Promise((resolve) => setImmediate(resolve));
  }
}
