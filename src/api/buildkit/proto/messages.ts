// The messages of BuildKit's API that buildx v0.10.5 and dockerd 20.10 exchange
// (docs/buildkit/protos/, trimmed from BuildKit 0.11's .proto files), by field number.
import { mapOf, message } from './wire.js';

// google.protobuf.Timestamp, google.rpc.Status and google.protobuf.Any.
export const Timestamp = message('Timestamp', { 1: ['seconds', 'int64'], 2: ['nanos', 'int32'] });
export const Any = message('Any', { 1: ['type_url', 'string'], 2: ['value', 'bytes'] });
export const RpcStatus = message('Status', { 1: ['code', 'int32'], 2: ['message', 'string'], 3: ['details', [Any]] });

// pb (solver/pb/ops.proto): what the Control API refers to.
export const Platform = message('Platform', {
  1: ['Architecture', 'string'],
  2: ['OS', 'string'],
  3: ['Variant', 'string'],
  4: ['OSVersion', 'string'],
  5: ['OSFeatures', ['string']],
});
export const ProgressGroup = message('ProgressGroup', {
  1: ['id', 'string'],
  2: ['name', 'string'],
  3: ['weak', 'bool'],
});

// moby.buildkit.v1.apicaps
export const APICap = message('APICap', {
  1: ['ID', 'string'],
  2: ['Enabled', 'bool'],
  3: ['Deprecated', 'bool'],
  4: ['DisabledReason', 'string'],
  5: ['DisabledReasonMsg', 'string'],
  6: ['DisabledAlternative', 'string'],
});

// moby.buildkit.v1.types (api/types/worker.proto)
export const GCPolicy = message('GCPolicy', {
  1: ['all', 'bool'],
  2: ['keepDuration', 'int64'],
  3: ['keepBytes', 'int64'],
  4: ['filters', ['string']],
});
export const BuildkitVersion = message('BuildkitVersion', {
  1: ['package', 'string'],
  2: ['version', 'string'],
  3: ['revision', 'string'],
});
export const WorkerRecord = message('WorkerRecord', {
  1: ['ID', 'string'],
  2: ['Labels', mapOf('string')],
  3: ['platforms', [Platform]],
  4: ['GCPolicy', [GCPolicy]],
  5: ['BuildkitVersion', BuildkitVersion],
});

// moby.buildkit.v1 (api/services/control/control.proto)
export const PruneRequest = message('PruneRequest', {
  1: ['filter', ['string']],
  2: ['all', 'bool'],
  3: ['keepDuration', 'int64'],
  4: ['keepBytes', 'int64'],
});
export const DiskUsageRequest = message('DiskUsageRequest', { 1: ['filter', ['string']] });
export const UsageRecord = message('UsageRecord', {
  1: ['ID', 'string'],
  2: ['Mutable', 'bool'],
  3: ['InUse', 'bool'],
  4: ['Size', 'int64'],
  5: ['Parent', 'string'],
  6: ['CreatedAt', Timestamp],
  7: ['LastUsedAt', Timestamp],
  8: ['UsageCount', 'int64'],
  9: ['Description', 'string'],
  10: ['RecordType', 'string'],
  11: ['Shared', 'bool'],
  12: ['Parents', ['string']],
});
export const DiskUsageResponse = message('DiskUsageResponse', { 1: ['record', [UsageRecord]] });
export const CacheOptionsEntry = message('CacheOptionsEntry', { 1: ['Type', 'string'], 2: ['Attrs', mapOf('string')] });
export const CacheOptions = message('CacheOptions', {
  1: ['ExportRefDeprecated', 'string'],
  2: ['ImportRefsDeprecated', ['string']],
  3: ['ExportAttrsDeprecated', mapOf('string')],
  4: ['Exports', [CacheOptionsEntry]],
  5: ['Imports', [CacheOptionsEntry]],
});
/** pb.Definition is kept as its bytes (berth never reads LLB: buildx sends the Dockerfile frontend's request). */
export const SolveRequest = message('SolveRequest', {
  1: ['Ref', 'string'],
  2: ['Definition', 'bytes'],
  3: ['Exporter', 'string'],
  4: ['ExporterAttrs', mapOf('string')],
  5: ['Session', 'string'],
  6: ['Frontend', 'string'],
  7: ['FrontendAttrs', mapOf('string')],
  8: ['Cache', CacheOptions],
  9: ['Entitlements', ['string']],
  10: ['FrontendInputs', mapOf('bytes')],
  11: ['Internal', 'bool'],
  12: ['SourcePolicy', 'bytes'],
});
export const SolveResponse = message('SolveResponse', { 1: ['ExporterResponse', mapOf('string')] });
export const StatusRequest = message('StatusRequest', { 1: ['Ref', 'string'] });
export const Vertex = message('Vertex', {
  1: ['digest', 'string'],
  2: ['inputs', ['string']],
  3: ['name', 'string'],
  4: ['cached', 'bool'],
  5: ['started', Timestamp],
  6: ['completed', Timestamp],
  7: ['error', 'string'],
  8: ['progressGroup', ProgressGroup],
});
export const VertexStatus = message('VertexStatus', {
  1: ['ID', 'string'],
  2: ['vertex', 'string'],
  3: ['name', 'string'],
  4: ['current', 'int64'],
  5: ['total', 'int64'],
  6: ['timestamp', Timestamp],
  7: ['started', Timestamp],
  8: ['completed', Timestamp],
});
export const VertexLog = message('VertexLog', {
  1: ['vertex', 'string'],
  2: ['timestamp', Timestamp],
  3: ['stream', 'int64'],
  4: ['msg', 'bytes'],
});
/** pb.SourceInfo and pb.Range as their bytes (berth's warnings carry neither yet). */
export const VertexWarning = message('VertexWarning', {
  1: ['vertex', 'string'],
  2: ['level', 'int64'],
  3: ['short', 'bytes'],
  4: ['detail', ['bytes']],
  5: ['url', 'string'],
  6: ['info', 'bytes'],
  7: ['ranges', ['bytes']],
});
export const StatusResponse = message('StatusResponse', {
  1: ['vertexes', [Vertex]],
  2: ['statuses', [VertexStatus]],
  3: ['logs', [VertexLog]],
  4: ['warnings', [VertexWarning]],
});
export const BytesMessage = message('BytesMessage', { 1: ['data', 'bytes'] });
export const ListWorkersRequest = message('ListWorkersRequest', { 1: ['filter', ['string']] });
export const ListWorkersResponse = message('ListWorkersResponse', { 1: ['record', [WorkerRecord]] });
export const InfoRequest = message('InfoRequest', {});
export const InfoResponse = message('InfoResponse', { 1: ['buildkitVersion', BuildkitVersion] });

