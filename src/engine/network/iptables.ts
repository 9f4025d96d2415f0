// Running iptables-save and iptables-restore. Every change berth makes is one
// iptables-restore (a table's rules are replaced in one transaction, and one
// process start is the main cost), so this is all the firewall runs.
//
// The tools are started with spawnDetached (posix_spawn: no copy of berthd's
// page tables, as a fork would make) and always with -w, so that on a host
// using the legacy backend a concurrent iptables waits for the xtables lock
// instead of failing. A network namespace (tests) is entered with nsenter.
import { existsSync } from 'node:fs';
import path from 'node:path';
import { systemError, unavailable } from '../../errors.js';
import { spawnDetached } from '../os/spawn.js';

export interface Iptables {
  /** iptables-save's text of every table. */
  save(): Promise<string>;
  /** Feeds `text` to iptables-restore --noflush: only the chains it declares are replaced. */
  restore(text: string): Promise<void>;
}

const SYSTEM_DIRS = ['/usr/sbin', '/sbin', '/usr/bin', '/bin'];

const found = new Map<string, string>();

/** The absolute path of a tool (posix_spawn does not search PATH), looked up once. */
function findTool(name: string): string {
  const known = found.get(name);
  if (known) return known;
  const dirs = [...(process.env.PATH ?? '').split(':').filter((d) => d.startsWith('/')), ...SYSTEM_DIRS];
  const file = dirs.map((d) => path.join(d, name)).find((p) => existsSync(p));
  if (!file) throw unavailable(`${name} not found (looked in ${[...new Set(dirs)].join(', ')})`);
  found.set(name, file);
  return file;
}

interface Result {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs a command to its end with `input` on its stdin, collecting what it prints. */
async function run(file: string, args: string[], input: string): Promise<Result> {
  const child = spawnDetached(file, args, {
    cwd: '/',
    env: { PATH: SYSTEM_DIRS.join(':') },
    pipes: [
      { fd: 0, direction: 'to-child' },
      { fd: 1, direction: 'from-child' },
      { fd: 2, direction: 'from-child' },
    ],
  });
  const collect = (fd: number) =>
    new Promise<string>((resolve) => {
      const chunks: Buffer[] = [];
      const sock = child.pipes.get(fd)!;
      sock.on('data', (c: Buffer) => chunks.push(c));
      sock.on('close', () => resolve(Buffer.concat(chunks).toString('utf8')));
    });
  const stdin = child.pipes.get(0)!;
  stdin.end(input);
  const [stdout, stderr, exit] = await Promise.all([collect(1), collect(2), child.exited]);
  return { code: exit.code, stdout, stderr };
}

/**
 * The runner for the host, or for the named network namespace (a name under
 * /run/netns, or a path); family 6 runs ip6tables-save and ip6tables-restore.
 */
export function iptables(netns?: string, family: 4 | 6 = 4): Iptables {
  const prog = family === 6 ? 'ip6tables' : 'iptables';
  const wrap = (tool: string, args: string[]): [string, string[]] => {
    const file = findTool(tool);
    if (!netns) return [file, args];
    const nsPath = netns.includes('/') ? netns : `/run/netns/${netns}`;
    return [findTool('nsenter'), [`--net=${nsPath}`, '--', file, ...args]];
  };
  const exec = async (tool: string, args: string[], input = ''): Promise<string> => {
    const [file, argv] = wrap(tool, args);
    const r = await run(file, argv, input);
    if (r.code !== 0) {
      throw systemError(`${tool} failed (exit ${r.code}): ${r.stderr.trim() || r.stdout.trim()}`);
    }
    return r.stdout;
  };
  return {
    save: () => exec(`${prog}-save`, []),
    restore: async (text) => {
      await exec(`${prog}-restore`, ['-w', '--noflush'], text);
    },
  };
}
