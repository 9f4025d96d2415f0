// BuildKit's Control service as berthd answers it on `/grpc` (docs/buildkit/protocol.md).
// What is served so far: the worker list and version (`docker buildx ls`/`inspect`), the
// cache's disk usage and prune (`docker buildx du`/`prune`: berth keeps no BuildKit cache
// yet, so both are empty) and gRPC's health check. A build (Solve, Status and the LLBBridge
// buildx drives it through) is refused with the way to build today.
import type { Engine } from '../../engine/index.js';
import { GrpcCode, GrpcError, type Method } from './grpc.js';
import * as m from './proto/messages.js';
import type { MessageType } from './proto/wire.js';

const SERVICE = '/moby.buildkit.v1.Control';
const BRIDGE = '/moby.buildkit.v1.frontend.LLBBridge';

export const NO_BUILDKIT_BUILDS =
  "berthd does not build through BuildKit's API yet: use the classic builder (DOCKER_BUILDKIT=0 docker build, or docker build without buildx)";

const unary = (request: MessageType, answer: MessageType, handle: () => Record<string, unknown>): Method => ({
  request,
  answer,
  async handle(_req, send) {
    send(handle());
  },
});

const refused = (request: MessageType, answer: MessageType): Method => ({
  request,
  answer,
  async handle() {
    throw new GrpcError(GrpcCode.UNIMPLEMENTED, NO_BUILDKIT_BUILDS);
  },
});

/** The methods of berthd's `/grpc` connection, by path. */
export function controlMethods(engine: Engine): Map<string, Method> {
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
    [`${SERVICE}/Solve`, refused(m.SolveRequest, m.SolveResponse)],
    [`${SERVICE}/Status`, refused(m.StatusRequest, m.StatusResponse)],
    [`${BRIDGE}/Ping`, refused(m.PingRequest, m.PongResponse)],
    [
      '/grpc.health.v1.Health/Check',
      unary(m.HealthCheckRequest, m.HealthCheckResponse, () => ({ status: 1 /* SERVING */ })),
    ],
  ]);
}
