// /images/*: thin translations between Docker's wire shapes and the image service.
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import {
  decodePlatform,
  decodeRegistryAuth,
  parsePlatform,
  type AuthConfig,
  type Engine,
  type PushEvent,
} from '../../engine/index.js';
import type { Readable } from 'node:stream';
import { invalidParameter } from '../../errors.js';
import { sendArchive } from '../streams/archive.js';
import { closeOnShutdown } from '../streams/hijack.js';
import { JsonLinesStream } from '../streams/progress.js';
import { parseFilters } from '../wire/filters.js';
import { allValues, boolValue, parseJsonBody, type Query, query, withoutNulls } from '../wire/forms.js';
import { AuthBody, imageInspect, imageSummary } from '../wire/images.js';
import { versionBelow } from '../version.js';

/** `/images/<name with slashes>/<action>` → [name, action]. */
function splitNameAction(req: FastifyRequest, actions: readonly string[]): [string, string] {
  const rest = decodeURIComponent((req.params as { '*': string })['*']);
  for (const a of actions) {
    if (rest.endsWith(`/${a}`)) return [rest.slice(0, -a.length - 1), a];
  }
  return [rest, ''];
}

/**
 * Runs a pull or push, streaming its progress. A client that hangs up cancels
 * it, as with dockerd (downloads other pulls share go on); so does a shutdown,
 * which closes the connection rather than wait for a registry. An error before
 * the first message is an HTTP error; after, it goes in-band.
 */
async function progressStream(
  req: FastifyRequest,
  reply: FastifyReply,
  what: string,
  run: (emit: (e: PushEvent) => void, signal: AbortSignal) => Promise<void>,
): Promise<void> {
  const stream = new JsonLinesStream(reply);
  closeOnShutdown(req.raw.socket);
  const gone = new AbortController();
  reply.raw.once('close', () => {
    if (!reply.raw.writableFinished) gone.abort(new Error('the client went away'));
  });
  try {
    await run((e) => stream.progress(e), gone.signal);
  } catch (e) {
    if (gone.signal.aborted) {
      req.log.info({ url: req.url }, `${what} cancelled: the client went away`);
      return stream.drop();
    }
    if (!stream.hasStarted) throw e;
    stream.error(e);
  }
  stream.end();
}

/** The images `GET /images/json` lists for its query. */
function listedImages(engine: Engine, q: Query, apiVersion: string) {
  return engine.images.list({
    all: boolValue(q.all),
    filters: parseFilters(q.filters),
    // `shared-size` came with API 1.42; dockerd does not read it below.
    sharedSize: !versionBelow(apiVersion, '1.42') && boolValue(q['shared-size']),
  });
}

/** `GET /images/json` without `manifests` (which reads each image's). */
export const imageSummaries = (engine: Engine, q: Query, apiVersion: string) =>
  listedImages(engine, q, apiVersion).map((i) => imageSummary(i, apiVersion));

