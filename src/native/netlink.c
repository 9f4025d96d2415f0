// rtnetlink: a NETLINK_ROUTE socket in a chosen network namespace, and one
// request answered synchronously. Only the socket lives here; messages are
// encoded and decoded in TypeScript (src/engine/os/netlink.ts).
//
// A netlink socket belongs to the namespace of the thread that created it,
// for its whole life. So a socket for another namespace is made on a
// short-lived thread that first joins that namespace with setns: the main
// thread never changes namespace, and the socket, once made, is used from it.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/netlink.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "addon.h"
#include "args.h"

// rtnetlink answers in microseconds; this only stops a lost answer hanging berthd.
#define NL_TIMEOUT_SEC 5
// A dump's messages come in datagrams of at most 32 KiB; a larger buffer never truncates.
#define NL_RECV_BUF 65536

typedef struct {
  int ns_fd;        // -1: the caller's own namespace
  int fd;           // the socket, or -1
  int err;          // errno of the failed step
  const char *step; // which step failed
} nl_open_t;

static int nl_fail(nl_open_t *o, const char *step) {
  o->err = errno;
  o->step = step;
  if (o->fd >= 0) close(o->fd);
  o->fd = -1;
  return -1;
}

// The socket, made in the current thread's namespace: close-on-exec, with a
// receive and send timeout, extended acks (the kernel's reason travels with an
// error) and capped acks (an error does not echo the whole request back).
static int nl_socket(nl_open_t *o) {
  o->fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
  if (o->fd < 0) return nl_fail(o, "socket");
  struct timeval tv = {.tv_sec = NL_TIMEOUT_SEC, .tv_usec = 0};
  int one = 1;
  if (setsockopt(o->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) != 0 ||
      setsockopt(o->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) != 0)
    return nl_fail(o, "setsockopt");
  // Both are optional (older kernels lack them): errors then carry no reason.
  setsockopt(o->fd, SOL_NETLINK, NETLINK_EXT_ACK, &one, sizeof one);
  setsockopt(o->fd, SOL_NETLINK, NETLINK_CAP_ACK, &one, sizeof one);
  struct sockaddr_nl addr = {.nl_family = AF_NETLINK};
  if (bind(o->fd, (struct sockaddr *)&addr, sizeof addr) != 0) return nl_fail(o, "bind");
  return 0;
}

static void *nl_open_in_ns(void *arg) {
  nl_open_t *o = arg;
  if (setns(o->ns_fd, CLONE_NEWNET) != 0) nl_fail(o, "setns");
  else nl_socket(o);
  return NULL;
}

// netlinkOpen(nsPath: string | null): a NETLINK_ROUTE socket's fd, in the
// namespace the file at nsPath names (/proc/<pid>/ns/net, a bind-mounted ns
// file), or in berthd's own for null.
BINDING(js_netlink_open) {
  ARGS(a, 1);
  const char *ns_path = args_string(&a, 0);
  nl_open_t o = {.ns_fd = -1, .fd = -1, .err = 0, .step = NULL};
  if (!ns_path) {
    nl_socket(&o);
  } else {
    o.ns_fd = open(ns_path, O_RDONLY | O_CLOEXEC);
    if (o.ns_fd < 0) return args_done(&a, throw_errno(env, "open", ns_path, errno));
    pthread_t t;
    int e = pthread_create(&t, NULL, nl_open_in_ns, &o);
    if (e == 0) pthread_join(t, NULL);
    else o.err = e, o.step = "pthread_create";
    close(o.ns_fd);
  }
  if (o.fd < 0) return args_done(&a, throw_errno(env, o.step, ns_path, o.err));
  return args_done(&a, js_int32(env, o.fd));
}

// The kernel's reason in an error's extended-ack attributes, or NULL.
static const char *nl_ack_reason(const struct nlmsghdr *h) {
  if (!(h->nlmsg_flags & NLM_F_ACK_TLVS)) return NULL;
  // With NETLINK_CAP_ACK the echoed request is its header alone.
  size_t off = NLMSG_HDRLEN + sizeof(struct nlmsgerr);
  const char *base = (const char *)h;
  while (off + NLA_HDRLEN <= h->nlmsg_len) {
    const struct nlattr *at = (const struct nlattr *)(base + off);
    if (at->nla_len < NLA_HDRLEN || off + at->nla_len > h->nlmsg_len) break;
    const char *s = base + off + NLA_HDRLEN;
    size_t n = at->nla_len - NLA_HDRLEN;
    if ((at->nla_type & NLA_TYPE_MASK) == NLMSGERR_ATTR_MSG && n > 0 && s[n - 1] == '\0') return s;
    off += NLA_ALIGN(at->nla_len);
  }
  return NULL;
}

