// What every binding in the addon shares: reading a call's arguments, turning
// an errno into a JS error shaped like Node's own fs errors, and calling back
// into JS from the loop. One place, so that each binding holds only its syscall.
#ifndef BERTH_ARGS_H
#define BERTH_ARGS_H

#include <node_api.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ARGS_MAX 8

// A call's arguments; the strings read through args_string stay valid until
// args_done, which frees them all.
typedef struct {
  napi_env env;
  napi_value argv[ARGS_MAX];
  char *strings[ARGS_MAX];
} args_t;

// Declares `a` holding the call's first n arguments (missing ones read as
// undefined); returns NULL from the binding (a JS exception pending) when N-API fails.
#define ARGS(a, n)                                 \
  args_t a;                                        \
  if (!args_read(&a, env, info, (n))) return NULL

bool args_read(args_t *a, napi_env env, napi_callback_info info, size_t n);
// Argument i as a UTF-8 string, NULL for null, undefined or a non-string.
const char *args_string(args_t *a, size_t i);
// Argument i as a string; NULL, with a TypeError pending, when it is not one.
const char *args_path(args_t *a, size_t i);
// Argument i as a NULL-terminated array of strings (free_strings releases it), NULL when not an array.
char **args_strings(args_t *a, size_t i);
void free_strings(char **strings);
int32_t args_int32(args_t *a, size_t i);
uint32_t args_uint32(args_t *a, size_t i);
int64_t args_int64(args_t *a, size_t i);
double args_double(args_t *a, size_t i);
bool args_bool(args_t *a, size_t i);
// Argument i's bytes (a Buffer); false, with a TypeError pending, when it is not one.
bool args_buffer(args_t *a, size_t i, void **data, size_t *len);
// The native pointer behind argument i (an External); NULL, with a TypeError naming `what` pending, otherwise.
void *args_external(args_t *a, size_t i, const char *what);
// Frees what the arguments held and returns `out`.
napi_value args_done(args_t *a, napi_value out);

// The errno's name ("ENOENT"), or "EUNKNOWN".
const char *errno_code(int e);
// A JS Error like Node's own fs errors: code (errno name), errno, message.
napi_value errno_error(napi_env env, const char *syscall, const char *path, int e);
// Throws errno_error; returns NULL, what a binding returns when it throws.
napi_value throw_errno(napi_env env, const char *syscall, const char *path, int e);
napi_value throw_message(napi_env env, const char *code, const char *message);

napi_value js_undefined(napi_env env);
napi_value js_null(napi_env env);
napi_value js_bool(napi_env env, bool value);
napi_value js_int32(napi_env env, int32_t value);
// [a, b]: a pair of descriptors (pipe, socketpair) as JS sees it.
napi_value js_fd_pair(napi_env env, const int fds[2]);

// A callback kept across turns of the loop, with its async context.
typedef struct {
  napi_env env;
  napi_ref ref;
  napi_async_context async;
} callback_t;

void callback_init(callback_t *cb, napi_env env, napi_value fn, const char *name);
// Calls it from the loop (inside a handle scope the caller opened). A throw
// goes to process 'uncaughtException', as with Node's own callbacks.
void callback_call(callback_t *cb, size_t argc, napi_value *argv);
void callback_release(callback_t *cb);

// A call done on a thread of its own, its promise settled on the loop. Not the
// libuv pool: a call that waits long there (a sync, a kernel lock) holds up
// what is queued behind it, such as the blocking fifo open that starts a container.
// work(data) runs on the thread; settle(env, deferred, data) then runs on the
// loop, resolves or rejects, and frees data (with env NULL, when the environment
// is going away: it only frees). Returns the promise; when the call cannot be set
// up, data is settled with env NULL and NULL is returned with an error pending.
typedef void (*thread_work_t)(void *data);
typedef void (*thread_settle_t)(napi_env env, napi_deferred deferred, void *data);
napi_value promise_on_thread(napi_env env, const char *name, thread_work_t work, thread_settle_t settle, void *data);

#endif
