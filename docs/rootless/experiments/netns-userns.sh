#!/bin/sh
# Run as an ordinary user with subordinate ids:  sh netns-userns.sh
# In a user+net namespace (as the daemon's would be), builds what berth builds
# for a bridge network: a bridge, a container netns joined by a veth pair,
# ip_forward, iptables NAT and filter rules (nft and legacy backends), and a
# conntrack-dependent rule, aardvark-dns on the gateway; prints what works.
# (--pid: aardvark-dns daemonizes; the pid namespace ends it with the script.)
set -u
PATH=/usr/sbin:/usr/bin:/sbin:/bin
exec unshare --user --map-root-user --map-auto --net --mount --pid --fork sh -c '
try() { printf "%-56s " "$1"; shift; if out=$("$@" 2>&1); then echo ok; else echo "FAIL: $(echo $out | cut -c1-160)"; fi; }
mount -t tmpfs tmpfs /run
try "ip link add rlbr0 type bridge" ip link add rlbr0 type bridge
try "address + up" sh -c "ip addr add 172.31.0.1/16 dev rlbr0 && ip link set rlbr0 up && ip link set lo up"
touch /run/c1ns
try "bind-mount a new netns (the container one)" sh -c "unshare --net sh -c \"mount --bind /proc/self/ns/net /run/c1ns\""
try "veth pair, peer straight into the container ns" sh -c "ip link add v1 type veth peer name eth0 netns /run/c1ns"
try "veth onto the bridge" sh -c "ip link set v1 master rlbr0 && ip link set v1 up"
try "container side address, route" sh -c "nsenter --net=/run/c1ns sh -c \"ip link set lo up; ip link set eth0 up; ip addr add 172.31.0.2/16 dev eth0; ip route add default via 172.31.0.1\""
try "ping bridge from the container" nsenter --net=/run/c1ns busybox ping -c1 -W1 172.31.0.1
try "sysctl ip_forward=1 in the ns" sh -c "echo 1 > /proc/sys/net/ipv4/ip_forward"
try "sysctl route_localnet on the bridge" sh -c "echo 1 > /proc/sys/net/ipv4/conf/rlbr0/route_localnet"
try "iptables-nft -t nat MASQUERADE" iptables-nft -t nat -A POSTROUTING -s 172.31.0.0/16 ! -o rlbr0 -j MASQUERADE
try "iptables-nft -t nat DNAT (published port)" iptables-nft -t nat -A PREROUTING -p tcp --dport 8080 -j DNAT --to-destination 172.31.0.2:80
try "iptables-nft filter new chain + conntrack" sh -c "iptables-nft -N BERTH-T && iptables-nft -A FORWARD -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT"
try "iptables-nft -S lists them" sh -c "iptables-nft -t nat -S | grep -q MASQUERADE"
try "iptables-legacy -t nat MASQUERADE" iptables-legacy -t nat -A POSTROUTING -s 172.31.0.0/16 -j MASQUERADE
try "nft list ruleset (no nft binary: skipped)" sh -c "command -v nft >/dev/null || exit 0; nft list ruleset"
try "bridge-nf-call-iptables visible in the ns" sh -c "cat /proc/sys/net/bridge/bridge-nf-call-iptables"
try "hairpin / bridge port flags via ip link" ip link set v1 type bridge_slave hairpin on
try "aardvark-dns runs and binds the gateway:53" sh -c "
  mkdir -p /run/aa && printf \"172.31.0.1\nc1id 172.31.0.2  web,c1\n\" > /run/aa/rlnet
  /usr/lib/podman/aardvark-dns --config /run/aa -p 53 run >/run/aa.log 2>&1 &
  sleep 0.5; nsenter --net=/run/c1ns busybox nslookup web 172.31.0.1 2>&1 | grep -q 172.31.0.2"
ip -br link
'
