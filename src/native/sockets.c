// Sockets: what the peer of a connected socket has not read or whether it has
// closed, and a SOCK_SEQPACKET unix client (conmon's attach socket; Node's net
// has only SOCK_STREAM).
#define _GNU_SOURCE
#include <errno.h>
#include <linux/sockios.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <uv.h>

#include "addon.h"
#include "args.h"

// unreadBytes(fd): what the peer of a connected socket has not read yet
// (SIOCOUTQ; for a unix socket, 0 once the peer has read all we sent).
BINDING(js_unread_bytes) {
  ARGS(a, 1);
  int n = 0;
  if (ioctl(args_int32(&a, 0), SIOCOUTQ, &n) != 0) return throw_errno(env, "ioctl", NULL, errno);
  return js_int32(env, n);
}

// setSendBuffer(fd, bytes): SO_SNDBUF, what the socket may hold unread by its
// peer (the kernel caps it at net.core.wmem_max, and doubles it).
BINDING(js_set_send_buffer) {
  ARGS(a, 2);
  int bytes = args_int32(&a, 1);
  if (setsockopt(args_int32(&a, 0), SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes) != 0)
    return throw_errno(env, "setsockopt", NULL, errno);
  return js_undefined(env);
}

// peerClosed(fd): whether the peer of a connected socket has closed it, not
// just shut its sending side down. A unix socket sees POLLHUP once the peer's
// end is released; after only shutdown(SHUT_WR) it sees POLLRDHUP alone.
BINDING(js_peer_closed) {
  ARGS(a, 1);
  struct pollfd p = {.fd = args_int32(&a, 0), .events = POLLRDHUP, .revents = 0};
  if (poll(&p, 1, 0) < 0) return throw_errno(env, "poll", NULL, errno);
  return js_bool(env, (p.revents & (POLLHUP | POLLERR | POLLNVAL)) != 0);
}

// The seqpacket client is driven by a uv_poll_t on Node's own loop: readiness
// wakes it, nothing polls. JS gets one callback, onEvent(type, value):
//   SP_DATA  (Buffer: one packet)   SP_END (peer shut down / closed)
//   SP_WRITABLE (after a write() that returned false)   SP_ERROR (errno name)
// Reading runs while enabled (setReading); a write is one packet, sent whole or
// not at all (false: wait for SP_WRITABLE). close() is idempotent; the memory
// goes when both the uv handle is closed and the JS handle is collected.
enum { SP_DATA = 0, SP_END = 1, SP_WRITABLE = 2, SP_ERROR = 3 };
#define SP_PACKET_MAX 65536
#define SP_BURST 32

typedef struct {
  uv_poll_t poll;
  int fd;
  int reading, want_write, eof, failed;
  int closing, handle_closed, finalized;
  callback_t on_event;
} seqpacket_t;

static char sp_buf[SP_PACKET_MAX];

// Calls onEvent(type, value); value NULL means undefined. The caller holds a handle scope.
static void sp_emit(seqpacket_t *sp, int type, napi_value value) {
  if (sp->closing) return;
  napi_env env = sp->on_event.env;
  napi_value argv[2] = {js_int32(env, type), value ? value : js_undefined(env)};
  callback_call(&sp->on_event, 2, argv);
}

static void sp_poll_cb(uv_poll_t *handle, int status, int events);

static void sp_update(seqpacket_t *sp) {
  if (sp->closing) return;
  int ev = (sp->reading && !sp->eof && !sp->failed ? UV_READABLE : 0) |
           (sp->want_write && !sp->failed ? UV_WRITABLE : 0);
  if (ev) uv_poll_start(&sp->poll, ev, sp_poll_cb);
  else uv_poll_stop(&sp->poll);
}

static void sp_emit_simple(seqpacket_t *sp, int type, const char *code) {
  napi_env env = sp->on_event.env;
  napi_handle_scope scope;
  napi_open_handle_scope(env, &scope);
  napi_value v = NULL;
  if (code) napi_create_string_utf8(env, code, NAPI_AUTO_LENGTH, &v);
  sp_emit(sp, type, v);
  napi_close_handle_scope(env, scope);
}

