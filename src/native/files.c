// Files: a directory's regular files read whole in one call (for walks),
// mknod, flock and inode flags.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "addon.h"
#include "args.h"

// [[name, value], ...] for the open file's xattrs, or null when there are none.
static napi_value read_files_xattrs(napi_env env, int fd) {
  static char names[65536], value[65536];
  ssize_t n = flistxattr(fd, names, sizeof names);
  if (n <= 0) return js_null(env);
  napi_value out;
  napi_create_array(env, &out);
  uint32_t idx = 0;
  for (ssize_t off = 0; off < n;) {
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
  return idx == 0 ? js_null(env) : out;
}

// Reads the whole of fd (st_size bytes) into a new Buffer; NULL when it fails or shrank meanwhile.
static napi_value read_whole(napi_env env, int fd, off_t size) {
  napi_value content;
  void *buf = NULL;
  if (napi_create_buffer(env, (size_t)size, &buf, &content) != napi_ok) return NULL;
  for (off_t got = 0; got < size;) {
    ssize_t r = pread(fd, (char *)buf + got, (size_t)(size - got), got);
    if (r <= 0) return NULL;
    got += r;
  }
  return content;
}

static void read_files_stat(int64_t *f, const struct stat *s) {
  f[0] = (int64_t)s->st_ino;
  f[1] = (int64_t)s->st_dev;
  f[2] = (int64_t)s->st_mode;
  f[3] = (int64_t)s->st_nlink;
  f[4] = (int64_t)s->st_uid;
  f[5] = (int64_t)s->st_gid;
  f[6] = (int64_t)s->st_rdev;
  f[7] = (int64_t)s->st_size;
  f[8] = (int64_t)s->st_mtim.tv_sec;
  f[9] = (int64_t)s->st_mtim.tv_nsec;
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
BINDING(js_read_files) {
  ARGS(a, 3);
  int32_t dirfd = args_int32(&a, 0);
  double limit = args_double(&a, 2);
  uint32_t n = 0;
  napi_value ab, stats, data, xattrs, out;
  void *abdata = NULL;
  if (napi_get_array_length(env, a.argv[1], &n) != napi_ok ||
      napi_create_arraybuffer(env, (size_t)n * READ_FILES_FIELDS * 8, &abdata, &ab) != napi_ok) {
    napi_throw_type_error(env, NULL, "readFiles: names must be an array");
    return NULL;
  }
  memset(abdata, 0, (size_t)n * READ_FILES_FIELDS * 8);
  napi_create_typedarray(env, napi_bigint64_array, (size_t)n * READ_FILES_FIELDS, ab, 0, &stats);
  napi_create_array_with_length(env, n, &data);
  napi_create_array_with_length(env, n, &xattrs);
  int64_t *st = abdata;
  for (uint32_t i = 0; i < n; i++) {
    napi_value name_v, content = js_null(env), xa = js_null(env);
    char name[1024];
    size_t nl = 0;
    int fd = -1;
    struct stat s;
    if (napi_get_element(env, a.argv[1], i, &name_v) != napi_ok ||
        napi_get_value_string_utf8(env, name_v, name, sizeof name, &nl) != napi_ok || nl >= sizeof name - 1) {
      goto next;
    }
    fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &s) != 0 || !S_ISREG(s.st_mode)) goto next;
    if ((double)s.st_size <= limit) {
      content = read_whole(env, fd, s.st_size);
      if (!content) { // looked at again by the caller
        content = js_null(env);
        goto next;
      }
    }
    xa = read_files_xattrs(env, fd);
    read_files_stat(st + (size_t)i * READ_FILES_FIELDS, &s);
  next:
    if (fd >= 0) close(fd);
    napi_set_element(env, data, i, content);
    napi_set_element(env, xattrs, i, xa);
  }
  napi_create_array_with_length(env, 3, &out);
  napi_set_element(env, out, 0, stats);
  napi_set_element(env, out, 1, data);
  napi_set_element(env, out, 2, xattrs);
  return out;
}

// Writes all of buf, going on after a short write or an interrupted one.
static int write_all(int fd, const char *buf, size_t len) {
  while (len > 0) {
    ssize_t w = write(fd, buf, len);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return -1;
    buf += w;
    len -= (size_t)w;
  }
  return 0;
}

// Seconds as a timespec, rounded as libuv rounds them for Node's futimes
// (whole microseconds), so a file made here has the times one made by fs has.
static struct timespec to_timespec(double t) {
  struct timespec ts;
  ts.tv_sec = (time_t)t;
  ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
  ts.tv_nsec -= ts.tv_nsec % 1000;
  if (ts.tv_nsec < 0) {
    ts.tv_nsec += 1000000000L;
    ts.tv_sec -= 1;
  }
  return ts;
}

