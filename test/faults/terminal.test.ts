// berthd started by hand in a terminal: its log is pino-pretty's, written in its
// own process (a pino transport would run a worker thread from pino's files,
// which the single-file bundle does not have: berthd ended at once with status
// 70, saying nothing). util-linux's `script` gives it a terminal.
import { spawn } from 'node:child_process';
import { expect, it } from 'vitest';
import { BERTHD, hermeticArgs, request, waitFor } from '../harness/daemon.js';
import { scratchDir } from '../harness/tmp.js';

it('serves with its log on a terminal, in the readable form, and stops on SIGTERM', async () => {
  const { socket, args } = hermeticArgs(scratchDir('berth-tty-'));
  const cmd = [process.execPath, BERTHD, ...args, '--log-level', 'info'].join(' ');
  // `exec`: the terminal's process is berthd itself, which the SIGTERM below reaches.
  const term = spawn('script', ['-qec', `exec ${cmd}`, '/dev/null'], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  term.stdout.on('data', (c: Buffer) => {
    out += c.toString();
  });
  const exited = new Promise<number | null>((resolve) => term.once('exit', (code) => resolve(code)));
  try {
    await waitFor(
      async () =>
        term.exitCode === null && (await request(socket, 'GET', '/_ping').catch(() => undefined))?.text === 'OK',
      `berthd on a terminal to answer (it printed: ${out})`,
    );
    await waitFor(() => out.includes('berthd is serving'), 'its log line');
    // pino-pretty's lines (a time, the level's name), not JSON.
    // biome-ignore lint/suspicious/noControlCharactersInRegex: the terminal's colour codes
    const plain = out.replace(/\x1b\[[0-9;]*m/g, '');
    expect(plain).toMatch(/\[\d\d:\d\d:\d\d\.\d{3}\] INFO \(\d+\): berthd is serving/);
    expect(out).not.toContain('"msg":');
  } finally {
    const pid = Number(/\((\d+)\): /.exec(out)?.[1]);
    if (pid) process.kill(pid, 'SIGTERM');
    else term.kill('SIGKILL');
  }
  expect(await exited).toBe(0);
});
