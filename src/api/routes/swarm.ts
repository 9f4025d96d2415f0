// Swarm mode's endpoints, answered as a dockerd that is in no swarm answers
// them (503 with its words): berth has no swarm mode. Clients probe these
// routes and treat that answer as "no swarm" (docker-py's leave_swarm(force)
// accepts it; `docker info` shows Swarm inactive), where a 404 would be an
// unknown route. Joining or starting a swarm is refused: berth cannot.
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { notImplemented, unavailable } from '../../errors.js';
import { expectKind, readJson } from '../wire/forms.js';

/** dockerd's errSwarmNotManager: what every manager-only endpoint answers off a swarm. */
const NOT_A_MANAGER =
  'This node is not a swarm manager. Use "docker swarm init" or "docker swarm join" to connect this node to swarm and try again.';
/** dockerd's errNoSwarm: leaving when there is nothing to leave. */
const NOT_IN_A_SWARM = 'This node is not part of a swarm';

const MANAGER_ONLY: [method: 'GET' | 'POST' | 'DELETE', url: string][] = [
  ['GET', '/swarm'],
  ['GET', '/swarm/unlockkey'],
  ['POST', '/swarm/update'],
  ['POST', '/swarm/unlock'],
  ['GET', '/nodes'],
  ['GET', '/nodes/:id'],
  ['DELETE', '/nodes/:id'],
  ['POST', '/nodes/:id/update'],
  ['GET', '/services'],
  ['POST', '/services/create'],
  ['GET', '/services/:id'],
  ['DELETE', '/services/:id'],
  ['POST', '/services/:id/update'],
  ['GET', '/services/:id/logs'],
  ['GET', '/tasks'],
  ['GET', '/tasks/:id'],
  ['GET', '/tasks/:id/logs'],
  ['GET', '/secrets'],
  ['POST', '/secrets/create'],
  ['GET', '/secrets/:id'],
  ['DELETE', '/secrets/:id'],
  ['POST', '/secrets/:id/update'],
  ['GET', '/configs'],
  ['POST', '/configs/create'],
  ['GET', '/configs/:id'],
  ['DELETE', '/configs/:id'],
  ['POST', '/configs/:id/update'],
];

/** The routes whose body dockerd decodes before it asks the cluster anything: a bad one is a 400 first. */
const DECODES_FIRST = new Map([
  ['/swarm/init', 'swarm.InitRequest'],
  ['/swarm/join', 'swarm.JoinRequest'],
  ['/swarm/update', 'swarm.Spec'],
  ['/swarm/unlock', 'swarm.UnlockRequest'],
  ['/nodes/:id/update', 'swarm.NodeSpec'],
  ['/services/create', 'swarm.ServiceSpec'],
  ['/services/:id/update', 'swarm.ServiceSpec'],
  ['/secrets/create', 'swarm.SecretSpec'],
  ['/secrets/:id/update', 'swarm.SecretSpec'],
  ['/configs/create', 'swarm.ConfigSpec'],
  ['/configs/:id/update', 'swarm.ConfigSpec'],
]);

const decodeIfFirst = async (req: FastifyRequest) => {
  const goType = DECODES_FIRST.get(req.routeOptions.url ?? '');
  if (goType) expectKind(await readJson(req, { required: true }), 'object', goType);
};

export function swarmRoutes(app: FastifyInstance): void {
  for (const [method, url] of MANAGER_ONLY) {
    app.route({
      method,
      url,
      handler: async (req) => {
        await decodeIfFirst(req);
        throw unavailable(NOT_A_MANAGER);
      },
    });
  }
  app.post('/swarm/leave', async () => {
    throw unavailable(NOT_IN_A_SWARM);
  });
  for (const url of ['/swarm/init', '/swarm/join']) {
    app.post(url, async (req) => {
      await decodeIfFirst(req);
      throw notImplemented('berth has no swarm mode: this node cannot start or join a swarm');
    });
  }
}
