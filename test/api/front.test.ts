// What a client sees of a starting berthd: its socket answers /_ping as soon as
// it listens, and the requests sent before its API is built (src/api/front.ts)
// are answered as they would be later, in the order they came. Each test sends
// its requests as soon as the socket appears, as a client polling for it does.
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { BERTHD, hermeticArgs, request, waitFor } from '../harness/daemon.js';
import { blankDate, rawExchange } from '../harness/raw-http.js';

let proc: ChildProcess | undefined;
let dir: string | undefined;

afterEach(async () => {
  if (proc && proc.exitCode === null && proc.signalCode === null) {
    const exited = new Promise((r) => proc?.once('exit', r));
    proc.kill('SIGTERM');
    await exited;
  }
  if (dir) rmSync(dir, { recursive: true, force: true });
  proc = dir = undefined;
});

/** Starts berthd and resolves with its socket's path as soon as the socket exists. */
async function startAndWaitForSocket(): Promise<string> {
  dir = mkdtempSync(path.join(os.tmpdir(), 'berth-front-'));
  const { socket, args } = hermeticArgs(dir);
  proc = spawn(process.execPath, [BERTHD, ...args], { stdio: 'ignore' });
  await waitFor(() => existsSync(socket), 'the socket', 20_000, 1);
  return socket;
}

/** Connects until the socket accepts: it exists a moment before it listens. */
async function firstExchange(socket: string, text: string): Promise<string> {
  return waitFor(
    () =>
      rawExchange(socket, text).catch((e: NodeJS.ErrnoException) =>
        e.code === 'ECONNREFUSED' ? false : Promise.reject(e),
      ),
    'the first answer',
    20_000,
    1,
  );
}

describe('a starting berthd', () => {
  it('answers /_ping at once, byte for byte as its API does later', async () => {
    const socket = await startAndWaitForSocket();
    const ping = 'GET /v1.41/_ping HTTP/1.1\r\nHost: docker\r\nConnection: close\r\n\r\n';
    const first = await firstExchange(socket, ping);
    // A Content-Length makes even the fast lane leave /_ping to Fastify's route.
    const later = await rawExchange(socket, ping.replace('\r\n\r\n', '\r\nContent-Length: 0\r\n\r\n'));
    expect(first).toMatch(/^HTTP\/1\.1 200 OK\r\n/);
    expect(first).toMatch(/\r\n\r\nOK$/);
    expect(blankDate(first)).toBe(blankDate(later));
  });

  it('serves the requests sent before its API is built, in the order they came', async () => {
    const socket = await startAndWaitForSocket();
    const body = JSON.stringify({ Image: 'none-such' });
    const pipelined = [
      `POST /v1.41/containers/create HTTP/1.1\r\nHost: docker\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`,
      'GET /v1.41/version HTTP/1.1\r\nHost: docker\r\n\r\n',
      'GET /v1.41/containers/json?all=1 HTTP/1.1\r\nHost: docker\r\n\r\n',
      'HEAD /_ping HTTP/1.1\r\nHost: docker\r\nConnection: close\r\n\r\n',
    ].join('');
    const [answers, info] = await Promise.all([
      firstExchange(socket, pipelined),
      waitFor(() => request(socket, 'GET', '/info').catch(() => undefined), 'GET /info', 20_000, 1),
    ]);
    const statuses = [...answers.matchAll(/HTTP\/1\.1 (\d{3}) /g)].map((m) => Number(m[1]));
    expect(statuses).toEqual([404, 200, 200, 200]);
    expect(answers).toMatch(/\{"message":"No such image: none-such(:latest)?"\}/);
    expect(answers).toMatch(/"ApiVersion":"1\.47"/);
    expect(answers).toContain('\r\n\r\n[]\n');
    expect(info.status).toBe(200);
    expect(JSON.parse(info.text).Driver).toBe('overlay2');
  });

  it("answers a request it cannot parse in Docker's shape before its API is built", async () => {
    const socket = await startAndWaitForSocket();
    const answer = await firstExchange(socket, 'NOT HTTP AT ALL\r\n\r\n');
    expect(answer).toMatch(/^HTTP\/1\.1 400 Bad Request\r\n/);
    expect(answer).toMatch(/\r\nApi-Version: 1\.47\r\n/);
    expect(JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4)).message).toMatch(/^malformed HTTP request: /);
    // And it goes on serving.
    expect((await request(socket, 'GET', '/_ping')).text).toBe('OK');
  });
});
