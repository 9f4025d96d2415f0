// The built-in seccomp profile fails closed, seen from inside a container: a
// static probe (test/harness/syscall-probe.c) makes the calls busybox cannot,
// and each answer is checked against an unconfined container's, so that a
// refusal is known to come from the filter and not from the kernel.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Daemon } from '../harness/daemon.js';
import { useEnv, type Env } from '../harness/env.js';
import { buildSyscallProbe, type SyscallProbe } from '../harness/probe.js';
import { demux } from '../harness/streams.js';

const ctx = useEnv();
let env: Env;
let d: Daemon;
let probe: SyscallProbe;
beforeAll(async () => {
  ({ env, daemon: d } = ctx);
  probe = await buildSyscallProbe();
});
afterAll(async () => {
  await probe?.remove();
});

/** Runs the probe in a busybox container; resolves with each call's answer ("ok", "EPERM", ...). */
async function answers(calls: string[], hostConfig: Record<string, unknown> = {}): Promise<Record<string, string>> {
  const c = await d.request('POST', '/containers/create', {
    body: {
      Image: env.busybox,
      Cmd: ['/probe/syscall-probe', ...calls],
      HostConfig: { Binds: [`${probe.dir}:/probe:ro`], ...hostConfig },
    },
  });
  expect(c.status, c.text).toBe(201);
  const id = c.json.Id as string;
  expect((await d.request('POST', `/containers/${id}/start`)).status).toBe(204);
  const w = await d.request('POST', `/containers/${id}/wait`);
  const out = demux((await d.request('GET', `/containers/${id}/logs?stdout=1&stderr=1`)).body)
    .map(([, t]) => t)
    .join('');
  expect(w.json.StatusCode, out).toBe(0);
  await d.request('DELETE', `/containers/${id}`);
  return Object.fromEntries(
    out
      .trim()
      .split('\n')
      .map((l) => l.split(' ') as [string, string]),
  );
}

const unconfined = { SecurityOpt: ['seccomp=unconfined'] };
/** What the kernel answers when it runs a call and lets the caller make it. */
const ranByKernel = /^(ok|EINVAL|EAFNOSUPPORT)$/;

describe('the built-in seccomp profile', () => {
  it('keeps closed what a default container holds no capability for, and allows the harmless forms', async () => {
    const closed = [
      'keyctl',
      'bpf',
      'io_uring_setup',
      'userfaultfd',
      'kexec_load',
      'mount',
      'unshare_user',
      'clone_newuser',
      'personality_exec',
      'socket_vsock',
      'socket_alg',
    ];
    const open = ['getpid', 'clone', 'personality_query', 'socket_inet'];
    expect(await answers([...closed, ...open, 'clone3'])).toEqual({
      ...Object.fromEntries(closed.map((c) => [c, 'EPERM'])),
      ...Object.fromEntries(open.map((c) => [c, 'ok'])),
      clone3: 'ENOSYS', // so that libc falls back to clone, whose flags the filter sees
    });
    // Without the filter the kernel itself lets a default container make these.
    const kernel = await answers(
      ['keyctl', 'io_uring_setup', 'userfaultfd', 'unshare_user', 'clone_newuser', 'clone3', 'personality_exec'],
      unconfined,
    );
    expect(Object.entries(kernel).filter(([, a]) => a !== 'ok')).toEqual([]);
  });

  it('refuses a system call outside its allow-list, which a deny-list lets through', async () => {
    // migrate_pages: no engine's profile names it. pidfd_getfd: only with CAP_SYS_PTRACE.
    // file_getattr (Linux 6.17): newer than every name in the profile, so runc's stub answers ENOSYS.
    // socket_vsock_high: AF_VSOCK with a high bit set, which a "family > AF_VSOCK" rule would let by.
    const calls = ['migrate_pages', 'pidfd_getfd', 'file_getattr', 'socket_vsock_high'];
    const kernel = await answers(calls, unconfined);
    for (const c of calls)
      expect(kernel[c], `${c} without a filter (file_getattr needs Linux 6.17)`).toMatch(ranByKernel);
    expect(await answers(calls)).toEqual({
      migrate_pages: 'EPERM',
      pidfd_getfd: 'EPERM',
      file_getattr: 'ENOSYS',
      socket_vsock_high: 'EPERM',
    });
    // The capability that makes it legitimate opens it again, as in dockerd's profile.
    expect(await answers(['pidfd_getfd'], { CapAdd: ['SYS_PTRACE'] })).toEqual({ pidfd_getfd: 'ok' });
  });
});
