// cri-dockerd in front of a bench daemon, driven through the bench's own CRI
// client (cri-client.mjs) on one connection, as kubelet drives it: for benches
// of what kubelet asks through CRI. cri-dockerd is not built here: its path
// comes from $CRI_DOCKERD (v0.3.7 was used).
// The pods get their network from Debian's CNI plugins ($CNI_BIN_DIR, default
// /usr/lib/cni: bridge, host-local, loopback) on a bridge and subnet of their
// own, as cri-dockerd runs them for kubelet; no portmap, so no iptables rules.
// Everything started here is undone by the bench's clean-ups.
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';
import { criClient } from './cri-client.mjs';
import { now, onCleanup, sleep, tempDir } from './lib.mjs';

export const CNI_BIN_DIR = process.env.CNI_BIN_DIR || '/usr/lib/cni';

/** The path of cri-dockerd from the environment, or why the bench cannot run. */
export function criTools() {
  const tools = { criDockerd: process.env.CRI_DOCKERD };
  const missing = Object.entries({ CRI_DOCKERD: tools.criDockerd })
    .filter(([, p]) => !p || !existsSync(p))
    .map(([k]) => k);
  if (!existsSync(path.join(CNI_BIN_DIR, 'bridge'))) missing.push(`CNI plugins in ${CNI_BIN_DIR}`);
  if (missing.length) throw new Error(`needs ${missing.join(', ')} (see the header of bench/cri.mjs)`);
  return tools;
}

/**
 * An Engine-API proxy on a unix socket in front of `upstream` that sets a
 * negative HostConfig.OomScoreAdj on create to 0: cri-dockerd gives every
 * sandbox -998, which a machine without CAP_SYS_RESOURCE (a VM like the one
 * the figures were taken on) cannot apply. The same proxy stands in front of
 * each daemon. Upgraded connections (exec, attach) are passed through as bytes.
 *
 * It also times each exchange, from the request's arrival to the answer's
 * last byte, into `log` as { call, request, status, ms } while `call` (set
 * by the bench around each CRI call) is not null: which Engine-API requests
 * a CRI call makes and what each costs, the proxy's own hop included on both
 * sides alike.
 */
export async function oomClampProxy(socketPath, upstream) {
  const timing = { call: null, log: [] };
  const forward = (req, res, body) => {
    const headers = { ...req.headers };
    if (body !== undefined) {
      headers['content-length'] = String(body.length);
      delete headers['transfer-encoding'];
    }
    const up = http.request({ socketPath: upstream, method: req.method, path: req.url, headers }, (ur) => {
      res.writeHead(ur.statusCode ?? 502, ur.rawHeaders);
      res.flushHeaders();
      ur.pipe(res);
    });
    up.on('error', (e) => (res.headersSent ? res.destroy() : res.writeHead(502).end(String(e))));
    res.on('close', () => up.destroy());
    if (body !== undefined) up.end(body);
    else req.pipe(up);
  };
  const server = http.createServer((req, res) => {
    const t0 = now();
    const call = timing.call;
    if (call !== null)
      res.once('finish', () =>
        timing.log.push({ call, request: requestKind(req), status: res.statusCode, ms: now() - t0 }),
      );
    if (req.method !== 'POST' || !/\/containers\/create(\?|$)/.test(req.url ?? '')) return forward(req, res);
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      let body = Buffer.concat(chunks);
      try {
        const j = JSON.parse(body.toString('utf8'));
        if (j.HostConfig?.OomScoreAdj < 0) {
          j.HostConfig.OomScoreAdj = 0;
          body = Buffer.from(JSON.stringify(j));
        }
      } catch {}
      forward(req, res, body);
    });
  });
  server.on('upgrade', (req, sock, head) => {
    const up = net.connect(upstream, () => {
      let h = `${req.method} ${req.url} HTTP/1.1\r\n`;
      for (let i = 0; i < req.rawHeaders.length; i += 2) h += `${req.rawHeaders[i]}: ${req.rawHeaders[i + 1]}\r\n`;
      up.write(`${h}\r\n`);
      if (head.length) up.write(head);
      sock.pipe(up);
      up.pipe(sock);
    });
    up.on('error', () => sock.destroy());
    sock.on('error', () => up.destroy());
  });
  server.keepAliveTimeout = 0;
  server.requestTimeout = 0;
  await new Promise((resolve, reject) => server.once('error', reject).listen(socketPath, resolve));
  onCleanup(() => new Promise((r) => server.close(() => r()).closeAllConnections()));
  return { socket: socketPath, timing };
}

