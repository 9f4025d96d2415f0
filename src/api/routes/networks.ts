// /networks/*: thin translations between Docker's wire shapes and the network service.
import type { FastifyInstance } from 'fastify';
import { type Engine, NetworkCreateSchema } from '../../engine/index.js';
import { parseFilters } from '../wire/filters.js';
import { parseJsonBody, query } from '../wire/forms.js';
import { ConnectBody, DisconnectBody, networkShape } from '../wire/networks.js';

type IdParams = { Params: { id: string } };

export function networkRoutes(app: FastifyInstance, engine: Engine): void {
  const networks = engine.networks;

  app.get('/networks', async (req) =>
    networks.list(parseFilters(query(req).filters)).map((n) => networkShape(n, req.apiVersion)),
  );

  app.get<IdParams>('/networks/:id', async (req) => {
    const { network, endpoints } = networks.inspect(req.params.id);
    return networkShape(network, req.apiVersion, endpoints);
  });

  app.post('/networks/create', async (req, reply) => {
    const body = await parseJsonBody(req, NetworkCreateSchema, { required: true, goType: 'network.CreateRequest' });
    return reply.code(201).send(await networks.create(body));
  });

  app.delete<IdParams>('/networks/:id', async (req, reply) => {
    await networks.remove(req.params.id);
    return reply.code(204).send();
  });

  app.post('/networks/prune', async (req) => networks.prune(parseFilters(query(req).filters)));

  app.post<IdParams>('/networks/:id/connect', async (req, reply) => {
    const body = await parseJsonBody(req, ConnectBody, { required: true, goType: 'network.ConnectOptions' });
    await engine.containers.connectNetwork(req.params.id, body.Container, body.EndpointConfig ?? {});
    return reply.code(200).send();
  });

  app.post<IdParams>('/networks/:id/disconnect', async (req, reply) => {
    const body = await parseJsonBody(req, DisconnectBody, { required: true, goType: 'network.DisconnectOptions' });
    await engine.containers.disconnectNetwork(req.params.id, body.Container, body.Force ?? false);
    return reply.code(200).send();
  });
}
