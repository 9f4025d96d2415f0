// Processes: spawning a detached child reaped through a pidfd on the loop, the
// pipes and sealed executables handed to it, and what the kernel can run.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uv.h>

#include "addon.h"
#include "args.h"

typedef struct {
  uv_poll_t poll;
  int pidfd;
  pid_t pid;
  callback_t on_exit;
} child_t;

static void child_on_close(uv_handle_t *handle) {
  child_t *c = handle->data;
  close(c->pidfd);
  callback_release(&c->on_exit);
  free(c);
}

static void child_poll_cb(uv_poll_t *handle, int status, int events) {
  (void)status;
  (void)events;
  child_t *c = handle->data;
  int st = 0;
  pid_t r;
  do r = waitpid(c->pid, &st, WNOHANG);
  while (r < 0 && errno == EINTR);
  if (r == 0) return; // not yet
  uv_poll_stop(handle);
  napi_env env = c->on_exit.env;
  napi_handle_scope scope;
  napi_open_handle_scope(env, &scope);
  napi_value argv[2] = {js_null(env), js_null(env)};
  if (r == c->pid && WIFEXITED(st)) argv[0] = js_int32(env, WEXITSTATUS(st));
  if (r == c->pid && WIFSIGNALED(st)) argv[1] = js_int32(env, WTERMSIG(st));
  callback_call(&c->on_exit, 2, argv);
  napi_close_handle_scope(env, scope);
  uv_close((uv_handle_t *)handle, child_on_close);
}

// What the child of spawn_child runs with, and where it leaves the errno of a step that failed.
typedef struct {
  const char *file, *cwd;
  char **argv, **envp;
  const int *moved;
  uint32_t nfds;
  int err;
} spawn_args_t;

// The child, until it execs: it shares berthd's memory (CLONE_VM) while berthd's
// thread waits (CLONE_VFORK), so it makes system calls only, on its own stack, and
// has every signal blocked until their handlers (berthd's) are reset to the default.
static int child_main(void *arg) {
  spawn_args_t *a = arg;
  struct sigaction dfl = {.sa_handler = SIG_DFL};
  for (int sig = 1; sig < NSIG; sig++) sigaction(sig, &dfl, NULL); // SIGKILL, SIGSTOP and glibc's own refuse: no matter
  if (setsid() < 0) goto fail;
  for (uint32_t i = 0; i < a->nfds; i++) {
    // The sources are numbered 64 and up, above every target.
    int src = a->moved[i] >= 0 ? a->moved[i] : open("/dev/null", O_RDWR);
    if (src < 0) goto fail;
    if (src != (int)i && dup2(src, (int)i) < 0) goto fail;
    if (a->moved[i] < 0 && src != (int)i) close(src);
  }
  if (chdir(a->cwd) < 0) goto fail;
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  execve(a->file, a->argv, a->envp);
fail:
  a->err = errno;
  _exit(127);
}

// Spawns file with fds[i] (moved[i], -1: /dev/null) as the child's fd i, in a
// session of its own, in cwd, with default signal dispositions and none blocked:
// what posix_spawn does, with the same clone (CLONE_VM | CLONE_VFORK: no copy of
// berthd's page tables), but on a stack in this frame where glibc maps one and
// unmaps it after each spawn. That unmap, in a process with threads on other
// CPUs, is a TLB shootdown (interrupts to every one of them, waited for): most
// of a spawn's cost to berthd, paid at every exec (a health check every second).
static int spawn_child(pid_t *pid, const char *file, char **argv, char **envp, const char *cwd, const int *moved,
                       uint32_t nfds) {
  static const size_t stack_size = 64 * 1024;
  char stack[64 * 1024] __attribute__((aligned(16)));
  spawn_args_t a = {.file = file, .cwd = cwd, .argv = argv, .envp = envp, .moved = moved, .nfds = nfds, .err = 0};
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pid_t child = clone(child_main, stack + stack_size, CLONE_VM | CLONE_VFORK | SIGCHLD, &a);
  int err = child < 0 ? errno : 0;
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (err) return err;
  if (a.err) {
    // It failed before its exec and has exited: reaped here, no one else knows of it.
    waitpid(child, NULL, 0);
    return a.err;
  }
  *pid = child;
  return 0;
}

