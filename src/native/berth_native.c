// The few syscalls Node lacks: mount, umount2, mknod, the l*xattr family, and
// a sha256 that runs on the thread pool.
// Most functions are synchronous and thin; errors become JS errors carrying the
// errno name in `code` (like Node's own fs errors) so callers can branch on it.
#define _GNU_SOURCE
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <linux/sockios.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <sched.h>
#include <signal.h>
#include <poll.h>
#include <pthread.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <node_api.h>
#include <openssl/evp.h>
#include <uv.h>

#define CHECK(call) do { if ((call) != napi_ok) { napi_throw_error(env, NULL, "napi call failed: " #call); return NULL; } } while (0)

static const char *errno_code(int e) {
  switch (e) {
    case EPERM: return "EPERM"; case ENOENT: return "ENOENT"; case EEXIST: return "EEXIST";
    case EINVAL: return "EINVAL"; case EBUSY: return "EBUSY"; case ENOTDIR: return "ENOTDIR";
    case EACCES: return "EACCES"; case ENODATA: return "ENODATA"; case ENOTSUP: return "ENOTSUP";
    case ENOSPC: return "ENOSPC"; case E2BIG: return "E2BIG"; case ERANGE: return "ERANGE";
    case ELOOP: return "ELOOP"; case ENAMETOOLONG: return "ENAMETOOLONG"; case ENODEV: return "ENODEV"; case EWOULDBLOCK: return "EWOULDBLOCK";
    case ECONNREFUSED: return "ECONNREFUSED"; case ECONNRESET: return "ECONNRESET"; case EPIPE: return "EPIPE"; case EBADF: return "EBADF";
    case ENOTCONN: return "ENOTCONN"; case EMSGSIZE: return "EMSGSIZE"; case ENOTTY: return "ENOTTY";
    default: return "EUNKNOWN";
  }
}

// A JS Error like Node's own fs errors: code (errno name), errno, message.
static napi_value errno_error(napi_env env, const char *syscall, const char *path, int e) {
  char msg[4200];
  snprintf(msg, sizeof msg, "%s: %s, %s '%s'", errno_code(e), strerror(e), syscall, path ? path : "");
  napi_value code, message, err, num;
  napi_create_string_utf8(env, errno_code(e), NAPI_AUTO_LENGTH, &code);
  napi_create_string_utf8(env, msg, NAPI_AUTO_LENGTH, &message);
  napi_create_error(env, code, message, &err);
  napi_create_int32(env, -e, &num);
  napi_set_named_property(env, err, "errno", num);
  return err;
}

