// A CRI client of the bench's own, so the timed path measures the runtime and
// not a client process per call (crictl costs 45-90 ms a call here): gRPC over
// one HTTP/2 connection on the CRI unix socket, as kubelet keeps one, with a
// hand-written protobuf codec for only the messages the bench sends and reads.
// Field numbers are those of cri-api's runtime/v1 api.proto (k8s.io/cri-api);
// cri-dockerd v0.3.7 serves runtime.v1 (and v1alpha2, not used here).
//
// A message is described by a schema: { field: [number, type, schema?] },
// where type is one of string, bool, int64, uint32, enum, message, map
// (map<string, string>), and repeated forms 'string*', 'message*'. Unknown
// fields of an answer are skipped.
import http2 from 'node:http2';
import net from 'node:net';

// --- protobuf wire format --------------------------------------------------

const VARINT = 0;
const LEN = 2;

function varint(out, v) {
  // int64 fields that are negative go out as 10-byte two's complement.
  let n = BigInt.asUintN(64, BigInt(v));
  while (n >= 0x80n) {
    out.push(Number(n & 0x7fn) | 0x80);
    n >>= 7n;
  }
  out.push(Number(n));
}

const tag = (out, num, wire) => varint(out, (num << 3) | wire);

function bytesField(out, num, buf) {
  tag(out, num, LEN);
  varint(out, buf.length);
  for (const b of buf) out.push(b);
}

/** The protobuf bytes of `value` (a plain object) by `schema`; proto3 defaults are left out. */
export function encode(schema, value) {
  const out = [];
  for (const [key, [num, type, sub]] of Object.entries(schema)) {
    const v = value?.[key];
    if (v === undefined || v === null) continue;
    switch (type) {
      case 'string':
        if (v !== '') bytesField(out, num, Buffer.from(v, 'utf8'));
        break;
      case 'string*':
        for (const s of v) bytesField(out, num, Buffer.from(s, 'utf8'));
        break;
      case 'bool':
      case 'int64':
      case 'uint32':
      case 'enum':
        if (v !== 0 && v !== false) {
          tag(out, num, VARINT);
          varint(out, v === true ? 1 : v);
        }
        break;
      case 'message':
        bytesField(out, num, encode(sub, v));
        break;
      case 'message*':
        for (const m of v) bytesField(out, num, encode(sub, m));
        break;
      case 'map':
        for (const [k, val] of Object.entries(v)) bytesField(out, num, encode(MAP_ENTRY, { key: k, value: val }));
        break;
      default:
        throw new Error(`cri-client: no encoder for ${type}`);
    }
  }
  return Buffer.from(out);
}

function readVarint(buf, pos) {
  let n = 0n;
  let shift = 0n;
  for (;;) {
    const b = buf[pos.at++];
    if (b === undefined) throw new Error('cri-client: truncated varint');
    n |= BigInt(b & 0x7f) << shift;
    if (!(b & 0x80)) return n;
    shift += 7n;
  }
}

/** `buf` decoded by `schema` into a plain object; int64 as Number (the bench's figures fit). */
export function decode(schema, buf) {
  const byNum = new Map(Object.entries(schema).map(([key, [num, type, sub]]) => [num, { key, type, sub }]));
  const out = {};
  const pos = { at: 0 };
  while (pos.at < buf.length) {
    const t = Number(readVarint(buf, pos));
    const num = t >>> 3;
    const wire = t & 7;
    let raw;
    if (wire === VARINT) raw = readVarint(buf, pos);
    else if (wire === LEN) {
      const len = Number(readVarint(buf, pos));
      raw = buf.subarray(pos.at, pos.at + len);
      pos.at += len;
    } else if (wire === 1) pos.at += 8;
    else if (wire === 5) pos.at += 4;
    else throw new Error(`cri-client: wire type ${wire} not handled`);
    const f = byNum.get(num);
    if (!f || raw === undefined) continue;
    switch (f.type) {
      case 'string':
        out[f.key] = raw.toString('utf8');
        break;
      case 'string*':
        out[f.key] = [...(out[f.key] ?? []), raw.toString('utf8')];
        break;
      case 'bool':
        out[f.key] = raw !== 0n;
        break;
      case 'int64':
        out[f.key] = Number(BigInt.asIntN(64, raw));
        break;
      case 'uint32':
      case 'enum':
        out[f.key] = Number(raw);
        break;
      case 'message':
        out[f.key] = decode(f.sub, raw);
        break;
      case 'message*':
        out[f.key] = [...(out[f.key] ?? []), decode(f.sub, raw)];
        break;
      case 'map': {
        const e = decode(MAP_ENTRY, raw);
        out[f.key] = { ...out[f.key], [e.key ?? '']: e.value ?? '' };
        break;
      }
    }
  }
  return out;
}

