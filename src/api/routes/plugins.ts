// The plugin API, answered as a dockerd that has no plugins answers it.
import type { FastifyInstance } from 'fastify';

export function pluginRoutes(app: FastifyInstance): void {
  app.get('/plugins', async () => []);
}