// Watches the child's pidfd on the loop; on_exit(code, signal) once it ends.
static napi_value watch_child(napi_env env, pid_t pid, napi_value on_exit, const char *file) {
  int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
  child_t *c = pidfd >= 0 ? calloc(1, sizeof *c) : NULL;
  uv_loop_t *loop = NULL;
  if (!c || napi_get_uv_event_loop(env, &loop) != napi_ok || uv_poll_init(loop, &c->poll, pidfd) != 0) {
    int e = pidfd < 0 ? errno : ENOMEM;
    if (pidfd >= 0) close(pidfd);
    free(c);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return throw_errno(env, "pidfd_open", file, e);
  }
  c->pidfd = pidfd;
  c->pid = pid;
  c->poll.data = c;
  callback_init(&c->on_exit, env, on_exit, "berth.child");
  uv_poll_start(&c->poll, UV_READABLE, child_poll_cb);
  return js_int32(env, pid);
}

// spawnDetached(file, argv, envp, cwd, fds, onExit) -> pid. The child runs in
// a session of its own, in cwd, with fds[i] as its fd i (-1: /dev/null), with
// default signal dispositions and no blocked signals. spawn_child clones
// without copying berthd's page tables (fork copies them, which grows with
// berthd's memory). onExit(code, signal) comes once the child ends: berthd
// reaps it through a pidfd watched on the loop (libuv waits only for the
// children it spawned).
BINDING(js_spawn_detached) {
  ARGS(a, 6);
  const char *file = args_string(&a, 0), *cwd = args_string(&a, 3);
  char **argv = args_strings(&a, 1), **envp = args_strings(&a, 2);
  uint32_t nfds = 0;
  napi_get_array_length(env, a.argv[4], &nfds);
  napi_value out = NULL;
  if (!file || !argv || !envp || !cwd || nfds > 64) {
    napi_throw_type_error(env, NULL, "spawnDetached: bad arguments");
  } else {
    // Sources above every target first, so that no dup2 overwrites a source still to be used.
    int moved[64];
    for (uint32_t i = 0; i < nfds; i++) {
      napi_value v;
      int32_t fd = -1;
      napi_get_element(env, a.argv[4], i, &v);
      napi_get_value_int32(env, v, &fd);
      moved[i] = fd >= 0 ? fcntl(fd, F_DUPFD_CLOEXEC, 64) : -1;
    }
    pid_t pid = 0;
    int err = spawn_child(&pid, file, argv, envp, cwd, moved, nfds);
    for (uint32_t i = 0; i < nfds; i++)
      if (moved[i] >= 0) close(moved[i]);
    out = err != 0 ? throw_errno(env, "spawn", file, err) : watch_child(env, pid, a.argv[5], file);
  }
  free_strings(argv);
  free_strings(envp);
  return args_done(&a, out);
}

// pipe(nonBlockingRead) -> [readFd, writeFd], both close-on-exec; the read end
// non-blocking when asked (read only once the writer is done with it, and
// perhaps still held open by it: a read then finds what is there, never waits).
BINDING(js_pipe) {
  ARGS(a, 1);
  bool nonblocking_read = args_bool(&a, 0);
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return throw_errno(env, "pipe2", NULL, errno);
  if (nonblocking_read && fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) | O_NONBLOCK) != 0) {
    int e = errno;
    close(fds[0]);
    close(fds[1]);
    return throw_errno(env, "fcntl", NULL, e);
  }
  return args_done(&a, js_fd_pair(env, fds));
}

