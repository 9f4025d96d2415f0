// The front (src/api/front.ts) on a socket of its own: what it holds for the API
// is handed over in order, or refused in Docker's shape when it closes first.
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { type Front, openFront } from '../../src/api/front.js';
import { request, waitFor } from '../harness/daemon.js';

let dir: string;
let front: Front | undefined;

afterEach(async () => {
  await front?.close();
  rmSync(dir, { recursive: true, force: true });
});

async function listening(onHold: () => void): Promise<string> {
  dir = mkdtempSync(path.join(os.tmpdir(), 'berth-front-'));
  const socket = path.join(dir, 's.sock');
  front = openFront({ activity: () => undefined, onHold });
  const f = front;
  await new Promise<void>((r) => f.server.listen(socket, r));
  return socket;
}

describe('the front', () => {
  it('answers /_ping itself and holds the rest until the API takes them, in order', async () => {
    let holds = 0;
    const socket = await listening(() => {
      holds++;
    });
    expect((await request(socket, 'GET', '/v1.45/_ping')).text).toBe('OK');
    const first = request(socket, 'GET', '/version');
    await waitFor(() => holds === 1, 'the first hold');
    const second = request(socket, 'POST', '/containers/create', { body: {} });
    await waitFor(() => holds === 2, 'the second hold');
    const seen: string[] = [];
    front?.attach((req, res) => {
      seen.push(`${req.method} ${req.url}`);
      res.end(req.url);
    });
    expect((await first).text).toBe('/version');
    expect((await second).text).toBe('/containers/create');
    expect(seen).toEqual(['GET /version', 'POST /containers/create']);
  });

  it('refuses what it holds when it closes before the API takes it', async () => {
    let held = false;
    const socket = await listening(() => {
      held = true;
    });
    const answer = request(socket, 'GET', '/info');
    await waitFor(() => held, 'the hold');
    const closed = front?.close();
    front = undefined;
    const res = await answer;
    expect(res.status).toBe(503);
    expect(JSON.parse(res.text)).toEqual({ message: 'the daemon is shutting down' });
    await closed;
  });
});
