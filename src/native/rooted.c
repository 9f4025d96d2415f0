// Resolving paths inside a container's root (docker cp), never outside it.
//
// openat2(RESOLVE_IN_ROOT) resolves a path from a directory descriptor as if
// that directory were `/`: absolute symlinks and `..` stay in it, and with
// RESOLVE_NO_MAGICLINKS a /proc/<pid>/root-style link cannot lead out either.
// The kernel does it in one walk, so a symlink swapped in by the container
// between our calls can only ever lead elsewhere inside the root
// (CVE-2018-15664 was a path resolved in userspace and then used again).
//
// A container sees its bind mounts (and later volumes) over its rootfs; the
// host does not, they live in the container's mount namespace. rootView makes
// the same picture where only berthd can reach it. Where the kernel lets mounts
// be attached to a detached tree, that is a detached copy of the rootfs mount
// (open_tree OPEN_TREE_CLONE, made private first so nothing attached to it
// propagates to the host's rootfs), each mount attached over it (the target
// opened with openat2 first, then attached through the new mount API, so no
// path is looked up twice); the descriptor of the tree is the view, and the
// tree (with its mounts) goes when the last copy of it is closed. Elsewhere a
// short-lived thread unshares a mount namespace, binds the mounts there,
// detaches every other mount the namespace was copied with, and hands back a
// descriptor of the rootfs in it and one of the namespace itself. The detached
// tree costs a few system calls whatever the host mounts; the namespace costs
// a copy and a detach of every host mount (hundreds on a busy machine).
// Lookups from the rootfs descriptor cross the view's mounts; nothing of it is
// visible on the host.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "addon.h"
#include "args.h"

#ifndef OPEN_TREE_CLONE
#define OPEN_TREE_CLONE 1
#endif
#ifndef MOVE_MOUNT_F_EMPTY_PATH
#define MOVE_MOUNT_F_EMPTY_PATH 0x00000004
#endif
#ifndef MOVE_MOUNT_T_EMPTY_PATH
#define MOVE_MOUNT_T_EMPTY_PATH 0x00000040
#endif
#ifndef MOUNT_ATTR_RDONLY
#define MOUNT_ATTR_RDONLY 0x00000001
#endif
#ifndef AT_RECURSIVE
#define AT_RECURSIVE 0x8000
#endif
#ifndef SYS_open_tree
#define SYS_open_tree 428
#endif
#ifndef SYS_move_mount
#define SYS_move_mount 429
#endif
#ifndef SYS_openat2
#define SYS_openat2 437
#endif
#ifndef SYS_mount_setattr
#define SYS_mount_setattr 442
#endif

struct berth_mount_attr {
  uint64_t attr_set, attr_clr, propagation, userns_fd;
};

static int sys_openat2(int dirfd, const char *path, int flags, mode_t mode, uint64_t resolve) {
  struct open_how how = {.flags = (uint64_t)flags | O_CLOEXEC, .mode = mode, .resolve = resolve};
  int fd;
  do fd = (int)syscall(SYS_openat2, dirfd, path, &how, sizeof how);
  while (fd < 0 && errno == EAGAIN); // a rename elsewhere raced the lookup: the kernel asks for a retry
  return fd;
}

// openat2(dirFd, path, flags, mode, resolve) -> fd (close-on-exec).
BINDING(js_openat2) {
  ARGS(a, 5);
  const char *path = args_path(&a, 1);
  if (!path) return args_done(&a, NULL);
  int fd = sys_openat2(args_int32(&a, 0), path, args_int32(&a, 2), args_uint32(&a, 3), (uint64_t)args_int64(&a, 4));
  int e = errno;
  return args_done(&a, fd >= 0 ? js_int32(env, fd) : throw_errno(env, "openat2", path, e));
}

