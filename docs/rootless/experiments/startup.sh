#!/bin/sh
# Run as an ordinary user with subordinate ids and XDG_RUNTIME_DIR set:  sh startup.sh [N]
# Needs /dev/net/tun usable by the user (slirp4netns, pasta).
# Time to a process inside a user namespace with the full id map, for each way
# to get there, interleaved (N rounds), medians in ms.
set -u
PATH=/usr/sbin:/usr/bin:/sbin:/bin
N=${1:-15}
S=$XDG_RUNTIME_DIR/startup-exp; mkdir -p "$S"
U=$(id -un)
SU=$(awk -F: -v u="$U" '$1 == u {print $2 "," 1 "," $3; exit}' /etc/subuid)
SG=$(awk -F: -v u="$U" '$1 == u {print $2 "," 1 "," $3; exit}' /etc/subgid)
# A holder to join, as berthd would at each start after the first.
unshare --user --mount --net --map-root-user --map-users="$SU" --map-groups="$SG" catatonit -P </dev/null >/dev/null 2>&1 &
H=$!; sleep 0.5
one() { s=$(date +%s%N); "$@" </dev/null >/dev/null 2>&1 || echo FAIL >&2; echo $(( ($(date +%s%N) - s) / 1000 )); }
for i in $(seq "$N"); do
  echo "unshare-user-mount $(one unshare --user --map-root-user --map-auto --mount true)"
  echo "unshare-user-mount-net $(one unshare --user --map-root-user --map-auto --mount --net true)"
  echo "unshare-holder-form-full-map $(one unshare --user --mount --net --propagation slave --map-root-user --map-users="$SU" --map-groups="$SG" true)"
  echo "nsenter-join-holder-user-mount $(one nsenter --user --mount --preserve-credentials -t $H true)"
  echo "rootlesskit-host $(one rootlesskit --state-dir=$S/a true)"
  echo "rootlesskit-slirp4netns-copyup-builtin $(one rootlesskit --state-dir=$S/b --net=slirp4netns --mtu=65520 --disable-host-loopback --copy-up=/etc --copy-up=/run --port-driver=builtin --propagation=rslave true)"
  echo "pasta-config-net $(one timeout -s KILL 10 pasta -f -q --config-net -- true)"
done | sort -k1,1 -k2,2n | awk '
  function out() { if (k != "") printf "%-40s median %6.1f ms  min %6.1f ms  (n=%d)\n", k, a[int((n+1)/2)]/1000, a[1]/1000, n }
  $1 != k { out(); k = $1; n = 0 } { a[++n] = $2 } END { out() }'
kill $H; rm -rf "$S"
