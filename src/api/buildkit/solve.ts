// A build as buildx drives it (docs/buildkit/protocol.md §3.1): Control/Solve
// names a job (its Ref), its session and its exporter, and carries no frontend;
// the build itself is asked for on the same connection through LLBBridge calls
// tagged with the job's Ref (`buildkit-controlapi-buildid`): Ping, Solve (the
// Dockerfile frontend, run here at once), Return (the result to export, or
// the client's error). Control/Status streams the job's progress and may come
// before the job exists; LLBBridge calls may too. The job ends with Solve's
// answer; a session that closes or a Solve call the client resets aborts it.
import { randomBytes } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http2';
import type { Engine } from '../../engine/index.js';
import { messageOf } from '../../errors.js';
import { exportFiles, FILE_EXPORTER_ATTRS, FILE_EXPORTERS } from './exporters.js';
import { DOCKERFILE_FRONTEND, FrontendError, runDockerfile } from './frontend.js';
import { GrpcCode, GrpcError, type Method } from './grpc.js';
import { StatusFeed, Vertex } from './progress.js';
import * as m from './proto/messages.js';
import type { Msg } from './proto/wire.js';
import type { ClientSession, ClientSessions } from './session.js';
import { Registry } from './waits.js';

const CONTROL = '/moby.buildkit.v1.Control';
const BRIDGE = '/moby.buildkit.v1.frontend.LLBBridge';

/** How long LLBBridge calls wait for their job (BuildKit's forwarder: 3 s), and Status for its. */
const BRIDGE_WAIT_MS = 3_000;
const STATUS_WAIT_MS = 30_000;
/** A finished job is kept this long for a Status call that comes late. */
const KEEP_FINISHED_MS = 5_000;
const MAX_REF = 256;

/**
 * The LLBBridge capabilities berthd honours (buildx reads `return` and
 * `proto.refarray`; the others it would use are left out until they hold).
 */
const FRONTEND_CAPS = ['proto.refarray', 'return', 'solve.base'];

/** Exporter attributes taken and left alone: buildx pushes through `POST /images/{name}/push` itself. */
const IGNORED_EXPORTER_ATTRS = new Set(['push']);

interface Job {
  ref: string;
  /** When the Solve came (ms): images added since are this build's. */
  started: number;
  request: Msg;
  feed: StatusFeed;
  abort: AbortController;
  session: Promise<ClientSession | undefined>;
  /** LLBBridge.Solve's result: the ref it answered and the image behind it. */
  result?: { id: string; imageId: string };
  /** LLBBridge.Solve's failure, as it answered it. */
  failure?: FrontendError;
  solving: boolean;
  returned: Promise<Msg>;
  onReturn: (r: Msg) => void;
}

const invalid = (message: string) => new GrpcError(GrpcCode.INVALID_ARGUMENT, message);

/** Jobs by Ref, with waiting for one that is not registered yet. */
class Jobs {
  private readonly jobs = new Registry<Job>();

  add(job: Job): void {
    if (this.jobs.has(job.ref)) throw invalid(`job ID ${job.ref} exists`);
    this.jobs.set(job.ref, job);
  }

  /** Forgets a finished job after a while. */
  finish(job: Job): void {
    setTimeout(() => this.jobs.delete(job.ref, job), KEEP_FINISHED_MS).unref();
  }

  waitFor(ref: string, signal: AbortSignal, ms: number): Promise<Job> {
    return this.jobs.waitFor(ref, signal, ms, () => new GrpcError(GrpcCode.NOT_FOUND, `no such job ${ref}`));
  }
}

/** A promise that rejects when the signal aborts. */
function untilAborted<T>(p: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    p.then(
      (v) => {
        signal.removeEventListener('abort', onAbort);
        resolve(v);
      },
      (e: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(e);
      },
    );
  });
}

/** What a Control/Solve and an LLBBridge/Solve may both carry and berthd does not build from (yet). */
function refuseInputs(req: Msg): void {
  if ((req.Definition as Buffer | undefined)?.length)
    throw invalid('solving an LLB definition is not supported by berthd');
  if (Object.keys((req.FrontendInputs as object | undefined) ?? {}).length)
    throw invalid('frontend inputs (named contexts) are not supported by berthd yet');
}