export function imageRoutes(app: FastifyInstance, engine: Engine): void {
  const images = engine.images;

  // docker login: dockerd checks the credentials with the registry and answers this shape.
  app.post('/auth', async (req) => {
    const body = await parseJsonBody(req, AuthBody, { required: true, goType: 'registry.AuthConfig' });
    await images.login(withoutNulls(body));
    return { Status: 'Login Succeeded', IdentityToken: '' };
  });

  app.get('/images/json', async (req) => {
    const q = query(req);
    // `manifests` came with API 1.47; an older client that sends it is answered as well
    // (dockerd does not read it below 1.47, but giving what was asked for harms no one).
    if (!boolValue(q.manifests)) return imageSummaries(engine, q, req.apiVersion);
    const list = listedImages(engine, q, req.apiVersion);
    return Promise.all(list.map(async (i) => imageSummary(i, req.apiVersion, await images.manifests(i.id))));
  });

  app.post('/images/create', async (req, reply) => {
    const q = query(req);
    // `platform` came with API 1.32; an unparsable one is refused before the registry or the body is read.
    const platform = q.platform && !versionBelow(req.apiVersion, '1.32') ? parsePlatform(q.platform) : undefined;
    if (!q.fromImage && q.fromSrc) {
      // docker import: the body (fromSrc=-) or a URL's content as one layer.
      const id = await engine.commits.importImage({
        source: q.fromSrc === '-' ? (req.body as Readable) : q.fromSrc,
        repo: q.repo,
        tag: q.tag,
        message: q.message,
        changes: allValues(req.query, 'changes'),
        platform,
      });
      return reply.type('application/json').send(`${JSON.stringify({ status: id })}\n`);
    }
    if (!q.fromImage) throw invalidParameter('fromImage or fromSrc must be given');
    const fromImage = q.fromImage;
    const auth = decodeRegistryAuth(req.headers['x-registry-auth'] as string | undefined);
    await progressStream(req, reply, 'pull', (emit, signal) =>
      images.pull(fromImage, q.tag, auth, emit, { signal, platform }),
    );
  });

  app.get('/distribution/*', async (req, reply) => {
    const rest = decodeURIComponent((req.params as { '*': string })['*']);
    if (!rest.endsWith('/json')) return reply.callNotFound();
    const auth = decodeRegistryAuth(req.headers['x-registry-auth'] as string | undefined);
    return images.distribution(rest.slice(0, -'/json'.length), auth);
  });

  // docker search: an invalid X-Registry-Auth is ignored, as dockerd does (a search needs no auth).
  app.get('/images/search', async (req) => {
    const q = query(req);
    const limit = q.limit ? Number(q.limit) : 0;
    if (!/^\d+$/.test(q.limit ?? '0'))
      throw invalidParameter(
        `invalid limit specified: strconv.Atoi: parsing ${JSON.stringify(q.limit)}: invalid syntax`,
      );
    let auth: AuthConfig | undefined;
    try {
      auth = decodeRegistryAuth(req.headers['x-registry-auth'] as string | undefined);
    } catch {
      auth = undefined;
    }
    return images.search({ term: q.term ?? '', limit, filters: parseFilters(q.filters), auth });
  });

  // docker save: one tar of the images named (repeatable `names`), streamed.
  app.get('/images/get', async (req, reply) => {
    const names = allValues(req.query, 'names').filter(Boolean);
    if (!names.length) throw invalidParameter('no images named: set the names parameter');
    return sendArchive(req, reply, await images.save(names));
  });

  // docker load: the body is an archive of docker save (or an OCI layout).
  app.post('/images/load', async (req, reply) => {
    const quiet = boolValue(query(req).quiet);
    const stream = new JsonLinesStream(reply);
    try {
      await images.load(req.body as Readable, (e) => {
        if ('stream' in e) stream.write(e);
        else if (!quiet) stream.progress(e);
      });
    } catch (e) {
      // dockerd answers 200 at once and reports a failed load in the stream (docker-py's ImageLoadError reads it there).
      stream.error(e);
    }
    stream.end();
  });

  app.post('/images/prune', async (req) => images.prune(parseFilters(query(req).filters)));

  app.get('/images/*', async (req, reply) => {
    const [name, action] = splitNameAction(req, ['json', 'history', 'get']);
    if (action === 'json') return imageInspect(images.inspect(name), req.apiVersion);
    if (action === 'history') return images.history(name);
    if (action === 'get') return sendArchive(req, reply, await images.save([name]));
    return reply.callNotFound();
  });

  app.post('/images/*', async (req, reply) => {
    const [name, action] = splitNameAction(req, ['tag', 'push']);
    const q = query(req);
    if (action === 'push') {
      const auth = decodeRegistryAuth(req.headers['x-registry-auth'] as string | undefined);
      // `platform` came with API 1.46; dockerd does not read it below (older clients sent it unasked).
      const platform = q.platform && !versionBelow(req.apiVersion, '1.46') ? decodePlatform(q.platform) : undefined;
      // No such image, tag or platform: an HTTP 404 before the stream begins (see docs/decisions/images.md, "Push").
      images.pushTargets(name, q.tag, platform);
      return progressStream(req, reply, 'push', (emit, signal) =>
        images.push({ name, tag: q.tag, auth, platform }, emit, { signal }),
      );
    }
    if (action !== 'tag') return reply.callNotFound();
    images.tag(name, q.repo ?? '', q.tag);
    return reply.code(201).send();
  });

  app.delete('/images/*', async (req) => {
    const q = query(req);
    const [name] = splitNameAction(req, []);
    return images.remove(name, { force: boolValue(q.force), noprune: boolValue(q.noprune) });
  });
}
