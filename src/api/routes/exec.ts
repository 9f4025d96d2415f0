// /containers/{id}/exec and /exec/*: thin translations to the exec service.
import type { FastifyInstance } from 'fastify';
import { type Engine, ExecCreateSchema } from '../../engine/index.js';
import { messageOf } from '../../errors.js';
import { hijack, runSession } from '../streams/hijack.js';
import { frame, STDOUT, streamContentType } from '../streams/mux.js';
import { versionBelow } from '../version.js';
import { execInspect, ExecStartSchema } from '../wire/exec.js';
import { intValue, parseJsonBody, query, withoutNulls } from '../wire/forms.js';

type IdParams = { Params: { id: string } };

export function execRoutes(app: FastifyInstance, engine: Engine): void {
  const execs = engine.execs;

  app.post<IdParams>('/containers/:id/exec', async (req, reply) => {
    const body = withoutNulls(
      await parseJsonBody(req, ExecCreateSchema, { required: true, goType: 'container.ExecOptions' }),
    );
    return reply.code(201).send(execs.create(req.params.id, body));
  });

  app.get<IdParams>('/exec/:id/json', async (req) => execInspect(execs.inspect(req.params.id)));

  app.post<IdParams>('/exec/:id/resize', async (req, reply) => {
    const q = query(req);
    await execs.resize(req.params.id, intValue(q.h, 'h') ?? 0, intValue(q.w, 'w') ?? 0);
    return reply.code(200).send();
  });

  // Detached: answers once the process runs. Attached: the connection is
  // hijacked first; a process that cannot start is reported in the stream
  // (dockerd writes the error to stdout), its exit code in the exec's inspect.
  // The process has a TTY if the exec was created with one; the start's own
  // Tty only says whether the stream is raw or framed (and whether its
  // ConsoleSize counts), as in dockerd: docker-py creates with Tty and starts
  // without, and reads a framed stream.
  app.post<IdParams>('/exec/:id/start', async (req, reply) => {
    const body = await parseJsonBody(req, ExecStartSchema, { required: true, goType: 'container.ExecStartOptions' });
    const detach = body.Detach ?? false;
    const raw = body.Tty ?? false;
    const start = execs.start(req.params.id, { detach, consoleSize: raw ? (body.ConsoleSize ?? null) : null });
    if (detach) {
      await start.run();
      return reply.code(200).send();
    }
    const { session } = start;
    let sock: ReturnType<typeof hijack>;
    try {
      sock = hijack(req, reply, streamContentType(raw, req.apiVersion, versionBelow));
    } catch (e) {
      start.abandon();
      throw e;
    }
    const run = async () => {
      try {
        await start.run();
        return null;
      } catch (e) {
        const text = Buffer.from(`${messageOf(e)}\r\n`);
        return raw ? text : frame(STDOUT, text);
      }
    };
    if (session) {
      let ended = false;
      sock.once('close', () => {
        if (!ended) start.abandon();
      });
      await runSession(req, sock, session, run, raw);
      ended = true;
      return;
    }
    // Nothing attached: the stream ends once the process runs.
    const failure = await run();
    if (failure) sock.write(failure);
    sock.end();
  });
}
