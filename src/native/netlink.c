// rtnetlink: a NETLINK_ROUTE socket in a chosen network namespace, and one
// request answered on a thread of its own. Only the socket lives here;
// messages are encoded and decoded in TypeScript (src/engine/os/netlink.ts).
//
// A netlink socket belongs to the namespace of the thread that created it,
// for its whole life. So a socket for another namespace is made on a
// short-lived thread that first joins that namespace with setns: the main
// thread never changes namespace, and the socket, once made, is used from any.
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

typedef struct {
  int ns_fd;
  const char *path;
  int fd;
  int err;
} ns_file_t;

static void *ns_file_open(void *arg) {
  ns_file_t *o = arg;
  if (setns(o->ns_fd, CLONE_NEWNET) != 0) o->err = errno;
  else if ((o->fd = open(o->path, O_WRONLY | O_CLOEXEC)) < 0) o->err = errno;
  return NULL;
}

// netnsOpenWrite(nsPath, path): a write-only fd of a file opened by a thread
// inside that network namespace. /proc/sys/net/... names the opener's
// namespace's settings, and the open file keeps them: a container
// interface's sysctls are written through it from berthd's own thread.
BINDING(js_netns_open_write) {
  ARGS(a, 2);
  const char *ns_path = args_string(&a, 0);
  const char *path = args_string(&a, 1);
  if (!ns_path || !path) return args_done(&a, throw_errno(env, "open", path, EINVAL));
  ns_file_t o = {.ns_fd = open(ns_path, O_RDONLY | O_CLOEXEC), .path = path, .fd = -1, .err = 0};
  if (o.ns_fd < 0) return args_done(&a, throw_errno(env, "open", ns_path, errno));
  pthread_t t;
  int e = pthread_create(&t, NULL, ns_file_open, &o);
  if (e == 0) pthread_join(t, NULL);
  else o.err = e;
  close(o.ns_fd);
  if (o.fd < 0) return args_done(&a, throw_errno(env, "open", path, o.err));
  return args_done(&a, js_int32(env, o.fd));
}

