// POST /commit, GET /containers/{id}/changes and /export: thin translations
// between Docker's wire shapes and the commit service.
import type { FastifyInstance } from 'fastify';
import { type ContainerConfigFields, CreateBodySchema, type Engine } from '../../engine/index.js';
import { allValues, boolValue, expectKind, query, readJson, withoutNulls } from '../wire/forms.js';
import { foldFieldNames } from '../wire/fieldnames.js';

type IdParams = { Params: { id: string } };

export function commitRoutes(app: FastifyInstance, engine: Engine): void {
  const commits = engine.commits;

  app.post('/commit', async (req, reply) => {
    const q = query(req);
    // The body, when there is one, is a container Config that replaces the container's own.
    const body = await readJson(req);
    expectKind(body, 'object', 'container.CreateRequest');
    let config: ContainerConfigFields | undefined;
    if (body !== undefined && body !== null) {
      const {
        HostConfig: _h,
        NetworkingConfig: _n,
        ...rest
      } = CreateBodySchema.parse(foldFieldNames(CreateBodySchema, body));
      config = withoutNulls(rest) as ContainerConfigFields;
    }
    const id = await commits.commit({
      container: q.container ?? '',
      ...(q.repo ? { repo: q.repo } : {}),
      ...(q.tag ? { tag: q.tag } : {}),
      ...(q.comment ? { comment: q.comment } : {}),
      ...(q.author ? { author: q.author } : {}),
      // dockerd: an absent or empty `pause` means pause.
      pause: q.pause === undefined || q.pause === '' ? true : boolValue(q.pause),
      changes: allValues(req.query, 'changes'),
      ...(config ? { config } : {}),
    });
    return reply.code(201).send({ Id: id });
  });

  app.get<IdParams>('/containers/:id/changes', async (req) => commits.changes(req.params.id));

  app.get<IdParams>('/containers/:id/export', async (req, reply) => {
    const tar = await commits.export(req.params.id);
    return reply.type('application/x-tar').send(tar);
  });
}
