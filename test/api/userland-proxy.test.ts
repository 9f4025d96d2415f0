// `--userland-proxy=false`: a published port is held but not proxied. With the
// firewall left alone (`--iptables=false`) no DNAT publishes it either, so a
// connection to it is reset, while the container serves on its own address and
// the host port stays taken for everyone else.
import net from 'node:net';
import { beforeAll, describe, expect, it } from 'vitest';
import { type Daemon, waitFor } from '../harness/daemon.js';
import { type Env, useEnv } from '../harness/env.js';
import { httpGetText as fetchText } from '../harness/http.js';
import { networkSetup, tearDownAfterAll } from '../harness/network.js';

const setup = networkSetup();
tearDownAfterAll(setup);
const ctx = useEnv({ args: [...setup.args, '--iptables=false', '--userland-proxy=false'] });
let env: Env;
let d: Daemon;
beforeAll(() => {
  ({ env, daemon: d } = ctx);
});

const WEB = ['sh', '-c', 'mkdir -p /www && echo hello > /www/index.html && exec httpd -f -p 80 -h /www'];

/** An HTTP GET; the body, or the error's code (ECONNRESET…). */
const get = (host: string, port: number) =>
  fetchText(host, port).catch((e: NodeJS.ErrnoException) => e.code ?? e.message);

/** Whether binding the port on 0.0.0.0 fails because it is taken. */
const taken = (port: number) =>
  new Promise<boolean>((resolve) => {
    const server = net.createServer();
    server.once('error', (e: NodeJS.ErrnoException) => resolve(e.code === 'EADDRINUSE'));
    server.listen({ host: '0.0.0.0', port, exclusive: true }, () => server.close(() => resolve(false)));
  });

describe('userland-proxy false', () => {
  it('holds a published port without proxying it: no DNAT, no proxy, a reset', async () => {
    const c = await d.request('POST', '/containers/create', {
      body: { Image: env.busybox, Cmd: WEB, HostConfig: { PortBindings: { '80/tcp': [{ HostPort: '' }] } } },
    });
    expect(c.status, c.text).toBe(201);
    expect((await d.request('POST', `/containers/${c.json.Id}/start`)).status).toBe(204);
    const s = (await d.request('GET', `/containers/${c.json.Id}/json`)).json.NetworkSettings;
    const port = Number(s.Ports['80/tcp'][0].HostPort);
    // The container serves: its own address answers from the host.
    expect(await waitFor(async () => ((await get(s.IPAddress, 80)) === 'hello\n' ? true : undefined), 'httpd')).toBe(
      true,
    );
    expect(await get('127.0.0.1', port)).toBe('ECONNRESET');
    expect(await taken(port)).toBe(true);
    await d.request('DELETE', `/containers/${c.json.Id}?force=1`);
    expect(await taken(port)).toBe(false);
  });
});
