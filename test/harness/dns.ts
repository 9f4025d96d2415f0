// DNS from inside test network namespaces: lookups as a container makes them,
// and upstream resolvers to forward to where there is no outside network.
// `ip netns exec` (not nsenter) runs the commands, so a namespace sees
// /etc/netns/<ns>/resolv.conf as its /etc/resolv.conf, as a container sees
// the file berth writes for it.
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';

const BUSYBOX = '/bin/busybox';
const run = promisify(execFile);

/** Makes `text` the /etc/resolv.conf of what `ip netns exec <ns>` runs; returns its removal. */
export function setNsResolvConf(ns: string, text: string): () => void {
  const dir = path.join('/etc/netns', ns);
  mkdirSync(dir, { recursive: true });
  writeFileSync(path.join(dir, 'resolv.conf'), text);
  return () => rmSync(dir, { recursive: true, force: true });
}

/**
 * The IPv4 addresses `name` resolves to when asked from `ns`, of `server`
 * (busybox nslookup, one query, no search domain); [] when it does not exist.
 */
export async function lookup(ns: string, name: string, server: string): Promise<string[]> {
  const cmd = ['netns', 'exec', ns, 'timeout', '10', BUSYBOX, 'nslookup', '-type=a', name, server];
  const out = await run('ip', cmd).then(
    (r) => r.stdout,
    (e: { stdout?: string; stderr?: string }) => {
      if (/NXDOMAIN/.test(e.stdout ?? '')) return '';
      throw new Error(`nslookup ${name} from ${ns}: ${e.stdout ?? ''}${e.stderr ?? ''}`);
    },
  );
  const answers = out.split(/\nName:/).slice(1);
  return answers.flatMap((a) => [...a.matchAll(/Address: ([\d.]+)/g)].map((m) => m[1]!));
}

/** What the C library's resolver finds for `name` in `ns`, through its /etc/resolv.conf; [] when nothing. */
export async function getaddrinfo(ns: string, name: string): Promise<string[]> {
  const out = await run('ip', ['netns', 'exec', ns, 'timeout', '10', 'getent', 'ahostsv4', name]).then(
    (r) => r.stdout,
    () => '',
  );
  return [...new Set(out.split('\n').flatMap((l) => l.split(/\s+/)[0] || []))];
}

interface Tool {
  child: ChildProcess;
  /** Every line it printed after `ready`, as they come. */
  lines: AsyncIterator<string>;
  stop(): void;
}

/** test/harness/dns-tool.mjs in `ns`, once it says it is ready. */
async function startTool(ns: string, args: string[]): Promise<Tool> {
  const script = path.join(import.meta.dirname, 'dns-tool.mjs');
  const child = spawn('ip', ['netns', 'exec', ns, process.execPath, script, ...args], {
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  const lines = createInterface({ input: child.stdout! })[Symbol.asyncIterator]();
  const first = await lines.next();
  if (first.value !== 'ready') throw new Error(`dns-tool ${args[0]} in ${ns} did not start`);
  return { child, lines, stop: () => child.kill('SIGKILL') };
}

export interface Upstream {
  /** The questions it was asked, `<name> <type>`. */
  queries: string[];
  stop(): void;
}

/** A resolver in `ns` on `listen`:53 answering every A question with `answer`. */
export async function startUpstream(ns: string, listen: string, answer: string): Promise<Upstream> {
  const tool = await startTool(ns, ['serve', listen, answer]);
  const queries: string[] = [];
  void (async () => {
    for (let l = await tool.lines.next(); !l.done; l = await tool.lines.next()) queries.push(l.value);
  })();
  return { queries, stop: tool.stop };
}

export type Answer = { name: string; rcode: number; answers: string[] } | { name: string; error: string };

export interface Asker {
  /** One A question to `server`, sent at once from the namespace (no retry, no search domain). */
  ask(name: string, server: string): Promise<Answer>;
  stop(): void;
}

/** A DNS client that stays up in `ns`, so that a question leaves without a process start first. */
export async function startAsker(ns: string): Promise<Asker> {
  const tool = await startTool(ns, ['ask']);
  let queue = Promise.resolve();
  const ask = (name: string, server: string) => {
    const answer = queue.then(async () => {
      tool.child.stdin!.write(`${name} ${server}\n`);
      const line = await tool.lines.next();
      if (line.done) throw new Error('dns-tool ask ended');
      return JSON.parse(line.value) as Answer;
    });
    queue = answer.then(
      () => undefined,
      () => undefined,
    );
    return answer;
  };
  return { ask, stop: tool.stop };
}