static void sp_fail(seqpacket_t *sp, int err) {
  sp->failed = 1;
  sp_update(sp);
  sp_emit_simple(sp, SP_ERROR, errno_code(err));
}

// One packet read and handed on; false when there is nothing more to read now.
static bool sp_read_one(seqpacket_t *sp) {
  ssize_t n;
  do n = recv(sp->fd, sp_buf, sizeof sp_buf, MSG_DONTWAIT);
  while (n < 0 && errno == EINTR);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return false;
  if (n < 0) {
    sp_fail(sp, errno);
    return false;
  }
  if (n == 0) {
    sp->eof = 1;
    sp_update(sp);
    sp_emit_simple(sp, SP_END, NULL);
    return false;
  }
  napi_env env = sp->on_event.env;
  napi_handle_scope scope;
  napi_open_handle_scope(env, &scope);
  napi_value buf;
  void *dst;
  if (napi_create_buffer_copy(env, (size_t)n, sp_buf, &dst, &buf) == napi_ok) sp_emit(sp, SP_DATA, buf);
  napi_close_handle_scope(env, scope);
  return true;
}

static void sp_poll_cb(uv_poll_t *handle, int status, int events) {
  seqpacket_t *sp = handle->data;
  if (sp->closing) return;
  if (status < 0) {
    sp_fail(sp, -status);
    return;
  }
  if (events & UV_WRITABLE) {
    sp->want_write = 0;
    sp_update(sp);
    sp_emit_simple(sp, SP_WRITABLE, NULL);
  }
  // A bounded burst per wakeup, so one busy socket cannot starve the loop.
  for (int i = 0; (events & UV_READABLE) && i < SP_BURST; i++) {
    if (!sp->reading || sp->closing || sp->eof || sp->failed || !sp_read_one(sp)) break;
  }
}

static void sp_free_if_done(seqpacket_t *sp) {
  if (sp->handle_closed && sp->finalized) free(sp);
}

static void sp_on_close(uv_handle_t *handle) {
  seqpacket_t *sp = handle->data;
  // Released here, never inside one of our own callbacks (close() may be called from one).
  callback_release(&sp->on_event);
  close(sp->fd);
  sp->fd = -1;
  sp->handle_closed = 1;
  sp_free_if_done(sp);
}

static void sp_close(seqpacket_t *sp) {
  if (sp->closing) return;
  sp->closing = 1;
  uv_poll_stop(&sp->poll);
  uv_close((uv_handle_t *)&sp->poll, sp_on_close);
}

static void sp_finalize(napi_env env, void *data, void *hint) {
  (void)env;
  (void)hint;
  seqpacket_t *sp = data;
  sp->finalized = 1;
  if (!sp->closing) sp_close(sp);
  else sp_free_if_done(sp);
}

// The open seqpacket behind argument 0; NULL with an exception pending otherwise.
static seqpacket_t *sp_arg(args_t *a) {
  seqpacket_t *sp = args_external(a, 0, "seqpacket");
  if (sp && sp->closing) {
    throw_errno(a->env, "seqpacket", NULL, EBADF);
    return NULL;
  }
  return sp;
}

// A connected, non-blocking SOCK_SEQPACKET socket to path; -1 with *e set.
static int sp_connect(const char *path, const char **failed, int *e) {
  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  *failed = "connect";
  if (strlen(path) >= sizeof addr.sun_path) {
    *e = ENAMETOOLONG;
    return -1;
  }
  strcpy(addr.sun_path, path);
  *failed = "socket";
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *e = errno;
    return -1;
  }
  *failed = "connect";
  int r;
  do r = connect(fd, (struct sockaddr *)&addr, sizeof addr);
  while (r < 0 && errno == EINTR);
  if (r < 0) {
    *e = errno;
    close(fd);
    return -1;
  }
  return fd;
}

static napi_value sp_wrap(napi_env env, int fd, napi_value on_event);

