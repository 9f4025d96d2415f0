// syscall-probe: makes the system calls named on its command line, each in a
// harmless form, and prints one line per call: "<probe> ok" or "<probe> <ERRNO>"
// (EPERM, ENOSYS, ...). Built static by test/harness/probe.ts and bind-mounted
// into a busybox container, so that a test sees what the container's seccomp
// filter (and the kernel behind it) answers to calls busybox cannot make.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <linux/io_uring.h>
#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/personality.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef AF_VSOCK
#define AF_VSOCK 40
#endif
#ifndef AF_ALG
#define AF_ALG 38
#endif
// file_getattr(2), Linux 6.17: newer than any name in the built-in profile.
#ifndef SYS_file_getattr
#define SYS_file_getattr 468
#endif

/** A raw clone(2)/clone3(2) result: the child leaves at once, the parent reaps it. */
static long reap(long pid) {
  if (pid == 0) _exit(0);
  if (pid > 0) waitpid((pid_t)pid, NULL, __WALL);
  return pid;
}

static long probe(const char *name) {
  if (!strcmp(name, "getpid")) return syscall(SYS_getpid);
  if (!strcmp(name, "keyctl")) return syscall(SYS_keyctl, 0 /* KEYCTL_GET_KEYRING_ID */, -3 /* session */, 0);
  if (!strcmp(name, "bpf")) {
    union bpf_attr attr;
    memset(&attr, 0, sizeof attr);
    attr.map_type = BPF_MAP_TYPE_ARRAY;
    attr.key_size = 4;
    attr.value_size = 4;
    attr.max_entries = 1;
    return syscall(SYS_bpf, BPF_MAP_CREATE, &attr, sizeof attr);
  }
  if (!strcmp(name, "io_uring_setup")) {
    struct io_uring_params p;
    memset(&p, 0, sizeof p);
    return syscall(SYS_io_uring_setup, 1, &p);
  }
  if (!strcmp(name, "userfaultfd")) return syscall(SYS_userfaultfd, O_CLOEXEC | 1 /* UFFD_USER_MODE_ONLY */);
  if (!strcmp(name, "kexec_load")) return syscall(SYS_kexec_load, 0, 0, NULL, 0);
  if (!strcmp(name, "mount")) return mount("none", "/tmp", "tmpfs", 0, NULL);
  if (!strcmp(name, "unshare_user")) return unshare(CLONE_NEWUSER);
  if (!strcmp(name, "clone")) return reap(syscall(SYS_clone, SIGCHLD, 0, NULL, NULL, 0));
  if (!strcmp(name, "clone_newuser")) return reap(syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, NULL, NULL, 0));
  if (!strcmp(name, "clone3")) {
    struct clone_args args;
    memset(&args, 0, sizeof args);
    args.exit_signal = SIGCHLD;
    return reap(syscall(SYS_clone3, &args, sizeof args));
  }
  if (!strcmp(name, "migrate_pages")) {
    unsigned long node0 = 1; // from node 0 to node 0: nothing moves
    return syscall(SYS_migrate_pages, 0, 2, &node0, &node0);
  }
  if (!strcmp(name, "pidfd_getfd")) {
    long pidfd = syscall(SYS_pidfd_open, getpid(), 0);
    return pidfd < 0 ? pidfd : syscall(SYS_pidfd_getfd, pidfd, 1, 0);
  }
  if (!strcmp(name, "file_getattr")) {
    uint64_t attr[3];
    return syscall(SYS_file_getattr, AT_FDCWD, "/", attr, sizeof attr, 0);
  }
  if (!strcmp(name, "personality_query")) return syscall(SYS_personality, 0xffffffffUL);
  if (!strcmp(name, "personality_exec")) return syscall(SYS_personality, READ_IMPLIES_EXEC);
  if (!strcmp(name, "socket_inet")) return socket(AF_INET, SOCK_STREAM, 0);
  if (!strcmp(name, "socket_vsock")) return socket(AF_VSOCK, SOCK_STREAM, 0);
  // The kernel reads the family as an int: high bits do not change it.
  if (!strcmp(name, "socket_vsock_high")) return syscall(SYS_socket, (1UL << 32) | AF_VSOCK, SOCK_STREAM, 0);
  if (!strcmp(name, "socket_alg")) return socket(AF_ALG, SOCK_SEQPACKET, 0);
  errno = EINVAL;
  fprintf(stderr, "unknown probe %s\n", name);
  return -2;
}

int main(int argc, char **argv) {
  // Each probe in a child of its own: one that changes the process (a new
  // user namespace, a personality) must not change what the next one sees.
  for (int i = 1; i < argc; i++) {
    fflush(stdout);
    pid_t child = fork();
    if (child < 0) return 3;
    if (child == 0) {
      errno = 0;
      long r = probe(argv[i]);
      if (r == -2) _exit(2);
      printf("%s %s\n", argv[i], r >= 0 ? "ok" : strerrorname_np(errno));
      fflush(stdout);
      _exit(0);
    }
    int status;
    if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return 2;
  }
  return 0;
}