// An errno error as args.c shapes them (code, errno), its message the
// system's text and the kernel's reason: "File exists", "Invalid argument:
// Unknown device type". The reason is also `detail`.
static napi_value nl_throw(napi_env env, int e, const char *reason) {
  char msg[512];
  snprintf(msg, sizeof msg, "%s%s%s", strerror(e), reason ? ": " : "", reason ? reason : "");
  napi_value code, message, err;
  napi_create_string_utf8(env, errno_code(e), NAPI_AUTO_LENGTH, &code);
  napi_create_string_utf8(env, msg, NAPI_AUTO_LENGTH, &message);
  napi_create_error(env, code, message, &err);
  napi_set_named_property(env, err, "errno", js_int32(env, -e));
  if (reason) {
    napi_value detail;
    napi_create_string_utf8(env, reason, NAPI_AUTO_LENGTH, &detail);
    napi_set_named_property(env, err, "detail", detail);
  }
  napi_throw(env, err);
  return NULL;
}

typedef struct {
  napi_env env;
  napi_value replies;
  uint32_t count;
  uint32_t seq;
  bool dump;
  bool interrupted;
  int error;              // from an NLMSG_ERROR or a dump's NLMSG_DONE
  char reason[256];
} nl_reply_t;

// Takes one reply datagram's messages; true once the request is answered.
static bool nl_take(nl_reply_t *r, const char *buf, size_t len) {
  for (const struct nlmsghdr *h = (const struct nlmsghdr *)buf; NLMSG_OK(h, len); h = NLMSG_NEXT(h, len)) {
    if (h->nlmsg_seq != r->seq) continue; // a late answer to an earlier, timed-out request
    if (h->nlmsg_flags & NLM_F_DUMP_INTR) r->interrupted = true;
    if (h->nlmsg_type == NLMSG_ERROR) {
      const struct nlmsgerr *e = NLMSG_DATA(h);
      if (h->nlmsg_len < NLMSG_LENGTH(sizeof *e)) r->error = EBADMSG;
      else if (e->error != 0) r->error = -e->error;
      const char *why = r->error ? nl_ack_reason(h) : NULL;
      if (why) snprintf(r->reason, sizeof r->reason, "%s", why);
      return true;
    }
    if (h->nlmsg_type == NLMSG_DONE) {
      if (h->nlmsg_len >= NLMSG_LENGTH(sizeof(int))) r->error = -*(const int *)NLMSG_DATA(h);
      return true;
    }
    if (h->nlmsg_type == NLMSG_NOOP || h->nlmsg_type == NLMSG_OVERRUN) continue;
    napi_value b;
    void *dst;
    napi_create_buffer_copy(r->env, h->nlmsg_len, h, &dst, &b);
    napi_set_element(r->env, r->replies, r->count++, b); // an answer; the ack or DONE follows
  }
  return false;
}

// netlinkRequest(fd, message: Buffer): Buffer[]. Sends one request (its
// nlmsg_seq is set here; NLM_F_ACK is added unless it is a dump) and returns
// the reply messages, headers included, without the closing ack or DONE. An
// NLMSG_ERROR with an error throws it as an errno error; so does a dump the
// kernel marked interrupted (EINTR: ask again), and a silent kernel (ETIMEDOUT).
BINDING(js_netlink_request) {
  ARGS(a, 2);
  int fd = args_int32(&a, 0);
  void *data;
  size_t len;
  if (!args_buffer(&a, 1, &data, &len)) return args_done(&a, NULL);
  struct nlmsghdr *req = data;
  if (len < NLMSG_HDRLEN || req->nlmsg_len != len) return args_done(&a, throw_errno(env, "netlink", NULL, EINVAL));
  static uint32_t next_seq;
  nl_reply_t r = {.env = env, .count = 0, .error = 0, .interrupted = false, .reason = ""};
  r.seq = __atomic_add_fetch(&next_seq, 1, __ATOMIC_RELAXED);
  r.dump = (req->nlmsg_flags & NLM_F_DUMP) == NLM_F_DUMP;
  req->nlmsg_seq = r.seq;
  req->nlmsg_pid = 0;
  req->nlmsg_flags |= NLM_F_REQUEST | (r.dump ? 0 : NLM_F_ACK);
  napi_create_array(env, &r.replies);

  ssize_t n;
  do n = send(fd, data, len, 0);
  while (n < 0 && errno == EINTR);
  if (n < 0) return args_done(&a, throw_errno(env, "send", NULL, errno == EAGAIN ? ETIMEDOUT : errno));
  char *buf = malloc(NL_RECV_BUF);
  if (!buf) return args_done(&a, throw_errno(env, "malloc", NULL, ENOMEM));
  bool answered = false;
  int recv_err = 0;
  while (!answered) {
    do n = recv(fd, buf, NL_RECV_BUF, MSG_TRUNC);
    while (n < 0 && errno == EINTR);
    if (n < 0) recv_err = errno == EAGAIN || errno == EWOULDBLOCK ? ETIMEDOUT : errno;
    else if (n > NL_RECV_BUF) recv_err = EMSGSIZE;
    if (recv_err) break;
    answered = nl_take(&r, buf, (size_t)n);
  }
  free(buf);
  if (recv_err) return args_done(&a, throw_errno(env, "recv", NULL, recv_err));
  if (r.error) return args_done(&a, nl_throw(env, r.error, r.reason[0] ? r.reason : NULL));
  if (r.interrupted) return args_done(&a, nl_throw(env, EINTR, "dump interrupted by a change"));
  return args_done(&a, r.replies);
}
