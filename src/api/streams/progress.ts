// Pull and push progress as dockerd writes it: newline-delimited JSON messages, with the
// progress bar text of docker's jsonmessage, and errors in-band once the stream
// has begun (before that, errors are ordinary HTTP errors).
import type { FastifyReply } from 'fastify';
import { messageOf } from '../../errors.js';
import type { PushEvent } from '../../engine/index.js';
import { COMMON_HEADERS } from '../headers.js';

/** docker/go-units HumanSize: decimal units, four significant digits. */
function humanSize(n: number): string {
  const units = ['B', 'kB', 'MB', 'GB', 'TB', 'PB'];
  let i = 0;
  while (n >= 1000 && i < units.length - 1) {
    n /= 1000;
    i++;
  }
  return `${Number(n.toPrecision(4))}${units[i]}`;
}

/** jsonmessage's JSONProgress.String() for a 200-column (non-terminal) width. */
function progressBar(current: number, total: number | undefined, startedAt?: number, now = Date.now()): string {
  if (current <= 0 && (total ?? 0) <= 0) return '';
  if (!total || total <= 0) return humanSize(current).padStart(8);
  const pct = Math.min(50, Math.floor(Math.floor((current / total) * 100) / 2));
  const bar = `[${'='.repeat(pct)}>${' '.repeat(Math.max(0, 50 - pct))}] `;
  const numbers =
    current > total ? humanSize(current).padStart(8) : `${humanSize(current).padStart(8)}/${humanSize(total)}`;
  let left = '';
  if (current > 0 && startedAt && pct < 50) {
    const secs = Math.floor((((now - startedAt) / current) * (total - current)) / 1000);
    left = ` ${goDuration(secs)}`;
  }
  return bar + numbers + left;
}

const goDuration = (s: number) => {
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const sec = s % 60;
  return h ? `${h}h${m}m${sec}s` : m ? `${m}m${sec}s` : `${sec}s`;
};

/** The JSON object dockerd writes for one event. */
function progressMessage(e: PushEvent, startedAt?: number): Record<string, unknown> {
  // dockerd's aux messages (a push's {Tag, Digest, Size}) carry an empty progressDetail and nothing else.
  if (e.aux) return { progressDetail: {}, aux: e.aux };
  const msg: Record<string, unknown> = { status: e.status };
  if (e.layer || e.current !== undefined) {
    msg.progressDetail = e.current !== undefined ? { current: e.current, ...(e.total ? { total: e.total } : {}) } : {};
  }
  if (e.current !== undefined) msg.progress = progressBar(e.current, e.total, startedAt);
  if (e.id !== undefined) msg.id = e.id;
  return msg;
}

/**
 * A lazily started JSON-lines response. Nothing is written until the first event,
 * so an error before then is answered with its own status; after, it goes in-band.
 */
export class JsonLinesStream {
  private started = false;
  private readonly starts = new Map<string, number>();

  constructor(private readonly reply: FastifyReply) {}

  get hasStarted(): boolean {
    return this.started;
  }

  private begin(): void {
    if (this.started) return;
    this.started = true;
    this.reply.hijack();
    this.reply.raw.writeHead(200, { ...COMMON_HEADERS, 'Content-Type': 'application/json' });
  }

  write(obj: unknown): void {
    this.begin();
    if (!this.reply.raw.destroyed) this.reply.raw.write(`${JSON.stringify(obj)}\n`);
  }

  progress(e: PushEvent): void {
    const key = `${e.id}:${e.status}`;
    if (e.current !== undefined && !this.starts.has(key)) this.starts.set(key, Date.now());
    this.write(progressMessage(e, this.starts.get(key)));
  }

  /** In-band error, dockerd's shape. */
  error(err: unknown): void {
    const message = messageOf(err);
    this.write({ errorDetail: { message }, error: message });
  }

  end(): void {
    this.begin();
    this.reply.raw.end();
  }

  /** The client is gone: nothing more is written, and the connection is closed. */
  drop(): void {
    if (!this.started) {
      this.started = true;
      this.reply.hijack();
    }
    this.reply.raw.destroy();
  }
}