static napi_value throw_errno(napi_env env, const char *syscall, const char *path, int e) {
  napi_throw(env, errno_error(env, syscall, path, e));
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

// umount2Async(target, flags) -> Promise: umount2 on a thread of its own.
// Unmounting an overlay syncs its upper filesystem, which can take long (a
// container that wrote much). Not the libuv pool: a slow sync there would hold
// up the blocking fifo open that starts a container.
typedef struct {
  napi_deferred deferred;
  napi_threadsafe_function done;
  char *target;
  int flags;
  int err;
} umount_job_t;

static void umount_settle(napi_env env, napi_value js_cb, void *context, void *data) {
  (void)js_cb; (void)context;
  umount_job_t *j = data;
  if (env != NULL) {
    if (j->err == 0) napi_resolve_deferred(env, j->deferred, undefined(env));
    else napi_reject_deferred(env, j->deferred, errno_error(env, "umount2", j->target, j->err));
  }
  free(j->target);
  free(j);
}

static void *umount_thread(void *data) {
  umount_job_t *j = data;
  j->err = umount2(j->target, j->flags) == 0 ? 0 : errno;
  napi_threadsafe_function done = j->done;
  napi_call_threadsafe_function(done, j, napi_tsfn_blocking);
  napi_release_threadsafe_function(done, napi_tsfn_release);
  return NULL;
}

static napi_value js_umount2_async(napi_env env, napi_callback_info info) {
  size_t argc = 2; napi_value argv[2];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  umount_job_t *j = calloc(1, sizeof *j);
  if (!j) { napi_throw_error(env, "ENOMEM", "out of memory"); return NULL; }
  j->target = get_string(env, argv[0]);
  int32_t flags = 0;
  napi_get_value_int32(env, argv[1], &flags);
  j->flags = flags;
  napi_value promise, name;
  CHECK(napi_create_promise(env, &j->deferred, &promise));
  napi_create_string_utf8(env, "berth.umount", NAPI_AUTO_LENGTH, &name);
  CHECK(napi_create_threadsafe_function(env, NULL, NULL, name, 0, 1, NULL, NULL, NULL, umount_settle, &j->done));
  pthread_t t;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  int e = pthread_create(&t, &attr, umount_thread, j);
  pthread_attr_destroy(&attr);
  if (e != 0) { // no thread: do it here
    j->err = umount2(j->target, j->flags) == 0 ? 0 : errno;
    napi_release_threadsafe_function(j->done, napi_tsfn_release);
    umount_settle(env, NULL, NULL, j);
  }
  return promise;
}

// sha256 off the event loop, for digests of streams that pass by in large
// chunks (layer tars, blobs): sha256New() -> handle; sha256Update(handle,
// buffers) -> Promise, which hashes the buffers in order on a libuv pool
// thread (one update at a time per handle: the caller's rule, see
// content/hash.ts); sha256Digest(handle) -> hex, once no update runs. The
// OpenSSL is Node's own (its symbols are the process's).
typedef struct {
  EVP_MD_CTX *ctx;
  int busy;
} sha_t;

typedef struct {
  napi_async_work work;
  napi_deferred deferred;
  napi_ref handle_ref;
  napi_ref buffers_ref;
  sha_t *sha;
  uint32_t n;
  const unsigned char **data;
  size_t *len;
  int ok;
} sha_job_t;

static void sha_finalize(napi_env env, void *data, void *hint) {
  (void)env; (void)hint;
  sha_t *sha = data;
  EVP_MD_CTX_free(sha->ctx);
  free(sha);
}

static sha_t *get_sha(napi_env env, napi_value v) {
  sha_t *sha = NULL;
  if (napi_get_value_external(env, v, (void **)&sha) != napi_ok || sha == NULL) {
    napi_throw_type_error(env, NULL, "not a sha256 handle");
    return NULL;
  }
  return sha;
}

static napi_value js_sha256_new(napi_env env, napi_callback_info info) {
  (void)info;
  sha_t *sha = calloc(1, sizeof *sha);
  if (!sha) { napi_throw_error(env, "ENOMEM", "out of memory"); return NULL; }
  sha->ctx = EVP_MD_CTX_new();
  if (!sha->ctx || EVP_DigestInit_ex(sha->ctx, EVP_sha256(), NULL) != 1) {
    EVP_MD_CTX_free(sha->ctx);
    free(sha);
    napi_throw_error(env, NULL, "sha256: OpenSSL refused to start a digest");
    return NULL;
  }
  napi_value out;
  CHECK(napi_create_external(env, sha, sha_finalize, NULL, &out));
  return out;
}

static void sha_execute(napi_env env, void *data) {
  (void)env;
  sha_job_t *j = data;
  j->ok = 1;
  for (uint32_t i = 0; i < j->n && j->ok; i++) j->ok = EVP_DigestUpdate(j->sha->ctx, j->data[i], j->len[i]) == 1;
}

static void sha_complete(napi_env env, napi_status status, void *data) {
  sha_job_t *j = data;
  j->sha->busy = 0;
  if (status == napi_ok && j->ok) napi_resolve_deferred(env, j->deferred, undefined(env));
  else {
    napi_value msg, err;
    napi_create_string_utf8(env, "sha256: update failed", NAPI_AUTO_LENGTH, &msg);
    napi_create_error(env, NULL, msg, &err);
    napi_reject_deferred(env, j->deferred, err);
  }
  napi_delete_reference(env, j->handle_ref);
  napi_delete_reference(env, j->buffers_ref);
  napi_delete_async_work(env, j->work);
  free(j->data);
  free(j->len);
  free(j);
}

static napi_value js_sha256_update(napi_env env, napi_callback_info info) {
  size_t argc = 2; napi_value argv[2];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  sha_t *sha = get_sha(env, argv[0]);
  if (!sha) return NULL;
  if (sha->busy) { napi_throw_error(env, NULL, "sha256: an update is already running"); return NULL; }
  bool is_array = false;
  napi_is_array(env, argv[1], &is_array);
  if (!is_array) { napi_throw_type_error(env, NULL, "buffers must be an array"); return NULL; }
  sha_job_t *j = calloc(1, sizeof *j);
  if (!j) { napi_throw_error(env, "ENOMEM", "out of memory"); return NULL; }
  j->sha = sha;
  CHECK(napi_get_array_length(env, argv[1], &j->n));
  j->data = calloc(j->n ? j->n : 1, sizeof *j->data);
  j->len = calloc(j->n ? j->n : 1, sizeof *j->len);
  if (!j->data || !j->len) { free(j->data); free(j->len); free(j); napi_throw_error(env, "ENOMEM", "out of memory"); return NULL; }
  for (uint32_t i = 0; i < j->n; i++) {
    napi_value b;
    void *p = NULL; size_t len = 0;
    if (napi_get_element(env, argv[1], i, &b) != napi_ok || napi_get_buffer_info(env, b, &p, &len) != napi_ok) {
      free(j->data); free(j->len); free(j);
      napi_throw_type_error(env, NULL, "buffers must hold Buffers");
      return NULL;
    }
    j->data[i] = p;
    j->len[i] = len;
  }
  // The handle and the array (so its buffers) stay alive until the thread is done with them.
  CHECK(napi_create_reference(env, argv[0], 1, &j->handle_ref));
  CHECK(napi_create_reference(env, argv[1], 1, &j->buffers_ref));
  napi_value promise, name;
  CHECK(napi_create_promise(env, &j->deferred, &promise));
  napi_create_string_utf8(env, "berth.sha256", NAPI_AUTO_LENGTH, &name);
  CHECK(napi_create_async_work(env, NULL, name, sha_execute, sha_complete, j, &j->work));
  sha->busy = 1;
  CHECK(napi_queue_async_work(env, j->work));
  return promise;
}

static napi_value js_sha256_digest(napi_env env, napi_callback_info info) {
  size_t argc = 1; napi_value argv[1];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  sha_t *sha = get_sha(env, argv[0]);
  if (!sha) return NULL;
  if (sha->busy) { napi_throw_error(env, NULL, "sha256: an update is still running"); return NULL; }
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int mdlen = 0;
  if (EVP_DigestFinal_ex(sha->ctx, md, &mdlen) != 1) { napi_throw_error(env, NULL, "sha256: final failed"); return NULL; }
  char hex[2 * EVP_MAX_MD_SIZE + 1];
  for (unsigned int i = 0; i < mdlen; i++) snprintf(hex + 2 * i, 3, "%02x", md[i]);
  EVP_DigestInit_ex(sha->ctx, EVP_sha256(), NULL); // usable again, from the start
  napi_value out;
  CHECK(napi_create_string_utf8(env, hex, 2 * mdlen, &out));
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

// readFiles(dirFd, names, limit) -> [stats, data, xattrs]: what a walk needs
// of the regular files among a directory's entries, in one call: each name is
// opened relative to the held directory (openat, O_NOFOLLOW, O_NONBLOCK: a
// symlink or fifo swapped in is never followed or waited on), then fstat'ed,
// read whole when it has at most `limit` bytes, and its xattrs listed with
// their values. stats is a BigInt64Array of READ_FILES_FIELDS per name (mode 0
// when the name could not be opened as a regular file and read: the caller
// looks again the ordinary way); data[i] is the content or null (too large,
// or failed); xattrs[i] is [[name, value], ...] or null when there are none.
#define READ_FILES_FIELDS 10

static napi_value read_files_xattrs(napi_env env, int fd) {
  char names[65536];
  ssize_t n = flistxattr(fd, names, sizeof names);
  napi_value out;
  if (n <= 0) { napi_get_null(env, &out); return out; }
  napi_create_array(env, &out);
  uint32_t idx = 0;
  static __thread char value[65536];
  for (ssize_t off = 0; off < n; ) {
    const char *name = names + off;
    size_t l = strlen(name);
    off += (ssize_t)l + 1;
    ssize_t vl = fgetxattr(fd, name, value, sizeof value);
    if (vl < 0) continue; // removed meanwhile, or unreadable: as if absent
    napi_value pair, k, v;
    void *vd = NULL;
    napi_create_array_with_length(env, 2, &pair);
    napi_create_string_utf8(env, name, l, &k);
    napi_create_buffer_copy(env, (size_t)vl, value, &vd, &v);
    napi_set_element(env, pair, 0, k);
    napi_set_element(env, pair, 1, v);
    napi_set_element(env, out, idx++, pair);
  }
  if (idx == 0) napi_get_null(env, &out);
  return out;
}

static napi_value js_read_files(napi_env env, napi_callback_info info) {
  size_t argc = 3; napi_value argv[3];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  int32_t dirfd = -1;
  double limit = 0;
  uint32_t n = 0;
  CHECK(napi_get_value_int32(env, argv[0], &dirfd));
  CHECK(napi_get_array_length(env, argv[1], &n));
  CHECK(napi_get_value_double(env, argv[2], &limit));
  napi_value ab, stats, data, xattrs, null_v, out;
  void *abdata = NULL;
  CHECK(napi_create_arraybuffer(env, (size_t)n * READ_FILES_FIELDS * 8, &abdata, &ab));
  memset(abdata, 0, (size_t)n * READ_FILES_FIELDS * 8);
  CHECK(napi_create_typedarray(env, napi_bigint64_array, (size_t)n * READ_FILES_FIELDS, ab, 0, &stats));
  CHECK(napi_create_array_with_length(env, n, &data));
  CHECK(napi_create_array_with_length(env, n, &xattrs));
  napi_get_null(env, &null_v);
  int64_t *st = abdata;
  for (uint32_t i = 0; i < n; i++) {
    napi_value name_v, content = null_v, xa = null_v;
    char name[1024];
    size_t nl = 0;
    int64_t *f = st + (size_t)i * READ_FILES_FIELDS;
    if (napi_get_element(env, argv[1], i, &name_v) != napi_ok ||
        napi_get_value_string_utf8(env, name_v, name, sizeof name, &nl) != napi_ok || nl >= sizeof name - 1) goto next;
    int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) goto next;
    struct stat s;
    if (fstat(fd, &s) != 0 || !S_ISREG(s.st_mode)) { close(fd); goto next; }
    if ((double)s.st_size <= limit) {
      void *buf = NULL;
      if (napi_create_buffer(env, (size_t)s.st_size, &buf, &content) != napi_ok) { close(fd); content = null_v; goto next; }
      for (off_t got = 0; got < s.st_size; ) {
        ssize_t r = pread(fd, (char *)buf + got, (size_t)(s.st_size - got), got);
        if (r <= 0) { close(fd); content = null_v; goto next; } // shrank, or failed: looked at again by the caller
        got += r;
      }
    }
    xa = read_files_xattrs(env, fd);
    close(fd);
    f[0] = (int64_t)s.st_ino; f[1] = (int64_t)s.st_dev; f[2] = (int64_t)s.st_mode; f[3] = (int64_t)s.st_nlink;
    f[4] = (int64_t)s.st_uid; f[5] = (int64_t)s.st_gid; f[6] = (int64_t)s.st_rdev; f[7] = (int64_t)s.st_size;
    f[8] = (int64_t)s.st_mtim.tv_sec; f[9] = (int64_t)s.st_mtim.tv_nsec;
  next:
    napi_set_element(env, data, i, content);
    napi_set_element(env, xattrs, i, xa);
  }
  CHECK(napi_create_array_with_length(env, 3, &out));
  napi_set_element(env, out, 0, stats);
  napi_set_element(env, out, 1, data);
  napi_set_element(env, out, 2, xattrs);
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

// addInodeFlags(dir, flags): ORs `flags` into a directory's inode flags
// (FS_IOC_GETFLAGS / FS_IOC_SETFLAGS, what chattr does). Returns false when the
// filesystem keeps no such flags (ENOTTY, EOPNOTSUPP, EINVAL); throws otherwise.
static napi_value js_add_inode_flags(napi_env env, napi_callback_info info) {
  size_t argc = 2; napi_value argv[2];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  char *path = get_string(env, argv[0]);
  int32_t add = 0;
  napi_get_value_int32(env, argv[1], &add);
  int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) { napi_value out = throw_errno(env, "open", path, errno); free(path); return out; }
  int flags = 0, r = ioctl(fd, FS_IOC_GETFLAGS, &flags);
  if (r == 0 && (flags & add) != add) { flags |= add; r = ioctl(fd, FS_IOC_SETFLAGS, &flags); }
  int e = errno;
  close(fd);
  napi_value out;
  if (r != 0 && e != ENOTTY && e != EOPNOTSUPP && e != EINVAL) out = throw_errno(env, "ioctl", path, e);
  else napi_get_boolean(env, r == 0, &out);
  free(path);
  return out;
}

// unreadBytes(fd): what the peer of a connected socket has not read yet
// (SIOCOUTQ; for a unix socket, 0 once the peer has read all we sent).
static napi_value js_unread_bytes(napi_env env, napi_callback_info info) {
  size_t argc = 1; napi_value argv[1];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  int32_t fd = -1;
  napi_get_value_int32(env, argv[0], &fd);
  int n = 0;
  if (ioctl(fd, SIOCOUTQ, &n) != 0) return throw_errno(env, "ioctl", NULL, errno);
  napi_value out;
  napi_create_int32(env, n, &out);
  return out;
}

// peerClosed(fd): whether the peer of a connected socket has closed it, not
// just shut its sending side down. A unix socket sees POLLHUP once the peer's
// end is released; after only shutdown(SHUT_WR) it sees POLLRDHUP alone.
static napi_value js_peer_closed(napi_env env, napi_callback_info info) {
  size_t argc = 1; napi_value argv[1];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  int32_t fd = -1;
  napi_get_value_int32(env, argv[0], &fd);
  struct pollfd p = { .fd = fd, .events = POLLRDHUP, .revents = 0 };
  if (poll(&p, 1, 0) < 0) return throw_errno(env, "poll", NULL, errno);
  napi_value out;
  napi_get_boolean(env, (p.revents & (POLLHUP | POLLERR | POLLNVAL)) != 0, &out);
  return out;
}

// isMountRoot(path) -> true/false, or null where the kernel cannot say (statx's
// STATX_ATTR_MOUNT_ROOT, Linux 5.8). The last component is not followed.
static napi_value js_is_mount_root(napi_env env, napi_callback_info info) {
  size_t argc = 1; napi_value argv[1];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  char *path = get_string(env, argv[0]);
  if (!path) { napi_throw_type_error(env, NULL, "path must be a string"); return NULL; }
  struct statx stx;
  int r = statx(AT_FDCWD, path, AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT, STATX_TYPE, &stx);
  int e = errno;
  napi_value out;
  if (r != 0 && e == ENOENT) napi_get_boolean(env, false, &out);
  else if (r != 0) out = throw_errno(env, "statx", path, e);
  else if (!(stx.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT)) napi_get_null(env, &out);
  else napi_get_boolean(env, (stx.stx_attributes & STATX_ATTR_MOUNT_ROOT) != 0, &out);
  free(path);
  return out;
}

// ------------------------------------------------------------ processes
// sealedCopy(path) -> fd: the file's bytes in a memfd sealed against any
// change (write, grow, shrink, further seals), close-on-exec. runc treats an
// executable that is such a memfd as its own safe copy (runc 1.1's
// cloned_binary.c: F_GET_SEALS == SEAL|SHRINK|GROW|WRITE) and skips making one.
static napi_value js_sealed_copy(napi_env env, napi_callback_info info) {
  size_t argc = 1; napi_value argv[1];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  char *path = get_string(env, argv[0]);
  if (!path) { napi_throw_type_error(env, NULL, "path must be a string"); return NULL; }
  const char *failed = "open";
  int e = 0, out = -1;
  int in = open(path, O_RDONLY | O_CLOEXEC);
  struct stat st;
  if (in < 0) { e = errno; goto done; }
  failed = "fstat";
  if (fstat(in, &st) != 0) { e = errno; goto done; }
  failed = "memfd_create";
  out = memfd_create("runc_cloned:/proc/self/exe", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (out < 0) { e = errno; goto done; }
  failed = "sendfile";
  for (off_t sent = 0; sent < st.st_size;) {
    ssize_t n = sendfile(out, in, NULL, st.st_size - sent);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) { e = n < 0 ? errno : EIO; goto done; }
    sent += n;
  }
  failed = "fcntl";
  if (fcntl(out, F_ADD_SEALS, F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE) != 0) e = errno;
done:
  if (in >= 0) close(in);
  if (e != 0 && out >= 0) { close(out); out = -1; }
  napi_value result;
  if (e != 0) result = throw_errno(env, failed, path, e);
  else napi_create_int32(env, out, &result);
  free(path);
  return result;
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

static napi_value js_x32_abi(napi_env env, napi_callback_info info) {
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
  napi_value out;
  napi_get_boolean(env, runs, &out);
  return out;
}

// pipe() -> [readFd, writeFd], both close-on-exec.
static napi_value js_pipe(napi_env env, napi_callback_info info) {
  (void)info;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return throw_errno(env, "pipe2", NULL, errno);
  napi_value out, r, w;
  napi_create_array_with_length(env, 2, &out);
  napi_create_int32(env, fds[0], &r);
  napi_create_int32(env, fds[1], &w);
  napi_set_element(env, out, 0, r);
  napi_set_element(env, out, 1, w);
  return out;
}

typedef struct {
  uv_poll_t poll;
  int pidfd;
  pid_t pid;
  napi_env env;
  napi_ref callback;
  napi_async_context async;
} child_t;

static void child_on_close(uv_handle_t *handle) {
  child_t *c = handle->data;
  close(c->pidfd);
  napi_delete_reference(c->env, c->callback);
  napi_async_destroy(c->env, c->async);
  free(c);
}

static void child_poll_cb(uv_poll_t *handle, int status, int events) {
  (void)status; (void)events;
  child_t *c = handle->data;
  int st = 0;
  pid_t r;
  do r = waitpid(c->pid, &st, WNOHANG); while (r < 0 && errno == EINTR);
  if (r == 0) return; // not yet
  uv_poll_stop(handle);
  napi_env env = c->env;
  napi_handle_scope scope;
  napi_open_handle_scope(env, &scope);
  napi_value cb, recv, argv[2], result;
  napi_get_null(env, &argv[0]);
  napi_get_null(env, &argv[1]);
  if (r == c->pid && WIFEXITED(st)) napi_create_int32(env, WEXITSTATUS(st), &argv[0]);
  if (r == c->pid && WIFSIGNALED(st)) napi_create_int32(env, WTERMSIG(st), &argv[1]);
  if (napi_get_reference_value(env, c->callback, &cb) == napi_ok && cb != NULL) {
    napi_get_global(env, &recv);
    if (napi_make_callback(env, c->async, recv, cb, 2, argv, &result) != napi_ok) {
      bool pending = false;
      napi_is_exception_pending(env, &pending);
      if (pending) {
        napi_value err;
        napi_get_and_clear_last_exception(env, &err);
        napi_fatal_exception(env, err);
      }
    }
  }
  napi_close_handle_scope(env, scope);
  uv_close((uv_handle_t *)handle, child_on_close);
}

static char **get_string_array(napi_env env, napi_value arr) {
  uint32_t n = 0;
  if (napi_get_array_length(env, arr, &n) != napi_ok) return NULL;
  char **out = calloc(n + 1, sizeof *out);
  for (uint32_t i = 0; out && i < n; i++) {
    napi_value v;
    napi_get_element(env, arr, i, &v);
    out[i] = get_string(env, v);
  }
  return out;
}

static void free_string_array(char **a) {
  for (char **p = a; p && *p; p++) free(*p);
  free(a);
}

// spawnDetached(file, argv, envp, cwd, fds, onExit) -> pid. The child runs in
// a session of its own, in cwd, with fds[i] as its fd i (-1: /dev/null), with
// default signal dispositions and no blocked signals. posix_spawn clones
// without copying berthd's page tables (fork copies them: ~2 ms at ~100 MiB).
// onExit(code, signal) comes once the child ends: berthd reaps it through a
// pidfd watched on the loop (libuv waits only for the children it spawned).
static napi_value js_spawn_detached(napi_env env, napi_callback_info info) {
  size_t argc = 6; napi_value argv[6];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  char *file = get_string(env, argv[0]);
  char **args = get_string_array(env, argv[1]);
  char **envp = get_string_array(env, argv[2]);
  char *cwd = get_string(env, argv[3]);
  uint32_t nfds = 0;
  napi_get_array_length(env, argv[4], &nfds);
  int moved[64];
  napi_value out = NULL;
  if (!file || !args || !envp || !cwd || nfds > 64) {
    napi_throw_type_error(env, NULL, "spawnDetached: bad arguments");
    goto done_strings;
  }
  // Sources above every target first, so that no dup2 overwrites a source still to be used.
  for (uint32_t i = 0; i < nfds; i++) {
    napi_value v; int32_t fd = -1;
    napi_get_element(env, argv[4], i, &v);
    napi_get_value_int32(env, v, &fd);
    moved[i] = fd >= 0 ? fcntl(fd, F_DUPFD_CLOEXEC, 64) : -1;
  }
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t at;
  posix_spawn_file_actions_init(&fa);
  posix_spawnattr_init(&at);
  for (uint32_t i = 0; i < nfds; i++) {
    if (moved[i] >= 0) posix_spawn_file_actions_adddup2(&fa, moved[i], (int)i);
    else posix_spawn_file_actions_addopen(&fa, (int)i, "/dev/null", O_RDWR, 0);
  }
  posix_spawn_file_actions_addchdir_np(&fa, cwd);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&at, &none);
  posix_spawnattr_setsigdefault(&at, &all);
  posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  pid_t pid = 0;
  int err = posix_spawn(&pid, file, &fa, &at, args, envp);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&at);
  for (uint32_t i = 0; i < nfds; i++) if (moved[i] >= 0) close(moved[i]);
  if (err != 0) { out = throw_errno(env, "spawn", file, err); goto done_strings; }
  int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
  if (pidfd < 0) {
    int e = errno;
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    out = throw_errno(env, "pidfd_open", file, e);
    goto done_strings;
  }
  child_t *c = calloc(1, sizeof *c);
  uv_loop_t *loop;
  napi_get_uv_event_loop(env, &loop);
  c->pidfd = pidfd;
  c->pid = pid;
  c->env = env;
  uv_poll_init(loop, &c->poll, pidfd);
  c->poll.data = c;
  napi_create_reference(env, argv[5], 1, &c->callback);
  napi_value name;
  napi_create_string_utf8(env, "berth.child", NAPI_AUTO_LENGTH, &name);
  napi_async_init(env, NULL, name, &c->async);
  uv_poll_start(&c->poll, UV_READABLE, child_poll_cb);
  napi_create_int32(env, pid, &out);
done_strings:
  free(file);
  free(cwd);
  free_string_array(args);
  free_string_array(envp);
  return out;
}

