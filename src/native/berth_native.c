// The few syscalls Node lacks: mount, umount2, mknod and the l*xattr family.
// Each function is synchronous and thin; errors become JS errors carrying the
// errno name in `code` (like Node's own fs errors) so callers can branch on it.
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <node_api.h>

#define CHECK(call) do { if ((call) != napi_ok) { napi_throw_error(env, NULL, "napi call failed: " #call); return NULL; } } while (0)

static const char *errno_code(int e) {
  switch (e) {
    case EPERM: return "EPERM"; case ENOENT: return "ENOENT"; case EEXIST: return "EEXIST";
    case EINVAL: return "EINVAL"; case EBUSY: return "EBUSY"; case ENOTDIR: return "ENOTDIR";
    case EACCES: return "EACCES"; case ENODATA: return "ENODATA"; case ENOTSUP: return "ENOTSUP";
    case ENOSPC: return "ENOSPC"; case E2BIG: return "E2BIG"; case ERANGE: return "ERANGE";
    case ELOOP: return "ELOOP"; case ENAMETOOLONG: return "ENAMETOOLONG"; case ENODEV: return "ENODEV"; case EWOULDBLOCK: return "EWOULDBLOCK";
    default: return "EUNKNOWN";
  }
}

static napi_value throw_errno(napi_env env, const char *syscall, const char *path, int e) {
  char msg[4200];
  snprintf(msg, sizeof msg, "%s: %s, %s '%s'", errno_code(e), strerror(e), syscall, path ? path : "");
  napi_value code, message, err, num;
  napi_create_string_utf8(env, errno_code(e), NAPI_AUTO_LENGTH, &code);
  napi_create_string_utf8(env, msg, NAPI_AUTO_LENGTH, &message);
  napi_create_error(env, code, message, &err);
  napi_create_int32(env, -e, &num);
  napi_set_named_property(env, err, "errno", num);
  napi_throw(env, err);
  return NULL;
}

// Reads argument i as a malloc'd UTF-8 string (NULL for null/undefined).
static char *get_string(napi_env env, napi_value v) {
  napi_valuetype t;
  if (napi_typeof(env, v, &t) != napi_ok || t == napi_null || t == napi_undefined) return NULL;
  size_t len = 0;
  if (napi_get_value_string_utf8(env, v, NULL, 0, &len) != napi_ok) return NULL;
  char *s = malloc(len + 1);
  if (!s) return NULL;
  napi_get_value_string_utf8(env, v, s, len + 1, &len);
  return s;
}

static napi_value undefined(napi_env env) { napi_value u; napi_get_undefined(env, &u); return u; }

// mount(source, target, fstype, flags, data)
static napi_value js_mount(napi_env env, napi_callback_info info) {
  size_t argc = 5; napi_value argv[5];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  char *src = get_string(env, argv[0]), *dst = get_string(env, argv[1]), *fs = get_string(env, argv[2]);
  char *data = get_string(env, argv[4]);
  int64_t flags = 0; napi_get_value_int64(env, argv[3], &flags);
  int r = mount(src, dst, fs, (unsigned long)flags, data);
  int e = errno;
  napi_value out = r == 0 ? undefined(env) : throw_errno(env, "mount", dst, e);
  free(src); free(dst); free(fs); free(data);
  return out;
}

// umount2(target, flags)
static napi_value js_umount2(napi_env env, napi_callback_info info) {
  size_t argc = 2; napi_value argv[2];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  char *dst = get_string(env, argv[0]);
  int32_t flags = 0; napi_get_value_int32(env, argv[1], &flags);
  int r = umount2(dst, flags);
  int e = errno;
  napi_value out = r == 0 ? undefined(env) : throw_errno(env, "umount2", dst, e);
  free(dst);
  return out;
}