// readlinkAt(dirFd, name) -> the link's text; name "" reads the link an O_PATH|O_NOFOLLOW fd holds.
BINDING(js_readlink_at) {
  ARGS(a, 2);
  const char *name = args_path(&a, 1);
  if (!name) return args_done(&a, NULL);
  char buf[4096];
  ssize_t n = readlinkat(args_int32(&a, 0), name, buf, sizeof buf);
  int e = errno;
  if (n < 0) return args_done(&a, throw_errno(env, "readlinkat", name, e));
  napi_value out;
  napi_create_string_utf8(env, buf, (size_t)n, &out);
  return args_done(&a, out);
}

typedef struct {
  const char *rootfs;
  char **sources, **targets; // NULL-terminated, same length
  const bool *readonly;
  int root_fd, ns_fd;
  bool detached; // a detached tree rather than a namespace
  int err;
  const char *step, *what;
} view_t;

static void *view_fail(view_t *v, const char *step, const char *what) {
  v->err = errno;
  v->step = step;
  v->what = what;
  if (v->root_fd >= 0) close(v->root_fd);
  if (v->ns_fd >= 0) close(v->ns_fd);
  v->root_fd = v->ns_fd = -1;
  return NULL;
}

#define IN_ROOT (RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS)

// Whether mounts can be attached to a detached tree (Linux 6.15 on): 0 not
// known yet, 1 yes, -1 no (the namespace is used from then on).
static int detached_views = 0;

// Makes a missing mount point inside the root, as the runtime does at start
// (and dockerd for a copy): its missing directories, then a directory, or an
// empty file for a file's mount. Each step is made in the directory the one
// before resolved to (openat2 inside the root), never by a path looked up again.
static int make_target(int root_fd, const char *target, bool dir) {
  char path[4096];
  size_t len = strlen(target);
  if (len == 0 || len >= sizeof path) return errno = EINVAL, -1;
  memcpy(path, target, len + 1);
  int parent = sys_openat2(root_fd, "/", O_PATH | O_DIRECTORY, 0, IN_ROOT);
  for (char *c = path; parent >= 0 && *c;) {
    while (*c == '/') c++;
    if (!*c) break;
    char *end = strchr(c, '/');
    bool last = !end || !end[strspn(end, "/")];
    if (end) *end = '\0';
    int next = sys_openat2(root_fd, path, O_PATH | (last && !dir ? 0 : O_DIRECTORY), 0, IN_ROOT);
    if (next < 0 && errno == ENOENT) {
      int r = last && !dir ? openat(parent, c, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0755)
                           : mkdirat(parent, c, 0755);
      if (r >= 0 && last && !dir) close(r);
      if (r >= 0 || errno == EEXIST)
        next = sys_openat2(root_fd, path, O_PATH | (last && !dir ? 0 : O_DIRECTORY), 0, IN_ROOT);
    }
    int e = errno;
    close(parent);
    errno = e;
    parent = next;
    if (end) *end = '/';
    if (!end) break;
    c = end;
  }
  if (parent < 0) return -1;
  close(parent);
  return 0;
}

// One bind (recursive, like Docker's default) of source over target, target
// resolved inside the root and made when missing (a container never started,
// whose mount points the runtime has not made yet). A source gone, or a target
// that cannot be made (a dangling link on the way), is skipped.
static int view_bind(view_t *v, const char *source, const char *target, bool readonly) {
  struct stat st;
  if (stat(source, &st) != 0) return errno == ENOENT ? 0 : -1;
  int at = sys_openat2(v->root_fd, target, O_PATH, 0, IN_ROOT);
  if (at < 0 && errno == ENOENT && make_target(v->root_fd, target, S_ISDIR(st.st_mode)) == 0)
    at = sys_openat2(v->root_fd, target, O_PATH, 0, IN_ROOT);
  // Still missing: the way there is a dangling link; the copy goes on without this mount.
  if (at < 0) return errno == ENOENT || errno == EEXIST ? 0 : -1;
  int tree = (int)syscall(SYS_open_tree, AT_FDCWD, source, OPEN_TREE_CLONE | AT_RECURSIVE | O_CLOEXEC);
  int r = tree < 0 ? -1 : 0;
  if (r == 0 && readonly) {
    struct berth_mount_attr attr = {.attr_set = MOUNT_ATTR_RDONLY};
    r = (int)syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH | AT_RECURSIVE, &attr, sizeof attr);
  }
  if (r == 0)
    r = (int)syscall(SYS_move_mount, tree, "", at, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH);
  if (r == 0 && v->detached) detached_views = 1;
  int e = errno;
  if (tree >= 0) close(tree);
  close(at);
  errno = e;
  return r;
}