// ------------------------------------------------------------ seqpacket client
// A SOCK_SEQPACKET unix socket client (conmon's attach socket; Node's net has
// only SOCK_STREAM), driven by a uv_poll_t on Node's own loop: readiness wakes
// it, nothing polls. JS gets one callback, onEvent(type, value):
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
  napi_env env;
  napi_ref callback;
  napi_async_context async;
} seqpacket_t;

static char sp_buf[SP_PACKET_MAX];

static void sp_emit(seqpacket_t *sp, int type, napi_value value) {
  napi_env env = sp->env;
  napi_value cb, recv, argv[2], result;
  if (sp->closing || napi_get_reference_value(env, sp->callback, &cb) != napi_ok || cb == NULL) return;
  napi_get_global(env, &recv);
  napi_create_int32(env, type, &argv[0]);
  if (value) argv[1] = value; else napi_get_undefined(env, &argv[1]);
  if (napi_make_callback(env, sp->async, recv, cb, 2, argv, &result) != napi_ok) {
    bool pending = false;
    napi_is_exception_pending(env, &pending);
    if (pending) {
      napi_value err;
      napi_get_and_clear_last_exception(env, &err);
      napi_fatal_exception(env, err);  // to process 'uncaughtException', as Node's own callbacks do
    }
  }
}