/** What a Control/Solve asks that berthd does not do (yet): refused by name. */
function checkSolve(req: Msg): void {
  const ref = String(req.Ref ?? '');
  if (!ref) throw invalid('invalid empty ref');
  if (ref.length > MAX_REF) throw invalid('the ref is too long');
  if (req.Frontend)
    throw invalid(
      `frontend ${String(req.Frontend)} in Control.Solve is not supported by berthd: a build comes through the LLBBridge (as buildx sends it)`,
    );
  refuseInputs(req);
  const exporter = String(req.Exporter ?? '');
  const files = exporter in FILE_EXPORTERS;
  if (exporter && exporter !== 'moby' && !files)
    throw invalid(
      `exporter "${exporter}" is not supported by berthd yet (only the image store, moby or --load, and the files: local, tar)`,
    );
  if (files && !req.Session)
    throw invalid(`the ${exporter} exporter sends the files to the client: it needs a session (SolveRequest.Session)`);
  for (const k of Object.keys((req.ExporterAttrs as Record<string, string> | undefined) ?? {}))
    if (files ? !FILE_EXPORTER_ATTRS.has(k) : k !== 'name' && !IGNORED_EXPORTER_ATTRS.has(k))
      throw invalid(`exporter attribute ${k} is not supported by berthd's ${exporter} exporter`);
  const cache = (req.Cache as Msg | undefined) ?? {};
  if ((cache.Exports as unknown[] | undefined)?.length) throw invalid('cache export is not supported by berthd yet');
  if ((cache.Imports as unknown[] | undefined)?.length) throw invalid('cache import is not supported by berthd yet');
  for (const e of (req.Entitlements as string[] | undefined) ?? [])
    if (e !== 'network.host') throw invalid(`entitlement ${e} is not supported by berthd`);
  if ((req.SourcePolicy as Buffer | undefined)?.length) throw invalid('source policies are not supported by berthd');
}

const buildId = (headers: IncomingHttpHeaders): string => {
  const v = headers['buildkit-controlapi-buildid'];
  const id = Array.isArray(v) ? v[0] : v;
  if (!id)
    throw invalid('no buildkit-controlapi-buildid in the call: berthd serves the LLBBridge of a Control.Solve only');
  return id;
};

/** gRPC's code names, as Go's status error prints them. */
const CODE_NAMES: Record<number, string> = {
  1: 'Canceled',
  2: 'Unknown',
  3: 'InvalidArgument',
  5: 'NotFound',
  9: 'FailedPrecondition',
  12: 'Unimplemented',
  14: 'Unavailable',
};

/** The Solve's error from the client's Return: as dockerd words it (a failed step bare, the rest as the gateway's rpc error). */
function returnedError(job: Job, status: Msg): GrpcError {
  const code = Number(status.code ?? GrpcCode.UNKNOWN);
  const message = String(status.message ?? '');
  if (job.failure?.inStep && job.failure.message === message) return new GrpcError(GrpcCode.UNKNOWN, message);
  return new GrpcError(GrpcCode.UNKNOWN, `rpc error: code = ${CODE_NAMES[code] ?? `Code(${code})`} desc = ${message}`);
}

/** The build the client's Return names: the result LLBBridge.Solve answered. */
function built(job: Job, result: Msg | undefined): { id: string; imageId: string } {
  const ref = (result?.ref as Msg | undefined)?.id;
  if (!job.result || ref !== job.result.id) throw invalid(`invalid reference: ${String(ref ?? '')}`);
  return job.result;
}

