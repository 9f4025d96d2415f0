// Mounts: mount, umount2 (also on a thread of its own), and whether a path is
// a mount's root.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>

#include "addon.h"
#include "args.h"

// mount(source, target, fstype, flags, data)
BINDING(js_mount) {
  ARGS(a, 5);
  const char *target = args_string(&a, 1);
  int r = mount(args_string(&a, 0), target, args_string(&a, 2), (unsigned long)args_int64(&a, 3), args_string(&a, 4));
  int e = errno;
  return args_done(&a, r == 0 ? js_undefined(env) : throw_errno(env, "mount", target, e));
}

// umount2(target, flags)
BINDING(js_umount2) {
  ARGS(a, 2);
  const char *target = args_string(&a, 0);
  int r = umount2(target, args_int32(&a, 1));
  int e = errno;
  return args_done(&a, r == 0 ? js_undefined(env) : throw_errno(env, "umount2", target, e));
}

// umount2Async(target, flags) -> Promise: umount2 on a thread of its own.
// Unmounting an overlay syncs its upper filesystem, which can take long (a
// container that wrote much). Not the libuv pool: a slow sync there would hold
// up the blocking fifo open that starts a container.
typedef struct {
  char *target;
  int flags;
  int err;
} umount_job_t;

static void umount_work(void *data) {
  umount_job_t *j = data;
  j->err = umount2(j->target, j->flags) == 0 ? 0 : errno;
}

static void umount_settle(napi_env env, napi_deferred deferred, void *data) {
  umount_job_t *j = data;
  if (env != NULL) {
    if (j->err == 0) napi_resolve_deferred(env, deferred, js_undefined(env));
    else napi_reject_deferred(env, deferred, errno_error(env, "umount2", j->target, j->err));
  }
  free(j->target);
  free(j);
}

BINDING(js_umount2_async) {
  ARGS(a, 2);
  umount_job_t *j = calloc(1, sizeof *j);
  const char *target = args_string(&a, 0);
  if (!j || !target) {
    free(j);
    return args_done(&a, throw_errno(env, "umount2", target, target ? ENOMEM : EINVAL));
  }
  j->target = strdup(target);
  j->flags = args_int32(&a, 1);
  args_done(&a, NULL);
  return promise_on_thread(env, "umount2Async", umount_work, umount_settle, j);
}

// isMountRoot(path) -> true/false, or null where the kernel cannot say (statx's
// STATX_ATTR_MOUNT_ROOT, Linux 5.8). The last component is not followed.
BINDING(js_is_mount_root) {
  ARGS(a, 1);
  const char *path = args_path(&a, 0);
  if (!path) return args_done(&a, NULL);
  struct statx stx;
  int r = statx(AT_FDCWD, path, AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT, STATX_TYPE, &stx);
  int e = errno;
  napi_value out;
  if (r != 0 && e == ENOENT) out = js_bool(env, false);
  else if (r != 0) out = throw_errno(env, "statx", path, e);
  else if (!(stx.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT)) out = js_null(env);
  else out = js_bool(env, (stx.stx_attributes & STATX_ATTR_MOUNT_ROOT) != 0);
  return args_done(&a, out);
}
