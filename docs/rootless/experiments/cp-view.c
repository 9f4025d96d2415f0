// Build: gcc -O2 -o cp-view cp-view.c. Run inside `unshare --user --map-root-user --map-auto --mount`
// with an overlay mounted at ROOT (holding an empty dir mnt/) and a dir SRC holding a file v:
//   ./cp-view ROOT SRC
// In a user+mount namespace: the calls rooted.c makes for docker cp's view of a container.
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/mount.h>
#include <stdio.h>
#include <string.h>
#include <errno.h>
#include <sys/syscall.h>
#include <unistd.h>
int main(int argc, char **argv) {
  const char *root = argv[1], *src = argv[2];
  int view = syscall(SYS_open_tree, AT_FDCWD, root, OPEN_TREE_CLONE | AT_RECURSIVE | O_CLOEXEC);
  printf("open_tree(rootfs, CLONE|RECURSIVE): %s\n", view < 0 ? strerror(errno) : "ok");
  int tree = syscall(SYS_open_tree, AT_FDCWD, src, OPEN_TREE_CLONE | AT_RECURSIVE | O_CLOEXEC);
  printf("open_tree(volume source): %s\n", tree < 0 ? strerror(errno) : "ok");
  struct mount_attr attr = {.attr_set = MOUNT_ATTR_RDONLY};
  int r = syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH | AT_RECURSIVE, &attr, sizeof attr);
  printf("mount_setattr(RDONLY): %s\n", r < 0 ? strerror(errno) : "ok");
  int at = openat(view, "mnt", O_PATH);
  r = syscall(SYS_move_mount, tree, "", at, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH);
  printf("move_mount(into the detached view): %s\n", r < 0 ? strerror(errno) : "ok");
  int f = openat(view, "mnt/v", O_RDONLY);
  char b[16] = {0};
  printf("read through the view: %s", f < 0 ? strerror(errno) : (read(f, b, 15), b));
  int w = openat(view, "mnt/new", O_CREAT | O_WRONLY, 0644);
  printf("\nwrite in the read-only bind: %s\n", w < 0 ? strerror(errno) : "allowed (wrong)");
  return 0;
}
