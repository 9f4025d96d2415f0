#include "args.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool args_read(args_t *a, napi_env env, napi_callback_info info, size_t n) {
  memset(a, 0, sizeof *a);
  a->env = env;
  size_t argc = n;
  if (n > ARGS_MAX || napi_get_cb_info(env, info, &argc, a->argv, NULL, NULL) != napi_ok) {
    napi_throw_error(env, NULL, "napi_get_cb_info failed");
    return false;
  }
  return true;
}

static char *read_string(napi_env env, napi_value v) {
  napi_valuetype t;
  if (napi_typeof(env, v, &t) != napi_ok || t != napi_string) return NULL;
  size_t len = 0;
  if (napi_get_value_string_utf8(env, v, NULL, 0, &len) != napi_ok) return NULL;
  char *s = malloc(len + 1);
  if (s) napi_get_value_string_utf8(env, v, s, len + 1, &len);
  return s;
}

const char *args_string(args_t *a, size_t i) {
  if (!a->strings[i]) a->strings[i] = read_string(a->env, a->argv[i]);
  return a->strings[i];
}

char **args_strings(args_t *a, size_t i) {
  uint32_t n = 0;
  if (napi_get_array_length(a->env, a->argv[i], &n) != napi_ok) return NULL;
  char **out = calloc(n + 1, sizeof *out);
  for (uint32_t k = 0; out && k < n; k++) {
    napi_value v;
    napi_get_element(a->env, a->argv[i], k, &v);
    out[k] = read_string(a->env, v);
  }
  return out;
}

void free_strings(char **strings) {
  for (char **p = strings; p && *p; p++) free(*p);
  free(strings);
}

// One getter per number type: the value, or 0 when argument i is not one.
#define ARGS_GETTER(name, type, get) \
  type name(args_t *a, size_t i) {   \
    type v = 0;                      \
    get(a->env, a->argv[i], &v);     \
    return v;                        \
  }

ARGS_GETTER(args_int32, int32_t, napi_get_value_int32)
ARGS_GETTER(args_uint32, uint32_t, napi_get_value_uint32)
ARGS_GETTER(args_int64, int64_t, napi_get_value_int64)
ARGS_GETTER(args_double, double, napi_get_value_double)
ARGS_GETTER(args_bool, bool, napi_get_value_bool)

const char *args_path(args_t *a, size_t i) {
  const char *s = args_string(a, i);
  if (!s) napi_throw_type_error(a->env, NULL, "path must be a string");
  return s;
}

bool args_buffer(args_t *a, size_t i, void **data, size_t *len) {
  if (napi_get_buffer_info(a->env, a->argv[i], data, len) == napi_ok) return true;
  napi_throw_type_error(a->env, NULL, "expected a Buffer");
  return false;
}

void *args_external(args_t *a, size_t i, const char *what) {
  void *p = NULL;
  if (napi_get_value_external(a->env, a->argv[i], &p) != napi_ok || p == NULL) {
    char msg[128];
    snprintf(msg, sizeof msg, "not a %s handle", what);
    napi_throw_type_error(a->env, NULL, msg);
    return NULL;
  }
  return p;
}

napi_value args_done(args_t *a, napi_value out) {
  for (size_t i = 0; i < ARGS_MAX; i++) free(a->strings[i]);
  return out;
}

const char *errno_code(int e) {
  switch (e) {
    case EPERM: return "EPERM";
    case ENOENT: return "ENOENT";
    case EEXIST: return "EEXIST";
    case EINVAL: return "EINVAL";
    case EBUSY: return "EBUSY";
    case ENOTDIR: return "ENOTDIR";
    case EACCES: return "EACCES";
    case ENODATA: return "ENODATA";
    case ENOTSUP: return "ENOTSUP";
    case ENOSPC: return "ENOSPC";
    case E2BIG: return "E2BIG";
    case ERANGE: return "ERANGE";
    case ELOOP: return "ELOOP";
    case ENAMETOOLONG: return "ENAMETOOLONG";
    case ENODEV: return "ENODEV";
    case EWOULDBLOCK: return "EWOULDBLOCK";
    case ECONNREFUSED: return "ECONNREFUSED";
    case ECONNRESET: return "ECONNRESET";
    case EPIPE: return "EPIPE";
    case EBADF: return "EBADF";
    case ENOTCONN: return "ENOTCONN";
    case EMSGSIZE: return "EMSGSIZE";
    case ENOTTY: return "ENOTTY";
    case ENOMEM: return "ENOMEM";
    case EIO: return "EIO";
    case EINTR: return "EINTR";
    case ETIMEDOUT: return "ETIMEDOUT";
    case EBADMSG: return "EBADMSG";
    case ESRCH: return "ESRCH";
    case ENETDOWN: return "ENETDOWN";
    case ENETUNREACH: return "ENETUNREACH";
    case EHOSTUNREACH: return "EHOSTUNREACH";
    case EADDRINUSE: return "EADDRINUSE";
    case EADDRNOTAVAIL: return "EADDRNOTAVAIL";
    case EAFNOSUPPORT: return "EAFNOSUPPORT";
    case EPROTONOSUPPORT: return "EPROTONOSUPPORT";
    case ENOBUFS: return "ENOBUFS";
    default: return "EUNKNOWN";
  }
}