// createFileAt(dirFd, name, chunks, uid, gid, mode, mtime) -> bytes written: a
// new regular file `name` in the held directory, made as an extraction makes
// one, in one call instead of six: openat with O_CREAT|O_EXCL|O_NOFOLLOW (never
// following, never opening what is there: EEXIST is the caller's to handle),
// the chunks (Buffers) written, then owner, mode and times through the
// descriptor, in that order (chown clears setuid bits), and closed. `name` is
// one component. On a failure after the open the file is left, half made, as
// the extraction leaves any file it fails on.
BINDING(js_create_file_at) {
  ARGS(a, 7);
  int dirfd = args_int32(&a, 0);
  const char *name = args_path(&a, 1);
  if (!name) return args_done(&a, NULL);
  if (!*name || strchr(name, '/') || !strcmp(name, ".") || !strcmp(name, ".."))
    return args_done(&a, throw_errno(env, "openat", name, EINVAL));
  uint32_t n = 0;
  if (napi_get_array_length(env, a.argv[2], &n) != napi_ok) {
    napi_throw_type_error(env, NULL, "createFileAt: chunks must be an array of Buffers");
    return args_done(&a, NULL);
  }
  int fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return args_done(&a, throw_errno(env, "openat", name, errno));
  struct timespec times[2];
  times[0] = times[1] = to_timespec(args_double(&a, 6));
  uid_t uid = (uid_t)args_uint32(&a, 3);
  gid_t gid = (gid_t)args_uint32(&a, 4);
  mode_t mode = (mode_t)(args_uint32(&a, 5) & 07777);
  const char *step = NULL;
  int e = 0;
  double total = 0;
  for (uint32_t i = 0; i < n && !step; i++) {
    napi_value el;
    void *data = NULL;
    size_t len = 0;
    if (napi_get_element(env, a.argv[2], i, &el) != napi_ok || napi_get_buffer_info(env, el, &data, &len) != napi_ok) {
      step = "write";
      e = EINVAL;
    } else if (write_all(fd, data, len) != 0) {
      step = "write";
      e = errno;
    }
    total += (double)len;
  }
  if (!step && fchown(fd, uid, gid) != 0) step = "fchown", e = errno;
  if (!step && fchmod(fd, mode) != 0) step = "fchmod", e = errno;
  if (!step && futimens(fd, times) != 0) step = "futime", e = errno;
  if (close(fd) != 0 && !step) step = "close", e = errno;
  napi_value out = NULL;
  if (step) out = throw_errno(env, step, name, e);
  else napi_create_double(env, total, &out);
  return args_done(&a, out);
}

// mknod(path, mode, major, minor)
BINDING(js_mknod) {
  ARGS(a, 4);
  const char *path = args_string(&a, 0);
  int r = mknod(path, args_uint32(&a, 1), makedev(args_uint32(&a, 2), args_uint32(&a, 3)));
  int e = errno;
  return args_done(&a, r == 0 ? js_undefined(env) : throw_errno(env, "mknod", path, e));
}

// flock(fd, operation): for the daemon's data-root lock, released by the kernel
// when the process dies, however it dies.
BINDING(js_flock) {
  ARGS(a, 2);
  if (flock(args_int32(&a, 0), args_int32(&a, 1)) != 0) return throw_errno(env, "flock", NULL, errno);
  return js_undefined(env);
}

// addInodeFlags(dir, flags): ORs `flags` into a directory's inode flags
// (FS_IOC_GETFLAGS / FS_IOC_SETFLAGS, what chattr does). Returns false when the
// filesystem keeps no such flags (ENOTTY, EOPNOTSUPP, EINVAL); throws otherwise.
BINDING(js_add_inode_flags) {
  ARGS(a, 2);
  const char *path = args_string(&a, 0);
  int add = args_int32(&a, 1);
  int fd = path ? open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
  if (fd < 0) return args_done(&a, throw_errno(env, "open", path, path ? errno : EINVAL));
  int flags = 0, r = ioctl(fd, FS_IOC_GETFLAGS, &flags);
  if (r == 0 && (flags & add) != add) {
    flags |= add;
    r = ioctl(fd, FS_IOC_SETFLAGS, &flags);
  }
  int e = errno;
  close(fd);
  napi_value out;
  if (r != 0 && e != ENOTTY && e != EOPNOTSUPP && e != EINVAL) out = throw_errno(env, "ioctl", path, e);
  else out = js_bool(env, r == 0);
  return args_done(&a, out);
}