/** The Control/Solve, Control/Status and LLBBridge methods of berthd's `/grpc`. */
export function solveMethods(
  engine: Engine,
  sessions: ClientSessions,
  /** The one worker berthd is (Control/ListWorkers'), for LLBBridge/Ping's answer. */
  worker: () => Msg,
): Array<[string, Method]> {
  const jobs = new Jobs();

  /** The moby exporter: tags the image as the names say, with BuildKit's "exporting to image" rows. */
  const exportImage = (job: Job, result: Msg | undefined): Msg => {
    const { imageId } = built(job, result);
    const vertex = new Vertex(job.feed, 'exporting to image').start();
    vertex.status('exporting layers', undefined, true);
    vertex.status(`writing image ${imageId}`, undefined, true);
    const attrs = (job.request.ExporterAttrs as Record<string, string> | undefined) ?? {};
    const names = (attrs.name ?? '').split(',').filter(Boolean);
    try {
      for (const full of engine.builds.tag(imageId, names)) vertex.status(`naming to ${full}`, undefined, true);
    } catch (e) {
      vertex.complete(messageOf(e));
      throw e;
    }
    vertex.complete();
    return { ExporterResponse: { 'containerimage.config.digest': imageId, 'containerimage.digest': imageId } };
  };

  const solve: Method = {
    request: m.SolveRequest,
    answer: m.SolveResponse,
    async handle(req, send, signal) {
      checkSolve(req);
      let onReturn!: (r: Msg) => void;
      const returned = new Promise<Msg>((resolve) => {
        onReturn = resolve;
      });
      const abort = new AbortController();
      const sessionId = String(req.Session ?? '');
      const session = sessionId ? sessions.waitFor(sessionId, abort.signal) : Promise.resolve(undefined);
      session.catch(() => undefined);
      const job: Job = {
        ref: String(req.Ref),
        started: Date.now(),
        request: req,
        feed: new StatusFeed(),
        abort,
        session,
        solving: false,
        returned,
        onReturn,
      };
      jobs.add(job);
      const cancel = () => abort.abort(new GrpcError(GrpcCode.CANCELLED, 'context canceled'));
      signal.addEventListener('abort', cancel, { once: true });
      try {
        const s = await untilAborted(session, abort.signal);
        s?.closed.then(() => abort.abort(new GrpcError(GrpcCode.CANCELLED, 'the session closed')));
        const ret = await untilAborted(returned, abort.signal);
        if (ret.error) throw returnedError(job, ret.error as Msg);
        const exporter = String(req.Exporter ?? '');
        let answer: Msg = {};
        if (req.Internal || !exporter) answer = {};
        else if (exporter === 'moby') answer = exportImage(job, ret.result as Msg | undefined);
        else {
          const { imageId } = built(job, ret.result as Msg | undefined);
          if (!s) throw invalid('exporting files needs a session (SolveRequest.Session)');
          await exportFiles(engine, s, exporter, imageId, job.feed, abort.signal);
          // The files were the output: the image made on the way goes, as BuildKit makes none. A
          // failure to (an image someone started using meanwhile) leaves it and fails nothing.
          await engine.images.discardBuilt(imageId, job.started).catch(() => undefined);
        }
        // buildx stops reading Status 3 s after Solve answered: the progress goes first.
        await untilAborted(job.feed.end(), abort.signal);
        send(answer);
      } catch (e) {
        // As dockerd: the failed vertex and the end of Status before Solve's error.
        if (!abort.signal.aborted) await job.feed.end();
        throw e;
      } finally {
        signal.removeEventListener('abort', cancel);
        abort.abort(new GrpcError(GrpcCode.CANCELLED, 'the build ended'));
        if (signal.aborted) job.feed.abort();
        else void job.feed.end();
        jobs.finish(job);
      }
    },
  };

  const status: Method = {
    request: m.StatusRequest,
    answer: m.StatusResponse,
    stream: true,
    async handle(req, send, signal) {
      const job = await jobs.waitFor(String(req.Ref ?? ''), signal, STATUS_WAIT_MS);
      await new Promise<void>((resolve) => {
        const stop = job.feed.subscribe((msg) => {
          if (msg) send(msg);
          else resolve();
        });
        signal.addEventListener(
          'abort',
          () => {
            stop();
            resolve();
          },
          { once: true },
        );
      });
    },
  };

  const ping: Method = {
    request: m.PingRequest,
    answer: m.PongResponse,
    async handle(_req, send, signal, headers) {
      await jobs.waitFor(buildId(headers), signal, BRIDGE_WAIT_MS);
      send({
        FrontendAPICaps: FRONTEND_CAPS.map((ID) => ({ ID, Enabled: true })),
        LLBCaps: [],
        Workers: [worker()],
      });
    },
  };

  const bridgeSolve: Method = {
    request: m.GatewaySolveRequest,
    answer: m.GatewaySolveResponse,
    async handle(req, send, signal, headers) {
      const job = await jobs.waitFor(buildId(headers), signal, BRIDGE_WAIT_MS);
      if (req.Frontend !== DOCKERFILE_FRONTEND)
        throw invalid(
          `frontend ${JSON.stringify(req.Frontend ?? '')} is not supported by berthd (only ${DOCKERFILE_FRONTEND})`,
        );
      refuseInputs(req);
      if ((req.CacheImports as unknown[] | undefined)?.length)
        throw invalid('cache import is not supported by berthd yet');
      if (job.solving) throw new GrpcError(GrpcCode.FAILED_PRECONDITION, 'berthd runs one frontend solve per build');
      job.solving = true;
      const session = await untilAborted(job.session, job.abort.signal);
      if (!session) throw invalid('a Dockerfile build needs a session (SolveRequest.Session)');
      const both = AbortSignal.any([job.abort.signal, signal]);
      try {
        const { imageId } = await runDockerfile(
          engine,
          session,
          (req.FrontendOpt as Record<string, string> | undefined) ?? {},
          job.feed,
          both,
        );
        job.result = { id: randomBytes(13).toString('hex').slice(0, 25), imageId };
        send({
          result: {
            ref: { id: job.result.id },
            metadata: { 'containerimage.config': Buffer.from(engine.builds.imageConfig(imageId)) },
          },
        });
      } catch (e) {
        if (e instanceof FrontendError) job.failure = e;
        // A reset LLBBridge.Solve (the client gave up) takes the whole job with it.
        if (signal.aborted) job.abort.abort(signal.reason);
        throw e;
      }
    },
  };

  const ret: Method = {
    request: m.ReturnRequest,
    answer: m.ReturnResponse,
    async handle(req, send, signal, headers) {
      const job = await jobs.waitFor(buildId(headers), signal, BRIDGE_WAIT_MS);
      job.onReturn(req);
      send({});
    },
  };

  return [
    [`${CONTROL}/Solve`, solve],
    [`${CONTROL}/Status`, status],
    [`${BRIDGE}/Ping`, ping],
    [`${BRIDGE}/Solve`, bridgeSolve],
    [`${BRIDGE}/Return`, ret],
  ];
}