static void sp_poll_cb(uv_poll_t *handle, int status, int events);

static void sp_update(seqpacket_t *sp) {
  if (sp->closing) return;
  int ev = (sp->reading && !sp->eof && !sp->failed ? UV_READABLE : 0) | (sp->want_write && !sp->failed ? UV_WRITABLE : 0);
  if (ev) uv_poll_start(&sp->poll, ev, sp_poll_cb);
  else uv_poll_stop(&sp->poll);
}

static void sp_emit_simple(seqpacket_t *sp, int type, const char *code) {
  napi_handle_scope scope;
  napi_open_handle_scope(sp->env, &scope);
  napi_value v = NULL;
  if (code) napi_create_string_utf8(sp->env, code, NAPI_AUTO_LENGTH, &v);
  sp_emit(sp, type, v);
  napi_close_handle_scope(sp->env, scope);
}

static void sp_fail(seqpacket_t *sp, int err) {
  sp->failed = 1;
  sp_update(sp);
  sp_emit_simple(sp, SP_ERROR, errno_code(err));
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
  for (int i = 0; (events & UV_READABLE) && i < SP_BURST && sp->reading && !sp->closing && !sp->eof && !sp->failed; i++) {
    ssize_t n = recv(sp->fd, sp_buf, sizeof sp_buf, MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (n < 0) {
      sp_fail(sp, errno);
      break;
    }
    if (n == 0) {
      sp->eof = 1;
      sp_update(sp);
      sp_emit_simple(sp, SP_END, NULL);
      break;
    }
    napi_handle_scope scope;
    napi_open_handle_scope(sp->env, &scope);
    napi_value buf;
    void *dst;
    if (napi_create_buffer_copy(sp->env, (size_t)n, sp_buf, &dst, &buf) == napi_ok) sp_emit(sp, SP_DATA, buf);
    napi_close_handle_scope(sp->env, scope);
  }
}

static void sp_free_if_done(seqpacket_t *sp) {
  if (sp->handle_closed && sp->finalized) free(sp);
}

static void sp_on_close(uv_handle_t *handle) {
  seqpacket_t *sp = handle->data;
  // Released here, never inside one of our own callbacks (close() may be called from one).
  napi_delete_reference(sp->env, sp->callback);
  napi_async_destroy(sp->env, sp->async);
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
  (void)env; (void)hint;
  seqpacket_t *sp = data;
  sp->finalized = 1;
  if (!sp->closing) sp_close(sp);
  else sp_free_if_done(sp);
}

static seqpacket_t *sp_get(napi_env env, napi_value v) {
  seqpacket_t *sp = NULL;
  if (napi_get_value_external(env, v, (void **)&sp) != napi_ok || sp == NULL) {
    napi_throw_type_error(env, NULL, "not a seqpacket handle");
    return NULL;
  }
  if (sp->closing) {
    throw_errno(env, "seqpacket", NULL, EBADF);
    return NULL;
  }
  return sp;
}

// seqpacketConnect(path, onEvent) -> handle. Unix connects complete at once (or fail).
static napi_value js_seqpacket_connect(napi_env env, napi_callback_info info) {
  size_t argc = 2; napi_value argv[2];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  char *path = get_string(env, argv[0]);
  if (!path) { napi_throw_type_error(env, NULL, "path must be a string"); return NULL; }
  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  if (strlen(path) >= sizeof addr.sun_path) { napi_value r = throw_errno(env, "connect", path, ENAMETOOLONG); free(path); return r; }
  strcpy(addr.sun_path, path);
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) { napi_value r = throw_errno(env, "socket", path, errno); free(path); return r; }
  int r;
  do r = connect(fd, (struct sockaddr *)&addr, sizeof addr); while (r < 0 && errno == EINTR);
  if (r < 0) {
    int e = errno;
    close(fd);
    napi_value out = throw_errno(env, "connect", path, e);
    free(path);
    return out;
  }
  free(path);
  seqpacket_t *sp = calloc(1, sizeof *sp);
  if (!sp) { close(fd); napi_throw_error(env, "ENOMEM", "out of memory"); return NULL; }
  sp->fd = fd;
  sp->env = env;
  uv_loop_t *loop;
  napi_value name, handle;
  if (napi_get_uv_event_loop(env, &loop) != napi_ok || uv_poll_init(loop, &sp->poll, fd) != 0) {
    close(fd); free(sp);
    napi_throw_error(env, NULL, "cannot watch the socket");
    return NULL;
  }
  sp->poll.data = sp;
  napi_create_reference(env, argv[1], 1, &sp->callback);
  napi_create_string_utf8(env, "berth.seqpacket", NAPI_AUTO_LENGTH, &name);
  napi_async_init(env, NULL, name, &sp->async);
  CHECK(napi_create_external(env, sp, sp_finalize, NULL, &handle));
  return handle;
}