// --- the runtime.v1 messages the bench uses ---------------------------------

const MAP_ENTRY = { key: [1, 'string'], value: [2, 'string'] };
const PodSandboxMetadata = {
  name: [1, 'string'],
  uid: [2, 'string'],
  namespace: [3, 'string'],
  attempt: [4, 'uint32'],
};
const DNSConfig = { servers: [1, 'string*'], searches: [2, 'string*'], options: [3, 'string*'] };
// NamespaceMode: POD 0, CONTAINER 1, NODE 2.
const NamespaceOption = { network: [1, 'enum'], pid: [2, 'enum'], ipc: [3, 'enum'], target_id: [4, 'string'] };
const SecurityProfile = { profile_type: [1, 'enum'], localhost_ref: [2, 'string'] };
const LinuxSandboxSecurityContext = {
  namespace_options: [1, 'message', NamespaceOption],
  readonly_rootfs: [4, 'bool'],
  privileged: [6, 'bool'],
  seccomp: [9, 'message', SecurityProfile],
};
const LinuxContainerResources = {
  cpu_period: [1, 'int64'],
  cpu_quota: [2, 'int64'],
  cpu_shares: [3, 'int64'],
  memory_limit_in_bytes: [4, 'int64'],
  oom_score_adj: [5, 'int64'],
  cpuset_cpus: [6, 'string'],
  cpuset_mems: [7, 'string'],
  unified: [9, 'map'],
  memory_swap_limit_in_bytes: [10, 'int64'],
};
const LinuxPodSandboxConfig = {
  cgroup_parent: [1, 'string'],
  security_context: [2, 'message', LinuxSandboxSecurityContext],
  sysctls: [3, 'map'],
  overhead: [4, 'message', LinuxContainerResources],
  resources: [5, 'message', LinuxContainerResources],
};
const PodSandboxConfig = {
  metadata: [1, 'message', PodSandboxMetadata],
  hostname: [2, 'string'],
  log_directory: [3, 'string'],
  dns_config: [4, 'message', DNSConfig],
  labels: [6, 'map'],
  annotations: [7, 'map'],
  linux: [8, 'message', LinuxPodSandboxConfig],
};
const ContainerMetadata = { name: [1, 'string'], attempt: [2, 'uint32'] };
const ImageSpec = { image: [1, 'string'], annotations: [2, 'map'] };
const KeyValue = { key: [1, 'string'], value: [2, 'string'] };
// MountPropagation: PRIVATE 0, HOST_TO_CONTAINER 1, BIDIRECTIONAL 2.
const Mount = {
  container_path: [1, 'string'],
  host_path: [2, 'string'],
  readonly: [3, 'bool'],
  propagation: [5, 'enum'],
};
const Capability = { add_capabilities: [1, 'string*'], drop_capabilities: [2, 'string*'] };
const LinuxContainerSecurityContext = {
  capabilities: [1, 'message', Capability],
  privileged: [2, 'bool'],
  namespace_options: [3, 'message', NamespaceOption],
  run_as_username: [6, 'string'],
  readonly_rootfs: [7, 'bool'],
  no_new_privs: [11, 'bool'],
  masked_paths: [13, 'string*'],
  readonly_paths: [14, 'string*'],
  seccomp: [15, 'message', SecurityProfile],
};
const LinuxContainerConfig = {
  resources: [1, 'message', LinuxContainerResources],
  security_context: [2, 'message', LinuxContainerSecurityContext],
};
const ContainerConfig = {
  metadata: [1, 'message', ContainerMetadata],
  image: [2, 'message', ImageSpec],
  command: [3, 'string*'],
  args: [4, 'string*'],
  working_dir: [5, 'string'],
  envs: [6, 'message*', KeyValue],
  mounts: [7, 'message*', Mount],
  labels: [9, 'map'],
  annotations: [10, 'map'],
  log_path: [11, 'string'],
  stdin: [12, 'bool'],
  stdin_once: [13, 'bool'],
  tty: [14, 'bool'],
  linux: [15, 'message', LinuxContainerConfig],
};
const ContainerStatus = {
  id: [1, 'string'],
  metadata: [2, 'message', ContainerMetadata],
  // ContainerState: CREATED 0, RUNNING 1, EXITED 2, UNKNOWN 3.
  state: [3, 'enum'],
  created_at: [4, 'int64'],
  started_at: [5, 'int64'],
  finished_at: [6, 'int64'],
  exit_code: [7, 'int64'],
  reason: [10, 'string'],
  message: [11, 'string'],
  log_path: [15, 'string'],
};
const PodSandbox = {
  id: [1, 'string'],
  metadata: [2, 'message', PodSandboxMetadata],
  // PodSandboxState: READY 0, NOTREADY 1.
  state: [3, 'enum'],
  created_at: [4, 'int64'],
  labels: [5, 'map'],
};

