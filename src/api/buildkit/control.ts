// BuildKit's Control service as berthd answers it on `/grpc` (docs/buildkit/protocol.md):
// the worker list and version (`docker buildx ls`/`inspect`), the cache's disk usage
// and prune (`docker buildx du`/`prune`: berth keeps no BuildKit cache yet, so both
// are empty), gRPC's health check, and builds (solve.ts: Solve, Status and the
// LLBBridge buildx drives a build through).
import type { Engine } from '../../engine/index.js';
import type { Method } from './grpc.js';
import * as m from './proto/messages.js';
import type { MessageType } from './proto/wire.js';
import type { ClientSessions } from './session.js';
import { solveMethods } from './solve.js';

const SERVICE = '/moby.buildkit.v1.Control';

const unary = (request: MessageType, answer: MessageType, handle: () => Record<string, unknown>): Method => ({
  request,
  answer,
  async handle(_req, send) {
    send(handle());
  },
});

/** The methods of berthd's `/grpc` connection, by path. */
export function controlMethods(engine: Engine, sessions: ClientSessions): Map<string, Method> {
  const sys = engine.system;
  const worker = () => ({
    ID: 'berth',
    platforms: [{ Architecture: sys.host.arch, OS: 'linux' }],
  });
  return new Map<string, Method>([
    [`${SERVICE}/ListWorkers`, unary(m.ListWorkersRequest, m.ListWorkersResponse, () => ({ record: [worker()] }))],
    [
      `${SERVICE}/Info`,
      unary(m.InfoRequest, m.InfoResponse, () => ({
        buildkitVersion: { package: 'berth', version: sys.version, revision: '' },
      })),
    ],
    [`${SERVICE}/DiskUsage`, unary(m.DiskUsageRequest, m.DiskUsageResponse, () => ({}))],
    // A server stream of the records it removed: none.
    [
      `${SERVICE}/Prune`,
      { request: m.PruneRequest, answer: m.UsageRecord, stream: true, handle: async () => undefined },
    ],
    ...solveMethods(engine, sessions, worker),
    [
      '/grpc.health.v1.Health/Check',
      unary(m.HealthCheckRequest, m.HealthCheckResponse, () => ({ status: 1 /* SERVING */ })),
    ],
  ]);
}