// The mount id of an open file (its fdinfo's mnt_id), or -1.
static int mount_id_of(int fd) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/thread-self/fdinfo/%d", fd);
  FILE *f = fopen(path, "re");
  if (!f) return -1;
  int id = -1;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "mnt_id: %d", &id) == 1) break;
  fclose(f);
  return id;
}

// mountinfo escapes space, tab, newline and backslash as \ooo.
static void unescape_octal(char *s) {
  char *out = s;
  for (; *s; s++) {
    if (s[0] == '\\' && s[1] >= '0' && s[1] <= '7' && s[2] >= '0' && s[2] <= '7' && s[3] >= '0' && s[3] <= '7') {
      *out++ = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 + (s[3] - '0'));
      s += 3;
    } else {
      *out++ = *s;
    }
  }
  *out = '\0';
}

#define VIEW_MAX_MOUNTS 8192

// Detaches, in the new namespace, every mount but the rootfs's own, its
// ancestors and what lies under it: the copy of the host's other mounts
// (other containers' rootfs above all) would otherwise stay alive in it, out
// of reach of the host's unmounts, for as long as the view is open.
static void view_prune(int root_fd) {
  int root_id = mount_id_of(root_fd);
  if (root_id < 0) return;
  int *ids = calloc(VIEW_MAX_MOUNTS, sizeof *ids), *parents = calloc(VIEW_MAX_MOUNTS, sizeof *parents);
  char **points = calloc(VIEW_MAX_MOUNTS, sizeof *points);
  size_t n = 0;
  FILE *f = ids && parents && points ? fopen("/proc/thread-self/mountinfo", "re") : NULL;
  if (!f) goto done;
  char *line = NULL;
  size_t cap = 0;
  while (n < VIEW_MAX_MOUNTS && getline(&line, &cap, f) > 0) {
    char point[4096];
    if (sscanf(line, "%d %d %*s %*s %4095s", &ids[n], &parents[n], point) != 3) continue;
    unescape_octal(point);
    points[n++] = strdup(point);
  }
  free(line);
  fclose(f);
  for (size_t i = 0; i < n; i++) {
    // Kept: the rootfs, its ancestors, and mounts below it (walking up from each to the top).
    bool keep = false;
    for (int id = ids[i], hops = 0; !keep && hops < VIEW_MAX_MOUNTS; hops++) {
      if (id == root_id) keep = true;
      size_t j = 0;
      while (j < n && ids[j] != id) j++;
      if (j == n || parents[j] == id) break;
      id = parents[j];
    }
    for (int id = root_id, hops = 0; !keep && hops < VIEW_MAX_MOUNTS; hops++) {
      if (id == ids[i]) keep = true;
      size_t j = 0;
      while (j < n && ids[j] != id) j++;
      if (j == n || parents[j] == id) break;
      id = parents[j];
    }
    if (!keep) umount2(points[i], MNT_DETACH); // one under a mount already detached is gone with it
  }
  for (size_t i = 0; i < n; i++) free(points[i]);
done:
  free(ids);
  free(parents);
  free(points);
}

