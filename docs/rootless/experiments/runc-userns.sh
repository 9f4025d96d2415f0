#!/bin/sh
# Run as an ordinary user with subordinate ids:  sh runc-userns.sh DIR
# Inside a user+mount(+net) namespace with the full id map (as berthd would be),
# runs runc with the config berth would write rootless, on this host's cgroup v1
# hybrid, and probes what fails: cgroup resources, devices, oom_score_adj, sysfs.
set -u
PATH=/usr/sbin:/usr/bin:/sbin:/bin
D=${1:?dir}
mkdir -p "$D" && cd "$D" || exit 1
rm -rf b && mkdir -p b/rootfs/bin b/rootfs/proc b/rootfs/sys b/rootfs/dev b/rootfs/tmp b/rootfs/etc
cp /usr/bin/busybox b/rootfs/bin/ && for a in sh cat id ls echo grep mount sleep; do ln -s busybox b/rootfs/bin/$a; done
exec unshare --user --map-root-user --map-auto --mount --net --fork sh -c '
set -u
R="runc --root $PWD/state"
cd b
spec() { # $1: jq-free tweaks with python on a rootless spec
  rm -f config.json; runc spec --rootless
  /usr/bin/python3 - "$@" <<PY
import json,sys
c=json.load(open("config.json"))
c["process"]["terminal"]=False
c["process"]["args"]=["sh","-c",sys.argv[1]]
# the daemon'"'"'s namespace already holds the full map: no nested user namespace
c["linux"]["namespaces"]=[n for n in c["linux"]["namespaces"] if n["type"]!="user"]+[{"type":"network"}]
c["linux"].pop("uidMappings",None); c["linux"].pop("gidMappings",None)
c["process"]["user"]={"uid":1000,"gid":1000}
for m in c["mounts"]:
  if m["destination"]=="/sys": m.update({"type":"sysfs","source":"sysfs","options":["nosuid","noexec","nodev","ro"]})
extra=sys.argv[2] if len(sys.argv)>2 else ""
if extra=="mem": c["linux"]["resources"]={"memory":{"limit":67108864}}
if extra=="pids": c["linux"]["resources"]={"pids":{"limit":10}}
if extra=="cpu": c["linux"]["resources"]={"cpu":{"shares":512}}
if extra=="dev": c["linux"]["devices"]=[{"path":"/dev/kmsg","type":"c","major":1,"minor":11,"fileMode":0o644}]
if extra=="oom-raise": c["process"]["oomScoreAdj"]=-500
if extra=="oom-lower": c["process"]["oomScoreAdj"]=500
if extra=="cgpath": c["linux"]["cgroupsPath"]="/rlres/c1"
json.dump(c,open("config.json","w"))
PY
}
run() { printf "%-44s " "$1"; spec "$2" "$3"; out=$($R run --no-pivot=false c1 2>&1 </dev/null); rc=$?; $R delete -f c1 >/dev/null 2>&1; echo "rc=$rc $(echo "$out" | tr "\n" " " | cut -c1-230)"; }
run "plain run, uid 1000, ids"              "id; cat /proc/self/uid_map | tr -s \" \"" ""
run "sysfs mounted (own netns)"             "grep -c sysfs /proc/mounts" ""
run "cgroupsPath set, no resources"         "cat /proc/self/cgroup | grep memory" cgpath
run "memory limit (cgroup v1)"              "true" mem
run "pids limit (cgroup v1)"                "true" pids
run "cpu shares (cgroup v1)"                "true" cpu
run "device /dev/kmsg (c 1:11)"             "ls -l /dev/kmsg" dev
run "oomScoreAdj -500 (raise priority)"     "cat /proc/self/oom_score_adj" oom-raise
run "oomScoreAdj 500"                       "cat /proc/self/oom_score_adj" oom-lower
'
