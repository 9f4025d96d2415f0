// Extended attributes, on the path itself (a symlink is not followed).
#include <errno.h>
#include <string.h>
#include <sys/types.h>
#include <sys/xattr.h>

#include "addon.h"
#include "args.h"

// lsetxattr(path, name, Buffer value)
BINDING(js_lsetxattr) {
  ARGS(a, 3);
  void *data = NULL;
  size_t len = 0;
  if (!args_buffer(&a, 2, &data, &len)) return NULL;
  const char *path = args_string(&a, 0);
  int r = lsetxattr(path, args_string(&a, 1), data, len, 0);
  int e = errno;
  return args_done(&a, r == 0 ? js_undefined(env) : throw_errno(env, "lsetxattr", path, e));
}

// lgetxattr(path, name) -> Buffer | null (null when the attribute is absent)
BINDING(js_lgetxattr) {
  ARGS(a, 2);
  const char *path = args_string(&a, 0);
  static char buf[65536];
  ssize_t n = lgetxattr(path, args_string(&a, 1), buf, sizeof buf);
  int e = errno;
  napi_value out;
  void *copy;
  if (n >= 0) napi_create_buffer_copy(env, (size_t)n, buf, &copy, &out);
  else if (e == ENODATA || e == ENOTSUP) out = js_null(env);
  else out = throw_errno(env, "lgetxattr", path, e);
  return args_done(&a, out);
}

// llistxattr(path) -> string[]
BINDING(js_llistxattr) {
  ARGS(a, 1);
  const char *path = args_string(&a, 0);
  static char buf[65536];
  ssize_t n = llistxattr(path, buf, sizeof buf);
  int e = errno;
  if (n < 0 && e != ENOTSUP) return args_done(&a, throw_errno(env, "llistxattr", path, e));
  napi_value out;
  napi_create_array(env, &out);
  uint32_t idx = 0;
  for (ssize_t off = 0; n > 0 && off < n;) {
    size_t l = strlen(buf + off);
    napi_value s;
    napi_create_string_utf8(env, buf + off, l, &s);
    napi_set_element(env, out, idx++, s);
    off += (ssize_t)l + 1;
  }
  return args_done(&a, out);
}