// moby.buildkit.v1.frontend (frontend/gateway/pb/gateway.proto): the LLBBridge's ping.
export const PingRequest = message('PingRequest', {});
export const PongResponse = message('PongResponse', {
  1: ['FrontendAPICaps', [APICap]],
  2: ['LLBCaps', [APICap]],
  3: ['Workers', [WorkerRecord]],
});

// fsutil.types (the FileSync and FileSend streams' packets)
export const Stat = message('Stat', {
  1: ['path', 'string'],
  2: ['mode', 'uint32'],
  3: ['uid', 'uint32'],
  4: ['gid', 'uint32'],
  5: ['size', 'int64'],
  6: ['modTime', 'int64'],
  7: ['linkname', 'string'],
  8: ['devmajor', 'int64'],
  9: ['devminor', 'int64'],
  10: ['xattrs', mapOf('bytes')],
});
export const PacketType = { STAT: 0, REQ: 1, DATA: 2, FIN: 3, ERR: 4 } as const;
export const Packet = message('Packet', {
  1: ['type', 'enum'],
  2: ['stat', Stat],
  3: ['ID', 'uint32'],
  4: ['data', 'bytes'],
});

// grpc.health.v1
export const HealthCheckRequest = message('HealthCheckRequest', { 1: ['service', 'string'] });
export const HealthCheckResponse = message('HealthCheckResponse', { 1: ['status', 'enum'] });

// moby.buildkit.v1.frontend: the LLBBridge's Solve and Return (a Dockerfile build as buildx asks for it).
/** pb.Definition as its bytes: berth's results carry none, the client's are only echoed. */
export const GatewayRef = message('Ref', { 1: ['id', 'string'], 2: ['def', 'bytes'] });
export const RefMap = message('RefMap', { 1: ['refs', mapOf(GatewayRef)] });
export const GatewayResult = message('Result', {
  1: ['refDeprecated', 'string'],
  3: ['ref', GatewayRef],
  4: ['refs', RefMap],
  10: ['metadata', mapOf('bytes')],
});
export const GatewaySolveRequest = message('SolveRequest', {
  1: ['Definition', 'bytes'],
  2: ['Frontend', 'string'],
  3: ['FrontendOpt', mapOf('string')],
  5: ['allowResultReturn', 'bool'],
  6: ['allowResultArrayRef', 'bool'],
  10: ['Final', 'bool'],
  11: ['ExporterAttr', 'bytes'],
  12: ['CacheImports', [CacheOptionsEntry]],
  13: ['FrontendInputs', mapOf('bytes')],
  14: ['Evaluate', 'bool'],
});
export const GatewaySolveResponse = message('SolveResponse', { 1: ['ref', 'string'], 3: ['result', GatewayResult] });
export const ReturnRequest = message('ReturnRequest', { 1: ['result', GatewayResult], 2: ['error', RpcStatus] });
export const ReturnResponse = message('ReturnResponse', {});

// The session's other services (session/auth, secrets, sshforward): berthd calls them, the client answers.
export const CredentialsRequest = message('CredentialsRequest', { 1: ['Host', 'string'] });
export const CredentialsResponse = message('CredentialsResponse', {
  1: ['Username', 'string'],
  2: ['Secret', 'string'],
});
export const GetSecretRequest = message('GetSecretRequest', {
  1: ['ID', 'string'],
  2: ['annotations', mapOf('string')],
});
export const GetSecretResponse = message('GetSecretResponse', { 1: ['data', 'bytes'] });
export const CheckAgentRequest = message('CheckAgentRequest', { 1: ['ID', 'string'] });
export const CheckAgentResponse = message('CheckAgentResponse', {});