/** `POST /containers/{id}/start` for `POST /v1.41/containers/3f…/start?x=y`. */
function requestKind(req) {
  const p = (req.url ?? '')
    .replace(/\?.*$/, '')
    .replace(/^\/v[0-9.]+\//, '/')
    .replace(/\/containers\/[^/]+(?=\/|$)/, (m) =>
      m === '/containers/json' || m === '/containers/create' ? m : '/containers/{id}',
    )
    .replace(/\/images\/.+\/json$/, '/images/{name}/json');
  return `${req.method} ${p}`;
}

/**
 * cri-dockerd on sockets and directories of its own in front of daemon `d`
 * (through oomClampProxy), with a CNI bridge `bridge` on `subnet`. Returns
 * { socket, dir, pid, cri, timing, log() }: `cri.call(method, request)` is
 * one CRI call on the bench's one connection, `timing` the proxy's record of
 * the Engine-API requests. Its clean-up stops and removes every pod through
 * cri-dockerd first (so CNI DEL runs), then stops it and deletes the bridge.
 */
export async function startCriDockerd(d, { bridge, subnet, pauseImage }) {
  const { criDockerd } = criTools();
  const dir = tempDir('bc-');
  // Registered before cri-dockerd starts, so it runs after cri-dockerd has stopped.
  onCleanup(() => spawnSync('ip', ['link', 'del', bridge], { stdio: 'ignore' }));
  const proxy = await oomClampProxy(path.join(dir, 'p.sock'), d.socket);
  const confDir = path.join(dir, 'cni-conf');
  mkdirSync(confDir);
  const conf = {
    cniVersion: '0.4.0',
    name: `bench-${bridge}`,
    plugins: [
      {
        type: 'bridge',
        bridge,
        isGateway: true,
        ipMasq: false,
        ipam: { type: 'host-local', ranges: [[{ subnet }]], dataDir: path.join(dir, 'ipam') },
      },
    ],
  };
  writeFileSync(path.join(confDir, '10-bench.conflist'), JSON.stringify(conf));
  const socket = path.join(dir, 'cri.sock');
  const proc = spawn(
    criDockerd,
    [
      '--docker-endpoint',
      `unix://${proxy.socket}`,
      '--container-runtime-endpoint',
      `unix://${socket}`,
      '--cri-dockerd-root-directory',
      path.join(dir, 'root'),
      '--network-plugin',
      'cni',
      '--cni-bin-dir',
      CNI_BIN_DIR,
      '--cni-conf-dir',
      confDir,
      '--cni-cache-dir',
      path.join(dir, 'cni-cache'),
      '--pod-infra-container-image',
      pauseImage,
      '--streaming-bind-addr',
      '127.0.0.1:0',
    ],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
  let log = '';
  proc.stderr.on('data', (c) => {
    log = (log + c).slice(-16_384);
  });
  const exited = new Promise((r) => proc.once('exit', r));
  let client;
  onCleanup(async () => {
    if (proc.exitCode === null) {
      try {
        if (client) await removeAllPods(client);
      } catch (e) {
        console.error(`bench: removing the pods on ${d.kind}: ${e.message}`);
      }
      await client?.close();
      proc.kill('SIGTERM');
      const killer = setTimeout(() => proc.kill('SIGKILL'), 15_000);
      await exited;
      clearTimeout(killer);
    }
  });
  for (const deadline = Date.now() + 30_000; ; ) {
    if (proc.exitCode !== null) throw new Error(`cri-dockerd exited ${proc.exitCode}: ${log}`);
    try {
      if (existsSync(socket)) {
        const c = await criClient(socket);
        await c.call('Version');
        client = c;
        break;
      }
    } catch {}
    if (Date.now() > deadline) throw new Error(`cri-dockerd does not answer on ${socket}: ${log}`);
    await sleep(100);
  }
  return { socket, dir, pid: proc.pid, cri: client, timing: proxy.timing, log: () => log };
}

/** Every pod stopped and removed, as `crictl rmp -af` does. */
export async function removeAllPods(client) {
  const { items = [] } = await client.call('ListPodSandbox');
  for (const { id } of items) {
    await client.call('StopPodSandbox', { pod_sandbox_id: id });
    await client.call('RemovePodSandbox', { pod_sandbox_id: id });
  }
}