// The view as a detached tree: 1 when made (or failed for good: v->err set),
// 0 when this kernel cannot make one (nothing is left open; the caller makes
// a namespace instead).
static int view_detached(view_t *v) {
  int tree = (int)syscall(SYS_open_tree, AT_FDCWD, v->rootfs, OPEN_TREE_CLONE | AT_RECURSIVE | O_CLOEXEC);
  if (tree < 0) return view_fail(v, "open_tree", v->rootfs), 1;
  // The copy would share the host mount's peer group: what is attached to it would show on the host.
  struct berth_mount_attr priv = {.propagation = MS_PRIVATE};
  if (syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH | AT_RECURSIVE, &priv, sizeof priv) != 0) {
    close(tree);
    return 0;
  }
  v->root_fd = tree;
  v->detached = true;
  for (size_t i = 0; v->sources[i] && v->targets[i]; i++) {
    if (view_bind(v, v->sources[i], v->targets[i], v->readonly[i]) == 0) continue;
    if (errno == EINVAL && detached_views == 0) { // this kernel attaches nothing to a detached tree
      close(tree);
      v->root_fd = -1;
      v->detached = false;
      return 0;
    }
    return view_fail(v, "bind", v->targets[i]), 1;
  }
  v->ns_fd = fcntl(tree, F_DUPFD_CLOEXEC, 0);
  if (v->ns_fd < 0) return view_fail(v, "dup", v->rootfs), 1;
  return 1;
}

static void *view_thread(void *arg) {
  view_t *v = arg;
  // Our own namespace, a slave of the host's: nothing mounted here propagates back.
  if (unshare(CLONE_NEWNS) != 0) return view_fail(v, "unshare", NULL);
  if (mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) != 0) return view_fail(v, "mount", "/");
  v->root_fd = open(v->rootfs, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (v->root_fd < 0) return view_fail(v, "open", v->rootfs);
  for (size_t i = 0; v->sources[i] && v->targets[i]; i++) {
    if (view_bind(v, v->sources[i], v->targets[i], v->readonly[i]) != 0) return view_fail(v, "bind", v->targets[i]);
  }
  v->ns_fd = open("/proc/thread-self/ns/mnt", O_RDONLY | O_CLOEXEC);
  if (v->ns_fd < 0) return view_fail(v, "open", "/proc/thread-self/ns/mnt");
  view_prune(v->root_fd);
  return NULL;
}

// rootView(rootfs, sources, targets, readonly, namespace) -> [rootFd, nsFd]:
// rootfs as a container sees it, its mounts bound over it, in a detached tree
// (or with `namespace`, or where the kernel has no such trees, a mount
// namespace of its own) that lives as long as either descriptor is open.
BINDING(js_root_view) {
  ARGS(a, 5);
  const char *rootfs = args_path(&a, 0);
  char **sources = args_strings(&a, 1), **targets = args_strings(&a, 2);
  uint32_t n = 0;
  bool *readonly = NULL;
  napi_value out = NULL;
  if (!rootfs || !sources || !targets || napi_get_array_length(env, a.argv[3], &n) != napi_ok) {
    if (rootfs) napi_throw_type_error(env, NULL, "rootView: rootfs, sources, targets, readonly");
    goto done;
  }
  readonly = calloc(n + 1, sizeof *readonly);
  for (uint32_t i = 0; i < n; i++) {
    napi_value el;
    if (napi_get_element(env, a.argv[3], i, &el) == napi_ok) napi_get_value_bool(env, el, &readonly[i]);
  }
  view_t v = {.rootfs = rootfs, .sources = sources, .targets = targets, .readonly = readonly, .root_fd = -1, .ns_fd = -1};
  bool made = false;
  if (detached_views >= 0 && !args_bool(&a, 4)) {
    made = view_detached(&v);
    if (!made) detached_views = -1; // settled the other way by the first mount attached (view_bind)
  }
  if (!made) {
    pthread_t t;
    int e = pthread_create(&t, NULL, view_thread, &v);
    if (e == 0) pthread_join(t, NULL);
    else v.err = e, v.step = "pthread_create";
  }
  if (v.root_fd < 0) out = throw_errno(env, v.step, v.what, v.err);
  else {
    int fds[2] = {v.root_fd, v.ns_fd};
    out = js_fd_pair(env, fds);
  }
done:
  free(readonly);
  if (sources) free_strings(sources);
  if (targets) free_strings(targets);
  return args_done(&a, out);
}
