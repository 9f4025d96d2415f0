// The plugin API, answered as a dockerd that has no plugins answers it (the
// engine's PluginService says what is there and what berth refuses). Names may
// hold slashes (`127.0.0.1:5000/x`), as dockerd's `{name:.*}` routes take them,
// so the per-plugin routes are wildcards split here. Bodies are read first,
// as dockerd reads them, so that a bad one is a 400 before any lookup.
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { type AuthConfig, decodeRegistryAuth, type Engine } from '../../engine/index.js';
import { invalidParameter } from '../../errors.js';
import { parseFilters } from '../wire/filters.js';
import { dropBody, expectKind, query, readJson } from '../wire/forms.js';

/** dockerd's parseHeaders: an X-Registry-Auth it cannot read counts as none. */
function registryAuth(req: FastifyRequest): AuthConfig | undefined {
  try {
    return decodeRegistryAuth(req.headers['x-registry-auth'] as string | undefined);
  } catch {
    return undefined;
  }
}

/** Aborted when the client goes, so that a registry round trip stops with it. */
function untilGone(reply: FastifyReply): AbortSignal {
  const gone = new AbortController();
  reply.raw.once('close', () => gone.abort());
  return gone.signal;
}

/** The privileges a pull or upgrade grants: a JSON array, or nothing. */
async function readPrivileges(req: FastifyRequest): Promise<void> {
  expectKind(await readJson(req), 'array', 'types.PluginPrivileges');
}

/** `POST /plugins/{name}/set`'s body: a required array of `key=value` strings. */
async function readSettings(req: FastifyRequest): Promise<void> {
  const args = await readJson(req, { required: true });
  expectKind(args, 'array', '[]string');
  for (const a of (args as unknown[] | null) ?? []) expectKind(a, 'string', 'string');
}

/** dockerd's strconv.Atoi of `timeout`, which `enable` requires. */
function atoi(v: string | undefined): number {
  const s = v ?? '';
  if (!/^[+-]?\d+$/.test(s)) throw invalidParameter(`strconv.Atoi: parsing ${JSON.stringify(s)}: invalid syntax`);
  return Number(s);
}

/** A path segment as sent, decoded where it can be (a stray `%` is kept as it is). */
function decoded(s: string): string {
  try {
    return decodeURIComponent(s);
  } catch {
    return s;
  }
}

/** `{name}/{action}` from a wildcard path, or undefined when it is not one of `actions`. */
function split(req: FastifyRequest, actions: readonly string[]): { name: string; action: string } | undefined {
  const rest = (req.params as { '*': string })['*'];
  const slash = rest.lastIndexOf('/');
  if (slash <= 0) return undefined;
  const action = rest.slice(slash + 1);
  return actions.includes(action) ? { name: decoded(rest.slice(0, slash)), action } : undefined;
}

export function pluginRoutes(app: FastifyInstance, engine: Engine): void {
  const plugins = engine.plugins;

  app.get('/plugins', async (req) => plugins.list(parseFilters(query(req).filters)));

  app.get('/plugins/privileges', async (req, reply) =>
    plugins.privileges(query(req).remote ?? '', registryAuth(req), untilGone(reply)),
  );

  app.get('/plugins/*', async (req, reply) => {
    const p = split(req, ['json']);
    if (!p) return reply.callNotFound();
    return plugins.find(p.name);
  });

  app.delete('/plugins/*', async (req) => plugins.find(decoded((req.params as { '*': string })['*'])));

  app.post('/plugins/pull', async (req, reply) => {
    await readPrivileges(req);
    const q = query(req);
    return plugins.pull(q.remote ?? '', q.name ?? '', registryAuth(req), untilGone(reply));
  });

  app.post('/plugins/create', async (req) => {
    // A tar upload berth will not read: dropped, so that the client gets to read the refusal.
    await dropBody(req);
    return plugins.create(query(req).name ?? '');
  });

  app.post('/plugins/*', async (req, reply) => {
    const p = split(req, ['enable', 'disable', 'push', 'set', 'upgrade']);
    if (!p) return reply.callNotFound();
    const q = query(req);
    if (p.action === 'enable') atoi(q.timeout);
    if (p.action === 'set') await readSettings(req);
    if (p.action === 'upgrade') {
      await readPrivileges(req);
      return plugins.upgrade(q.remote ?? '', p.name);
    }
    return plugins.find(p.name);
  });
}