// mknod(path, mode, major, minor)
static napi_value js_mknod(napi_env env, napi_callback_info info) {
  size_t argc = 4; napi_value argv[4];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  char *path = get_string(env, argv[0]);
  uint32_t mode = 0, maj = 0, min = 0;
  napi_get_value_uint32(env, argv[1], &mode);
  napi_get_value_uint32(env, argv[2], &maj);
  napi_get_value_uint32(env, argv[3], &min);
  int r = mknod(path, mode, makedev(maj, min));
  int e = errno;
  napi_value out = r == 0 ? undefined(env) : throw_errno(env, "mknod", path, e);
  free(path);
  return out;
}

// lsetxattr(path, name, Buffer value)
static napi_value js_lsetxattr(napi_env env, napi_callback_info info) {
  size_t argc = 3; napi_value argv[3];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  char *path = get_string(env, argv[0]), *name = get_string(env, argv[1]);
  void *data = NULL; size_t len = 0;
  CHECK(napi_get_buffer_info(env, argv[2], &data, &len));
  int r = lsetxattr(path, name, data, len, 0);
  int e = errno;
  napi_value out = r == 0 ? undefined(env) : throw_errno(env, "lsetxattr", path, e);
  free(path); free(name);
  return out;
}

// lgetxattr(path, name) -> Buffer | null (null when the attribute is absent)
static napi_value js_lgetxattr(napi_env env, napi_callback_info info) {
  size_t argc = 2; napi_value argv[2];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  char *path = get_string(env, argv[0]), *name = get_string(env, argv[1]);
  char buf[65536];
  ssize_t n = lgetxattr(path, name, buf, sizeof buf);
  int e = errno;
  napi_value out;
  if (n >= 0) {
    void *dst; CHECK(napi_create_buffer_copy(env, (size_t)n, buf, &dst, &out));
  } else if (e == ENODATA || e == ENOTSUP) {
    napi_get_null(env, &out);
  } else {
    out = throw_errno(env, "lgetxattr", path, e);
  }
  free(path); free(name);
  return out;
}

// llistxattr(path) -> string[]
static napi_value js_llistxattr(napi_env env, napi_callback_info info) {
  size_t argc = 1; napi_value argv[1];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  char *path = get_string(env, argv[0]);
  char buf[65536];
  ssize_t n = llistxattr(path, buf, sizeof buf);
  int e = errno;
  napi_value out;
  if (n < 0 && e != ENOTSUP) { out = throw_errno(env, "llistxattr", path, e); free(path); return out; }
  CHECK(napi_create_array(env, &out));
  uint32_t idx = 0;
  for (ssize_t off = 0; n > 0 && off < n; ) {
    size_t l = strlen(buf + off);
    napi_value s; napi_create_string_utf8(env, buf + off, l, &s);
    napi_set_element(env, out, idx++, s);
    off += (ssize_t)l + 1;
  }
  free(path);
  return out;
}

// flock(fd, operation): for the daemon's data-root lock, released by the kernel
// when the process dies, however it dies.
static napi_value js_flock(napi_env env, napi_callback_info info) {
  size_t argc = 2; napi_value argv[2];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  int32_t fd = -1, op = 0;
  napi_get_value_int32(env, argv[0], &fd);
  napi_get_value_int32(env, argv[1], &op);
  if (flock(fd, op) != 0) return throw_errno(env, "flock", NULL, errno);
  return undefined(env);
}

static napi_value init(napi_env env, napi_value exports) {
  napi_property_descriptor props[] = {
    {"mount", NULL, js_mount, NULL, NULL, NULL, napi_default, NULL},
    {"umount2", NULL, js_umount2, NULL, NULL, NULL, napi_default, NULL},
    {"mknod", NULL, js_mknod, NULL, NULL, NULL, napi_default, NULL},
    {"lsetxattr", NULL, js_lsetxattr, NULL, NULL, NULL, napi_default, NULL},
    {"lgetxattr", NULL, js_lgetxattr, NULL, NULL, NULL, napi_default, NULL},
    {"llistxattr", NULL, js_llistxattr, NULL, NULL, NULL, napi_default, NULL},
    {"flock", NULL, js_flock, NULL, NULL, NULL, napi_default, NULL},
  };
  napi_define_properties(env, exports, sizeof props / sizeof props[0], props);
  return exports;
}

NAPI_MODULE(NODE_GYP_MODULE_NAME, init)
