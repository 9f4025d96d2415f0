#!/bin/sh
# Run as an ordinary user with subordinate ids and XDG_RUNTIME_DIR set:  sh holder.sh
# The namespace layout proposed for berth: a holder (catatonit -P) owns a user
# namespace with the full id map (util-linux unshare calls newuidmap and
# newgidmap), a mount namespace and a network namespace; "berthd" joins only the
# user and mount namespaces with nsenter and so stays in the host's network
# namespace; slirp4netns is attached to the holder's network namespace by pid.
# Prints each step's time and checks the result. Needs /dev/net/tun usable.
set -u
PATH=/usr/sbin:/usr/bin:/sbin:/bin
ms() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }
U=$(id -un)
SU=$(awk -F: -v u="$U" '$1 == u {print $2 "," 1 "," $3; exit}' /etc/subuid)
SG=$(awk -F: -v u="$U" '$1 == u {print $2 "," 1 "," $3; exit}' /etc/subgid)
t=$(date +%s%N)
unshare --user --mount --net --propagation slave --map-root-user --map-users="$SU" --map-groups="$SG" \
  catatonit -P </dev/null >/dev/null 2>&1 &
H=$!
# Ready when the holder runs catatonit and both maps are written (shell builtins only: no process per poll).
ready() { read -r c </proc/$H/comm && [ "$c" = catatonit ] && read -r u </proc/$H/uid_map && read -r g </proc/$H/gid_map; } 2>/dev/null
until ready; do :; done
echo "holder up (user+mount+net ns, full map): $(ms $t) ms, pid $H, uid_map: $(tr -s ' ' </proc/$H/uid_map | tr '\n' ';')"
t=$(date +%s%N); nsenter --user --mount --preserve-credentials -t $H true; echo "join user+mount ns (nsenter … true): $(ms $t) ms"
t=$(date +%s%N)
slirp4netns --configure --mtu=65520 --disable-host-loopback $H tap0 </dev/null >/dev/null 2>&1 &
S=$!
until nsenter --user --preserve-credentials --net -t $H ip -4 -o addr show tap0 2>/dev/null | grep -q inet; do :; done
echo "slirp4netns attached and configured: $(ms $t) ms"
nsenter --user --mount --preserve-credentials -t $H sh -c "
  echo \"joiner: uid \$(id -u), its netns is the host's: \$([ \"\$(readlink /proc/self/ns/net)\" = \"$(readlink /proc/self/ns/net)\" ] && echo yes || echo no)\"
  nsenter --net=/proc/$H/ns/net sh -c 'ip -4 -br addr show tap0; ip route | head -1'"
kill $S $H; wait 2>/dev/null