/** method: [request schema, response schema] */
const RPCS = {
  Version: [
    { version: [1, 'string'] },
    {
      version: [1, 'string'],
      runtime_name: [2, 'string'],
      runtime_version: [3, 'string'],
      runtime_api_version: [4, 'string'],
    },
  ],
  RunPodSandbox: [
    { config: [1, 'message', PodSandboxConfig], runtime_handler: [2, 'string'] },
    { pod_sandbox_id: [1, 'string'] },
  ],
  StopPodSandbox: [{ pod_sandbox_id: [1, 'string'] }, {}],
  RemovePodSandbox: [{ pod_sandbox_id: [1, 'string'] }, {}],
  ListPodSandbox: [{}, { items: [1, 'message*', PodSandbox] }],
  CreateContainer: [
    {
      pod_sandbox_id: [1, 'string'],
      config: [2, 'message', ContainerConfig],
      sandbox_config: [3, 'message', PodSandboxConfig],
    },
    { container_id: [1, 'string'] },
  ],
  StartContainer: [{ container_id: [1, 'string'] }, {}],
  ContainerStatus: [
    { container_id: [1, 'string'], verbose: [2, 'bool'] },
    { status: [1, 'message', ContainerStatus], info: [2, 'map'] },
  ],
};

export const CONTAINER_RUNNING = 1;

// --- gRPC over HTTP/2 -------------------------------------------------------

/** A gRPC error: `code` is grpc-status (2 UNKNOWN for cri-dockerd's runtime errors). */
export class GrpcError extends Error {
  constructor(method, code, message) {
    super(`${method}: grpc-status ${code}: ${message}`);
    this.code = code;
  }
}

/**
 * One HTTP/2 connection to the CRI socket; `call(method, request)` resolves
 * with the decoded answer or rejects with a GrpcError. `close()` ends it.
 */
export async function criClient(socketPath, { timeoutMs = 120_000 } = {}) {
  const session = http2.connect('http://localhost', { createConnection: () => net.connect(socketPath) });
  await new Promise((resolve, reject) => {
    session.once('connect', resolve);
    session.once('error', reject);
  });
  session.on('error', () => {}); // a call in flight sees its stream's error
  const call = (method, request = {}) =>
    new Promise((resolve, reject) => {
      const [reqSchema, resSchema] = RPCS[method] ?? [];
      if (!reqSchema) return reject(new Error(`cri-client: no schema for ${method}`));
      const body = encode(reqSchema, request);
      const frame = Buffer.alloc(5 + body.length);
      frame.writeUInt32BE(body.length, 1); // byte 0: not compressed
      body.copy(frame, 5);
      const stream = session.request({
        ':method': 'POST',
        ':path': `/runtime.v1.RuntimeService/${method}`,
        'content-type': 'application/grpc',
        te: 'trailers',
      });
      stream.setTimeout(timeoutMs, () => stream.close(http2.constants.NGHTTP2_CANCEL));
      const chunks = [];
      let status;
      let message = '';
      const fromHeaders = (h) => {
        if (h['grpc-status'] !== undefined) status = Number(h['grpc-status']);
        if (h['grpc-message'] !== undefined) message = decodeURIComponent(String(h['grpc-message']));
      };
      stream.on('response', fromHeaders); // a trailers-only answer carries its status here
      stream.on('trailers', fromHeaders);
      stream.on('data', (c) => chunks.push(c));
      stream.on('error', reject);
      stream.on('close', () => {
        if (status === undefined) return reject(new GrpcError(method, 'none', 'the stream closed without grpc-status'));
        if (status !== 0) return reject(new GrpcError(method, status, message));
        const data = Buffer.concat(chunks);
        if (data.length < 5) return resolve({});
        if (data[0] !== 0) return reject(new Error(`cri-client: ${method}: compressed answer not handled`));
        resolve(decode(resSchema, data.subarray(5, 5 + data.readUInt32BE(1))));
      });
      stream.end(frame);
    });
  const close = () => new Promise((r) => session.close(r));
  return { call, close };
}
