// /volumes/*: thin translations between Docker's wire shapes and the volume service.
import type { FastifyInstance } from 'fastify';
import { type Engine, VolumeCreateSchema } from '../../engine/index.js';
import { versionBelow } from '../version.js';
import { parseFilters } from '../wire/filters.js';
import { boolValue, parseJsonBody, query } from '../wire/forms.js';
import { volumeShape } from '../wire/volumes.js';

type NameParams = { Params: { name: string } };

export function volumeRoutes(app: FastifyInstance, engine: Engine): void {
  const volumes = engine.volumes;

  app.get('/volumes', async (req) => ({
    Volumes: volumes.list(parseFilters(query(req).filters)).map((v) => volumeShape(v)),
    Warnings: [],
  }));

  app.post('/volumes/create', async (req, reply) => {
    const body = await parseJsonBody(req, VolumeCreateSchema, { required: true, goType: 'volume.CreateOptions' });
    return reply.code(201).send(volumeShape(await volumes.create(body)));
  });

  app.get<NameParams>('/volumes/:name', async (req) => volumeShape(volumes.inspect(req.params.name)));

  app.delete<NameParams>('/volumes/:name', async (req, reply) => {
    await volumes.remove(req.params.name, { force: boolValue(query(req).force) });
    return reply.code(204).send();
  });

  // API 1.42 on: only anonymous volumes unless the filters say all=true.
  app.post('/volumes/prune', async (req) =>
    volumes.prune(parseFilters(query(req).filters), !versionBelow(req.apiVersion, '1.42')),
  );
}