// seqpacketSetReading(handle, bool)
static napi_value js_seqpacket_set_reading(napi_env env, napi_callback_info info) {
  size_t argc = 2; napi_value argv[2];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  seqpacket_t *sp = sp_get(env, argv[0]);
  if (!sp) return NULL;
  bool on = false;
  napi_get_value_bool(env, argv[1], &on);
  sp->reading = on;
  sp_update(sp);
  return undefined(env);
}

// seqpacketWrite(handle, Buffer) -> true when sent, false when the socket is full (SP_WRITABLE follows).
static napi_value js_seqpacket_write(napi_env env, napi_callback_info info) {
  size_t argc = 2; napi_value argv[2];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  seqpacket_t *sp = sp_get(env, argv[0]);
  if (!sp) return NULL;
  void *data = NULL; size_t len = 0;
  CHECK(napi_get_buffer_info(env, argv[1], &data, &len));
  ssize_t n;
  do n = send(sp->fd, data, len, MSG_DONTWAIT | MSG_NOSIGNAL); while (n < 0 && errno == EINTR);
  napi_value out;
  if (n >= 0) {
    napi_get_boolean(env, true, &out);
    return out;
  }
  if (errno != EAGAIN && errno != EWOULDBLOCK) return throw_errno(env, "send", NULL, errno);
  sp->want_write = 1;
  sp_update(sp);
  napi_get_boolean(env, false, &out);
  return out;
}