napi_value errno_error(napi_env env, const char *syscall, const char *path, int e) {
  char msg[4200];
  snprintf(msg, sizeof msg, "%s: %s, %s '%s'", errno_code(e), strerror(e), syscall, path ? path : "");
  napi_value code, message, err;
  napi_create_string_utf8(env, errno_code(e), NAPI_AUTO_LENGTH, &code);
  napi_create_string_utf8(env, msg, NAPI_AUTO_LENGTH, &message);
  napi_create_error(env, code, message, &err);
  napi_set_named_property(env, err, "errno", js_int32(env, -e));
  return err;
}

napi_value throw_errno(napi_env env, const char *syscall, const char *path, int e) {
  napi_throw(env, errno_error(env, syscall, path, e));
  return NULL;
}

napi_value throw_message(napi_env env, const char *code, const char *message) {
  napi_throw_error(env, code, message);
  return NULL;
}

napi_value js_undefined(napi_env env) {
  napi_value v;
  napi_get_undefined(env, &v);
  return v;
}

napi_value js_null(napi_env env) {
  napi_value v;
  napi_get_null(env, &v);
  return v;
}

napi_value js_bool(napi_env env, bool value) {
  napi_value v;
  napi_get_boolean(env, value, &v);
  return v;
}

napi_value js_int32(napi_env env, int32_t value) {
  napi_value v;
  napi_create_int32(env, value, &v);
  return v;
}

void callback_init(callback_t *cb, napi_env env, napi_value fn, const char *name) {
  napi_value resource;
  cb->env = env;
  napi_create_reference(env, fn, 1, &cb->ref);
  napi_create_string_utf8(env, name, NAPI_AUTO_LENGTH, &resource);
  napi_async_init(env, NULL, resource, &cb->async);
}

void callback_call(callback_t *cb, size_t argc, napi_value *argv) {
  napi_env env = cb->env;
  napi_value fn, recv, result;
  if (napi_get_reference_value(env, cb->ref, &fn) != napi_ok || fn == NULL) return;
  napi_get_global(env, &recv);
  if (napi_make_callback(env, cb->async, recv, fn, argc, argv, &result) == napi_ok) return;
  bool pending = false;
  napi_is_exception_pending(env, &pending);
  if (pending) {
    napi_value err;
    napi_get_and_clear_last_exception(env, &err);
    napi_fatal_exception(env, err);
  }
}

void callback_release(callback_t *cb) {
  napi_delete_reference(cb->env, cb->ref);
  napi_async_destroy(cb->env, cb->async);
}

typedef struct {
  napi_deferred deferred;
  napi_threadsafe_function done;
  thread_work_t work;
  thread_settle_t settle;
  void *data;
} thread_call_t;

static void thread_call_settle(napi_env env, napi_value js_cb, void *context, void *call) {
  (void)js_cb;
  (void)context;
  thread_call_t *c = call;
  c->settle(env, env ? c->deferred : NULL, c->data);
  free(c);
}

static void *thread_call_main(void *call) {
  thread_call_t *c = call;
  c->work(c->data);
  napi_threadsafe_function done = c->done;
  napi_call_threadsafe_function(done, c, napi_tsfn_blocking);
  napi_release_threadsafe_function(done, napi_tsfn_release);
  return NULL;
}

napi_value promise_on_thread(napi_env env, const char *name, thread_work_t work, thread_settle_t settle, void *data) {
  thread_call_t *c = calloc(1, sizeof *c);
  napi_value promise, resource;
  if (!c || napi_create_string_utf8(env, name, NAPI_AUTO_LENGTH, &resource) != napi_ok ||
      napi_create_promise(env, &c->deferred, &promise) != napi_ok ||
      napi_create_threadsafe_function(env, NULL, NULL, resource, 0, 1, NULL, NULL, NULL, thread_call_settle, &c->done) !=
        napi_ok) {
    free(c);
    settle(NULL, NULL, data);
    char msg[128];
    snprintf(msg, sizeof msg, "%s: cannot set up the call", name);
    return throw_message(env, NULL, msg);
  }
  c->work = work;
  c->settle = settle;
  c->data = data;
  pthread_t t;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  int e = pthread_create(&t, &attr, thread_call_main, c);
  pthread_attr_destroy(&attr);
  if (e != 0) { // no thread: do it here
    work(data);
    napi_release_threadsafe_function(c->done, napi_tsfn_release);
    thread_call_settle(env, NULL, NULL, c);
  }
  return promise;
}

napi_value js_fd_pair(napi_env env, const int fds[2]) {
  napi_value out;
  napi_create_array_with_length(env, 2, &out);
  napi_set_element(env, out, 0, js_int32(env, fds[0]));
  napi_set_element(env, out, 1, js_int32(env, fds[1]));
  return out;
}