// The kernel's reason in an error's extended-ack attributes, or NULL.
static const char *nl_ack_reason(const struct nlmsghdr *h) {
  if (!(h->nlmsg_flags & NLM_F_ACK_TLVS)) return NULL;
  // The attributes follow the echoed request: its header alone when capped (NETLINK_CAP_ACK).
  const struct nlmsgerr *e = NLMSG_DATA(h);
  size_t off = NLMSG_HDRLEN + sizeof *e;
  if (!(h->nlmsg_flags & NLM_F_CAPPED)) off += NLMSG_ALIGN(e->msg.nlmsg_len - NLMSG_HDRLEN);
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

// One request and its answer, done on a thread of its own (netlinkRequest).
typedef struct {
  int fd;
  char *req;
  size_t req_len;
  uint32_t seq;
  bool dump;
  // The answer: the reply messages, concatenated, or what went wrong.
  char *out;
  size_t out_len, out_cap;
  int sys_err;          // a failed send or recv (its errno), named by `step`
  const char *step;
  int nl_err;           // the kernel's: an NLMSG_ERROR's, or a dump's NLMSG_DONE's
  bool interrupted;     // a dump the kernel marked NLM_F_DUMP_INTR
  char reason[256];     // the kernel's extended-ack message, if any
} nl_job_t;

static bool nl_keep(nl_job_t *j, const struct nlmsghdr *h) {
  if (j->out_len + h->nlmsg_len > j->out_cap) {
    size_t cap = j->out_cap ? j->out_cap * 2 : 4096;
    while (cap < j->out_len + h->nlmsg_len) cap *= 2;
    char *grown = realloc(j->out, cap);
    if (!grown) return false;
    j->out = grown;
    j->out_cap = cap;
  }
  memcpy(j->out + j->out_len, h, h->nlmsg_len);
  j->out_len += h->nlmsg_len;
  return true;
}

// Takes one reply datagram's messages; true once the request is answered.
static bool nl_take(nl_job_t *j, const char *buf, size_t len) {
  for (const struct nlmsghdr *h = (const struct nlmsghdr *)buf; NLMSG_OK(h, len); h = NLMSG_NEXT(h, len)) {
    if (h->nlmsg_seq != j->seq) continue; // a late answer to an earlier, timed-out request
    if (h->nlmsg_flags & NLM_F_DUMP_INTR) j->interrupted = true;
    if (h->nlmsg_type == NLMSG_ERROR) {
      const struct nlmsgerr *e = NLMSG_DATA(h);
      if (h->nlmsg_len < NLMSG_LENGTH(sizeof *e)) j->nl_err = EBADMSG;
      else if (e->error != 0) j->nl_err = -e->error;
      const char *why = j->nl_err ? nl_ack_reason(h) : NULL;
      if (why) snprintf(j->reason, sizeof j->reason, "%s", why);
      return true;
    }
    if (h->nlmsg_type == NLMSG_DONE) {
      if (h->nlmsg_len >= NLMSG_LENGTH(sizeof(int))) j->nl_err = -*(const int *)NLMSG_DATA(h);
      return true;
    }
    if (h->nlmsg_type == NLMSG_NOOP || h->nlmsg_type == NLMSG_OVERRUN) continue;
    if (!nl_keep(j, h)) { // an answer; the ack or DONE follows
      j->sys_err = ENOMEM, j->step = "malloc";
      return true;
    }
  }
  return false;
}

static void nl_exchange(void *data) {
  nl_job_t *j = data;
  ssize_t n;
  do n = send(j->fd, j->req, j->req_len, 0);
  while (n < 0 && errno == EINTR);
  if (n < 0) {
    j->sys_err = errno == EAGAIN ? ETIMEDOUT : errno, j->step = "send";
    return;
  }
  char *buf = malloc(NL_RECV_BUF);
  if (!buf) {
    j->sys_err = ENOMEM, j->step = "malloc";
    return;
  }
  for (bool answered = false; !answered;) {
    do n = recv(j->fd, buf, NL_RECV_BUF, MSG_TRUNC);
    while (n < 0 && errno == EINTR);
    if (n < 0 || n > NL_RECV_BUF) {
      j->sys_err = n > NL_RECV_BUF ? EMSGSIZE : errno == EAGAIN || errno == EWOULDBLOCK ? ETIMEDOUT : errno;
      j->step = "recv";
      break;
    }
    answered = nl_take(j, buf, (size_t)n);
  }
  free(buf);
}

// An errno error as args.c shapes them (code, errno), its message the
// system's text and the kernel's reason: "File exists", "Invalid argument:
// Unknown device type". The reason is also `detail`.
static napi_value nl_error(napi_env env, int e, const char *reason) {
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
  return err;
}

// The reply messages as an array of Buffers, one message each.
static napi_value nl_replies(napi_env env, nl_job_t *j) {
  napi_value out;
  napi_create_array(env, &out);
  uint32_t i = 0;
  for (size_t off = 0; off + NLMSG_HDRLEN <= j->out_len;) {
    const struct nlmsghdr *h = (const struct nlmsghdr *)(j->out + off);
    napi_value b;
    void *dst;
    napi_create_buffer_copy(env, h->nlmsg_len, h, &dst, &b);
    napi_set_element(env, out, i++, b);
    off += NLMSG_ALIGN(h->nlmsg_len);
  }
  return out;
}

static void nl_job_free(nl_job_t *j) {
  free(j->req);
  free(j->out);
  free(j);
}

static void nl_settle(napi_env env, napi_deferred deferred, void *data) {
  nl_job_t *j = data;
  if (env != NULL) {
    if (j->sys_err) napi_reject_deferred(env, deferred, errno_error(env, j->step, NULL, j->sys_err));
    else if (j->nl_err) napi_reject_deferred(env, deferred, nl_error(env, j->nl_err, j->reason[0] ? j->reason : NULL));
    else if (j->interrupted) napi_reject_deferred(env, deferred, nl_error(env, EINTR, "dump interrupted by a change"));
    else napi_resolve_deferred(env, deferred, nl_replies(env, j));
  }
  nl_job_free(j);
}

// netlinkRequest(fd, message: Buffer) -> Promise<Buffer[]>. Sends one request
// (its nlmsg_seq is set here; NLM_F_ACK is added unless it is a dump) and
// resolves with the reply messages, headers included, without the closing ack
// or DONE. An NLMSG_ERROR with an error rejects with it as an errno error; so
// does a dump the kernel marked interrupted (EINTR: ask again), and a silent
// kernel (ETIMEDOUT). On a thread of its own (promise_on_thread): every request
// takes the kernel's one rtnl lock, which a namespace being torn down (a
// container's exit) or a link being deleted holds for milliseconds, and that
// wait must stop neither the loop nor the libuv pool. One request at a time
// per socket: the caller queues them (os/netlink.ts).
BINDING(js_netlink_request) {
  ARGS(a, 2);
  void *data;
  size_t len;
  if (!args_buffer(&a, 1, &data, &len)) return args_done(&a, NULL);
  const struct nlmsghdr *msg = data;
  if (len < NLMSG_HDRLEN || msg->nlmsg_len != len) return args_done(&a, throw_errno(env, "netlink", NULL, EINVAL));
  nl_job_t *j = calloc(1, sizeof *j);
  char *req = malloc(len);
  if (!j || !req) {
    free(j);
    free(req);
    return args_done(&a, throw_errno(env, "netlink", NULL, ENOMEM));
  }
  static uint32_t next_seq;
  memcpy(req, data, len);
  struct nlmsghdr *h = (struct nlmsghdr *)req;
  j->fd = args_int32(&a, 0);
  j->req = req;
  j->req_len = len;
  j->seq = __atomic_add_fetch(&next_seq, 1, __ATOMIC_RELAXED);
  j->dump = (h->nlmsg_flags & NLM_F_DUMP) == NLM_F_DUMP;
  h->nlmsg_seq = j->seq;
  h->nlmsg_pid = 0;
  h->nlmsg_flags |= NLM_F_REQUEST | (j->dump ? 0 : NLM_F_ACK);
  args_done(&a, NULL);
  return promise_on_thread(env, "netlinkRequest", nl_exchange, nl_settle, j);
}