// seqpacketShutdown(handle): no more writes (the peer reads end-of-file).
static napi_value js_seqpacket_shutdown(napi_env env, napi_callback_info info) {
  size_t argc = 1; napi_value argv[1];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  seqpacket_t *sp = sp_get(env, argv[0]);
  if (!sp) return NULL;
  if (shutdown(sp->fd, SHUT_WR) < 0 && errno != ENOTCONN) return throw_errno(env, "shutdown", NULL, errno);
  return undefined(env);
}

// seqpacketClose(handle): stops watching and closes; no event follows. Idempotent.
static napi_value js_seqpacket_close(napi_env env, napi_callback_info info) {
  size_t argc = 1; napi_value argv[1];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  seqpacket_t *sp = NULL;
  if (napi_get_value_external(env, argv[0], (void **)&sp) != napi_ok || sp == NULL) {
    napi_throw_type_error(env, NULL, "not a seqpacket handle");
    return NULL;
  }
  sp_close(sp);
  return undefined(env);
}

static napi_value init(napi_env env, napi_value exports) {
  napi_property_descriptor props[] = {
    {"mount", NULL, js_mount, NULL, NULL, NULL, napi_default, NULL},
    {"umount2", NULL, js_umount2, NULL, NULL, NULL, napi_default, NULL},
    {"umount2Async", NULL, js_umount2_async, NULL, NULL, NULL, napi_default, NULL},
    {"mknod", NULL, js_mknod, NULL, NULL, NULL, napi_default, NULL},
    {"lsetxattr", NULL, js_lsetxattr, NULL, NULL, NULL, napi_default, NULL},
    {"lgetxattr", NULL, js_lgetxattr, NULL, NULL, NULL, napi_default, NULL},
    {"llistxattr", NULL, js_llistxattr, NULL, NULL, NULL, napi_default, NULL},
    {"readFiles", NULL, js_read_files, NULL, NULL, NULL, napi_default, NULL},
    {"flock", NULL, js_flock, NULL, NULL, NULL, napi_default, NULL},
    {"addInodeFlags", NULL, js_add_inode_flags, NULL, NULL, NULL, napi_default, NULL},
    {"pipe", NULL, js_pipe, NULL, NULL, NULL, napi_default, NULL},
    {"isMountRoot", NULL, js_is_mount_root, NULL, NULL, NULL, napi_default, NULL},
    {"x32Abi", NULL, js_x32_abi, NULL, NULL, NULL, napi_default, NULL},
    {"sealedCopy", NULL, js_sealed_copy, NULL, NULL, NULL, napi_default, NULL},
    {"sha256New", NULL, js_sha256_new, NULL, NULL, NULL, napi_default, NULL},
    {"sha256Update", NULL, js_sha256_update, NULL, NULL, NULL, napi_default, NULL},
    {"sha256Digest", NULL, js_sha256_digest, NULL, NULL, NULL, napi_default, NULL},
    {"unreadBytes", NULL, js_unread_bytes, NULL, NULL, NULL, napi_default, NULL},
    {"peerClosed", NULL, js_peer_closed, NULL, NULL, NULL, napi_default, NULL},
    {"spawnDetached", NULL, js_spawn_detached, NULL, NULL, NULL, napi_default, NULL},
    {"seqpacketConnect", NULL, js_seqpacket_connect, NULL, NULL, NULL, napi_default, NULL},
    {"seqpacketSetReading", NULL, js_seqpacket_set_reading, NULL, NULL, NULL, napi_default, NULL},
    {"seqpacketWrite", NULL, js_seqpacket_write, NULL, NULL, NULL, napi_default, NULL},
    {"seqpacketShutdown", NULL, js_seqpacket_shutdown, NULL, NULL, NULL, napi_default, NULL},
    {"seqpacketClose", NULL, js_seqpacket_close, NULL, NULL, NULL, napi_default, NULL},
  };
  napi_define_properties(env, exports, sizeof props / sizeof props[0], props);
  napi_value fields;
  napi_create_int32(env, READ_FILES_FIELDS, &fields);
  napi_set_named_property(env, exports, "READ_FILES_FIELDS", fields);
  return exports;
}

NAPI_MODULE(NODE_GYP_MODULE_NAME, init)