// Copies path's bytes into a new sealed memfd; the fd, or -1 with *failed and *e set.
static int sealed_copy(const char *path, const char **failed, int *e) {
  int out = -1, in = open(path, O_RDONLY | O_CLOEXEC);
  struct stat st;
  *failed = "open";
  if (in < 0) goto fail;
  *failed = "fstat";
  if (fstat(in, &st) != 0) goto fail;
  *failed = "memfd_create";
  out = memfd_create("runc_cloned:/proc/self/exe", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (out < 0) goto fail;
  *failed = "sendfile";
  for (off_t sent = 0; sent < st.st_size;) {
    ssize_t n = sendfile(out, in, NULL, st.st_size - sent);
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) errno = EIO;
    if (n <= 0) goto fail;
    sent += n;
  }
  *failed = "fcntl";
  if (fcntl(out, F_ADD_SEALS, F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE) != 0) goto fail;
  close(in);
  return out;
fail:
  *e = errno;
  if (in >= 0) close(in);
  if (out >= 0) close(out);
  return -1;
}

// sealedCopy(path) -> fd: the file's bytes in a memfd sealed against any
// change (write, grow, shrink, further seals), close-on-exec. runc treats an
// executable that is such a memfd as its own safe copy (runc 1.1's
// cloned_binary.c: F_GET_SEALS == SEAL|SHRINK|GROW|WRITE) and skips making one.
BINDING(js_sealed_copy) {
  ARGS(a, 1);
  const char *path = args_path(&a, 0);
  if (!path) return args_done(&a, NULL);
  const char *failed = NULL;
  int e = 0, fd = sealed_copy(path, &failed, &e);
  return args_done(&a, fd < 0 ? throw_errno(env, failed, path, e) : js_int32(env, fd));
}

// x32Abi() -> whether this kernel runs x32 system calls (CONFIG_X86_X32_ABI,
// not disabled at boot); false off x86-64. The call is made by a child that
// shares our memory and blocks us until it exits (what posix_spawn does), so
// that a seccomp filter around berthd that kills x32 calls kills only it.
#if defined(__x86_64__)
static int x32_getpid(void *arg) {
  (void)arg;
  return syscall(0x40000000L | SYS_getpid) > 0 ? 0 : 1;
}
#endif

BINDING(js_x32_abi) {
  (void)info;
  bool runs = false;
#if defined(__x86_64__)
  size_t size = 64 * 1024;
  char *stack = malloc(size);
  if (!stack) return throw_errno(env, "malloc", NULL, ENOMEM);
  pid_t pid = clone(x32_getpid, stack + size, CLONE_VM | CLONE_VFORK | SIGCHLD, NULL);
  int status = 0;
  if (pid > 0) {
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    runs = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  free(stack);
#endif
  return js_bool(env, runs);
}

// The start time (clock ticks after boot, /proc/<pid>/stat's field 22) of pid; -1 when unreadable.
static long long start_ticks(pid_t pid) {
  char file[32], buf[1024];
  snprintf(file, sizeof file, "/proc/%d/stat", (int)pid);
  int fd = open(file, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = 0;
  // Fields after the command (which may hold spaces and parentheses) follow the last ')'.
  char *p = strrchr(buf, ')');
  if (!p) return -1;
  p += 2; // state is field 3; the start time is 19 fields after it
  if (*p == 'Z') return -1; // a zombie runs nothing
  for (int field = 3; field < 22 && p; field++) {
    p = strchr(p, ' ');
    if (p) p++;
  }
  return p ? strtoll(p, NULL, 10) : -1;
}

// signalProcess(pid, startTicks, signal): signals pid only if it is the process
// that started at startTicks, with no window for the pid to be reused between
// the check and the signal: the pidfd holds the process the check read. false
// when that process is gone (or is a zombie).
BINDING(js_signal_process) {
  ARGS(a, 3);
  pid_t pid = args_int32(&a, 0);
  long long start = args_int64(&a, 1);
  int sig = args_int32(&a, 2);
  int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
  if (pidfd < 0) {
    int e = errno;
    return args_done(&a, e == ESRCH ? js_bool(env, false) : throw_errno(env, "pidfd_open", NULL, e));
  }
  bool sent = false;
  int e = 0;
  if (start_ticks(pid) == start) {
    if (syscall(SYS_pidfd_send_signal, pidfd, sig, NULL, 0) == 0) sent = true;
    else if (errno != ESRCH) e = errno;
  }
  close(pidfd);
  return args_done(&a, e ? throw_errno(env, "pidfd_send_signal", NULL, e) : js_bool(env, sent));
}
