// HTTP over a unix socket, and waiting for a daemon's first answer.
import { existsSync } from 'node:fs';
import http from 'node:http';
import { sleep } from './core.mjs';

/**
 * One request over a unix socket; resolves with the whole answer. A connection of its own
 * unless `agent` is given (an http.Agent with keepAlive: requests on a kept connection).
 */
export function request(socketPath, method, urlPath, { body, headers = {}, timeoutMs = 600_000, agent = false } = {}) {
  return new Promise((resolve, reject) => {
    const payload =
      body === undefined || Buffer.isBuffer(body)
        ? body
        : Buffer.from(typeof body === 'string' ? body : JSON.stringify(body));
    const h = { Host: 'localhost', ...headers };
    if (payload) {
      h['Content-Type'] ??= 'application/json';
      h['Content-Length'] = String(payload.length);
    }
    const req = http.request({ socketPath, method, path: urlPath, headers: h, agent }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => {
        const buf = Buffer.concat(chunks);
        const text = buf.toString('utf8');
        let json;
        try {
          json = text ? JSON.parse(text) : undefined;
        } catch {
          json = undefined;
        }
        resolve({ status: res.statusCode ?? 0, headers: res.headers, body: buf, text, json });
      });
      res.on('error', reject);
    });
    req.setTimeout(timeoutMs, () => req.destroy(new Error(`${method} ${urlPath}: no answer in ${timeoutMs} ms`)));
    req.on('error', reject);
    req.end(payload);
  });
}

export function expectOk(what, r, ...ok) {
  if (!ok.includes(r.status)) throw new Error(`${what}: HTTP ${r.status} ${r.text.slice(0, 500)}`);
  return r;
}

export async function waitForPing(socket, proc, what, logs, timeoutMs = 60_000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (proc.exitCode !== null || proc.signalCode !== null)
      throw new Error(`${what} exited (${proc.exitCode ?? proc.signalCode}): ${logs().slice(-2000)}`);
    if (existsSync(socket)) {
      const r = await request(socket, 'GET', '/_ping', { timeoutMs: 2000 }).catch(() => undefined);
      if (r?.status === 200) return;
    }
    if (Date.now() > deadline)
      throw new Error(`${what} did not answer /_ping in ${timeoutMs} ms: ${logs().slice(-2000)}`);
    await sleep(10);
  }
}

export function tail(stream, limit = 64 * 1024) {
  let text = '';
  stream?.on('data', (c) => {
    text = (text + c.toString('utf8')).slice(-limit);
    if (process.env.BERTH_BENCH_LOGS) process.stderr.write(c);
  });
  return () => text;
}
