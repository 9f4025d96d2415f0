// The body of a layer extraction thread (see extractor.ts): each job comes
// with a port carrying the layer's bytes; the thread extracts them and
// answers with the result or the error. Several jobs may interleave here,
// each waiting only for its own bytes.
import { Readable } from 'node:stream';
import { parentPort } from 'node:worker_threads';
import { isEngineError, messageOf } from '../../errors.js';
import { scavengeEvery } from '../os/gc.js';
import type { FromThread, JobStart, ToThread } from './extractor.js';
import { extractLayer } from './unpack.js';

/** Bytes the thread buffers per job before it reports them consumed (below the loop's window). */
const BUFFER = 1 << 20;
/**
 * Consumed bytes are acknowledged in lumps of this size: one message per
 * read() was a hop per chunk, and one each time the buffer ran dry was still
 * one per small message. The loop waits only with a whole window unacknowledged
 * (extractor.ts WINDOW, several lumps), so a lump always comes.
 */
const ACK_STEP = 1 << 20;

/**
 * The thread scavenges after every this many bytes received: the blocks it was
 * handed and its gunzip's output are freed as it goes. Its heap is small and
 * hardly fills, so without this they stay allocated until the thread stops.
 */
const scavenge = scavengeEvery(8 << 20);

if (!parentPort) throw new Error('extract-worker runs as a worker thread');

parentPort.on('message', (job: JobStart) => void run(job));

async function run(job: JobStart): Promise<void> {
  const { port } = job;
  const reply = (m: FromThread) => port.postMessage(m);
  let received = 0;
  let acked = 0;
  const input = new Readable({
    highWaterMark: BUFFER,
    // Asked for more: everything not buffered any more was consumed.
    read() {
      const consumed = received - input.readableLength;
      if (consumed - acked >= ACK_STEP) {
        reply({ ack: consumed - acked });
        acked = consumed;
      }
    },
  });
  port.on('message', (m: ToThread) => {
    if ('data' in m) {
      for (const d of m.data) {
        received += d.byteLength;
        input.push(Buffer.from(d.buffer, d.byteOffset, d.byteLength));
        scavenge(d.byteLength);
      }
    } else if ('end' in m) {
      input.push(null);
    } else {
      input.destroy(new Error('layer extraction abandoned'));
    }
  });
  try {
    reply({ done: await extractLayer(input, job.dir, job) });
  } catch (e) {
    reply({ error: { kind: isEngineError(e) ? e.kind : 'system', message: messageOf(e) } });
  } finally {
    port.close();
  }
}