// seqpacketConnect(path, onEvent) -> handle. Unix connects complete at once (or fail).
BINDING(js_seqpacket_connect) {
  ARGS(a, 2);
  const char *path = args_path(&a, 0);
  if (!path) return args_done(&a, NULL);
  const char *failed = NULL;
  int e = 0, fd = sp_connect(path, &failed, &e);
  // The handle takes the descriptor (closing it if it cannot watch it).
  napi_value handle = fd >= 0 ? sp_wrap(env, fd, a.argv[1]) : throw_errno(env, failed, path, e);
  return args_done(&a, handle);
}

// The handle for the connected socket fd (which it owns from here on), its events to on_event.
static napi_value sp_wrap(napi_env env, int fd, napi_value on_event) {
  seqpacket_t *sp = calloc(1, sizeof *sp);
  uv_loop_t *loop;
  napi_value handle;
  if (!sp || napi_get_uv_event_loop(env, &loop) != napi_ok || uv_poll_init(loop, &sp->poll, fd) != 0) {
    close(fd);
    free(sp);
    return throw_message(env, NULL, "cannot watch the socket");
  }
  sp->fd = fd;
  sp->poll.data = sp;
  callback_init(&sp->on_event, env, on_event, "berth.seqpacket");
  if (napi_create_external(env, sp, sp_finalize, NULL, &handle) != napi_ok) {
    sp_close(sp);
    sp->finalized = 1;
    return throw_message(env, NULL, "cannot make a seqpacket handle");
  }
  return handle;
}

// seqpacketPair() -> [ours, theirs]: a connected SOCK_SEQPACKET pair, both
// close-on-exec; `ours` for seqpacketOpen, `theirs` for a child to write to
// (each write one packet, read whole).
BINDING(js_seqpacket_pair) {
  (void)info;
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds) != 0) return throw_errno(env, "socketpair", NULL, errno);
  return js_fd_pair(env, fds);
}

// seqpacketOpen(fd, onEvent) -> handle, for a connected socket (seqpacketPair's): the handle owns it.
BINDING(js_seqpacket_open) {
  ARGS(a, 2);
  int fd = args_int32(&a, 0);
  if (fd < 0) return args_done(&a, throw_errno(env, "seqpacket", NULL, EBADF));
  return args_done(&a, sp_wrap(env, fd, a.argv[1]));
}

// seqpacketSetReading(handle, bool)
BINDING(js_seqpacket_set_reading) {
  ARGS(a, 2);
  seqpacket_t *sp = sp_arg(&a);
  if (!sp) return NULL;
  sp->reading = args_bool(&a, 1);
  sp_update(sp);
  return js_undefined(env);
}

// seqpacketWrite(handle, Buffer) -> true when sent, false when the socket is full (SP_WRITABLE follows).
BINDING(js_seqpacket_write) {
  ARGS(a, 2);
  seqpacket_t *sp = sp_arg(&a);
  void *data = NULL;
  size_t len = 0;
  if (!sp || !args_buffer(&a, 1, &data, &len)) return NULL;
  ssize_t n;
  do n = send(sp->fd, data, len, MSG_DONTWAIT | MSG_NOSIGNAL);
  while (n < 0 && errno == EINTR);
  if (n >= 0) return js_bool(env, true);
  if (errno != EAGAIN && errno != EWOULDBLOCK) return throw_errno(env, "send", NULL, errno);
  sp->want_write = 1;
  sp_update(sp);
  return js_bool(env, false);
}

// seqpacketShutdown(handle): no more writes (the peer reads end-of-file).
BINDING(js_seqpacket_shutdown) {
  ARGS(a, 1);
  seqpacket_t *sp = sp_arg(&a);
  if (!sp) return NULL;
  if (shutdown(sp->fd, SHUT_WR) < 0 && errno != ENOTCONN) return throw_errno(env, "shutdown", NULL, errno);
  return js_undefined(env);
}

// seqpacketClose(handle): stops watching and closes; no event follows. Idempotent.
BINDING(js_seqpacket_close) {
  ARGS(a, 1);
  seqpacket_t *sp = args_external(&a, 0, "seqpacket");
  if (!sp) return NULL;
  sp_close(sp);
  return js_undefined(env);
}
