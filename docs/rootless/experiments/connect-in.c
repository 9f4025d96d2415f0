// Build: gcc -O2 -pthread -o connect-in connect-in.c. Run as the user, joined to the holder's
// user+mount namespaces (nsenter --user --mount --preserve-credentials -t HOLDER), with a
// tcpbench.py server on PORT inside the holder's network namespace:  ./connect-in /proc/HOLDER/ns/net PORT
// From a process in the holder's user namespace but the host's network namespace (berthd's place):
// a thread joins the holder's network namespace, connects there, and the main thread uses the fd.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <errno.h>
#include <unistd.h>
#include <stdlib.h>
static const char *ns; static int port, out = -1, err;
static void *dial(void *x) {
  int nsfd = open(ns, O_RDONLY | O_CLOEXEC);
  if (nsfd < 0 || setns(nsfd, CLONE_NEWNET) != 0) { err = errno; return 0; }
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  if (connect(s, (struct sockaddr *)&a, sizeof a) != 0) { err = errno; return 0; }
  out = s; return 0;
}
int main(int argc, char **argv) {
  ns = argv[1]; port = atoi(argv[2]);
  pthread_t t; pthread_create(&t, 0, dial, 0); pthread_join(t, 0);
  if (out < 0) { printf("dial in %s: %s\n", ns, strerror(err)); return 1; }
  char self[64], b[16] = {0}; ssize_t n = readlink("/proc/self/ns/net", self, 63); self[n > 0 ? n : 0] = 0;
  write(out, "?\n", 2); read(out, b, 15);
  printf("main thread (netns %s) got through the fd: %s", self, b);
  return 0;
}
