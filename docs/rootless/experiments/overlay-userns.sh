#!/bin/sh
# Run as an ordinary user with /etc/subuid and /etc/subgid entries:
#   sh overlay-userns.sh DIR        (DIR on the file system of the data root)
# Mounts kernel overlayfs inside a user+mount namespace with the full id map and
# probes what berth's layer store needs: whiteouts, opaque dirs, chown to mapped
# ids, xattrs, device nodes, redirect_dir/metacopy, and the copy-up of each.
set -u
PATH=/usr/sbin:/usr/bin:/sbin:/bin
D=${1:?dir}
mkdir -p "$D" && cd "$D" || exit 1
exec unshare --user --map-root-user --map-auto --mount sh -c '
set -u
sx() { /usr/bin/python3 -c "import os,sys; os.setxattr(sys.argv[2], sys.argv[1], sys.argv[3].encode())" "$@"; }
gx() { /usr/bin/python3 -c "import os,sys; print(os.getxattr(sys.argv[2], sys.argv[1]).decode())" "$@"; }
try() { printf "%-58s " "$1"; shift; if out=$("$@" 2>&1); then echo ok; else echo "FAIL: $out"; fi; }
rm -rf l1 l2 up wk m; mkdir -p l1/d l1/o l2 up wk m
echo a >l1/f; echo b >l1/d/g; echo c >l1/o/h
try "chown 1000:1000 (a mapped id) in a lower" chown 1000:1000 l1/f
try "chown 70000 (outside the 65536 map)" chown 70000 l1/f
try "mknod whiteout char 0/0 (docker layer form)" mknod l2/wh c 0 0
try "mknod char 1/3 (/dev/null as in an image layer)" mknod l2/null c 1 3
try "mknod fifo" mknod l2/fifo p
try "setfattr trusted.overlay.opaque" sx trusted.overlay.opaque l2 y
mkdir -p l2/o; try "setfattr user.overlay.opaque (on l2/o, over l1/o)" sx user.overlay.opaque l2/o y
try "setfattr user.foo (an image xattr)" sx user.foo l1/f bar
try "setfattr security.capability (file caps)" setcap cap_net_raw+ep l1/f
try "mount overlay (plain)" mount -t overlay overlay -o lowerdir=l1,upperdir=up,workdir=wk m
umount m 2>/dev/null; rm -rf up wk; mkdir up wk
try "mount overlay userxattr" mount -t overlay overlay -o lowerdir=l1,upperdir=up,workdir=wk,userxattr m
try "  rm a lower file in the merged dir (whiteout)" rm m/f
try "  whiteout in upper is a 0/0 char device" sh -c "test -c up/f && stat -c %t:%T up/f | grep -qx 0:0"
try "  rm -r a lower dir, recreate it (opaque in upper)" sh -c "rm -r m/d && mkdir m/d"
try "  upper dir opaque as user.overlay.opaque" gx user.overlay.opaque up/d
try "  chown in merged (copy-up keeps mapped ids)" chown 1234:1234 m/d
try "  rename a lower dir (EXDEV without redirect_dir; mv copies)" sh -c "mv m/o m/o2 2>&1; test -d m/o2"
umount m; rm -rf up wk; mkdir up wk
try "mount overlay userxattr,redirect_dir=on" mount -t overlay overlay -o lowerdir=l1,upperdir=up,workdir=wk,userxattr,redirect_dir=on m
umount m 2>/dev/null; rm -rf up wk; mkdir up wk
try "mount overlay userxattr,metacopy=on" mount -t overlay overlay -o lowerdir=l1,upperdir=up,workdir=wk,userxattr,metacopy=on m
umount m 2>/dev/null; rm -rf up wk; mkdir up wk
try "mount overlay userxattr,index=on" mount -t overlay overlay -o lowerdir=l1,upperdir=up,workdir=wk,userxattr,index=on m
umount m 2>/dev/null; rm -rf up wk; mkdir up wk
try "mount overlay userxattr,volatile" mount -t overlay overlay -o lowerdir=l1,upperdir=up,workdir=wk,userxattr,volatile m
umount m 2>/dev/null; rm -rf up wk; mkdir up wk
try "mount overlay two lowers (l2 with a 0/0 whiteout)" mount -t overlay overlay -o lowerdir=l2:l1,upperdir=up,workdir=wk,userxattr m
try "  0/0 char device in a lower is a whiteout (m/wh absent)" sh -c "! test -e m/wh"
try "  user.overlay.opaque l2/o hides l1/o/h" sh -c "! test -e m/o/h"
umount m 2>/dev/null
try "mount tmpfs" mount -t tmpfs tmpfs m
umount m 2>/dev/null
try "bind mount" mount --bind l1 m
umount m 2>/dev/null
try "mount proc needs a pid ns (expect FAIL here)" mount -t proc proc m
ls -ln l1 l2
'
