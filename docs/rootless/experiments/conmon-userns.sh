#!/bin/sh
# Run as an ordinary user after runc-userns.sh DIR (it leaves a bundle in DIR/b):
#   sh conmon-userns.sh DIR
# Starts a container through conmon as berth does (sync pipe, exit dir, attach
# socket dir, k8s-file log, pid files) inside a user+mount namespace with the
# full map; runs `runc start` from outside the namespace; checks that conmon
# outlives the namespace's first process (the daemon's stand-in) as a child of
# init, and that the exit file and the log are written.
set -u
PATH=/usr/sbin:/usr/bin:/sbin:/bin
D=${1:?dir}; H=$(cd "$(dirname "$0")" && pwd)
B=$D/b; C=$D/cm
rm -rf "$C" && mkdir -p "$C/exits" "$C/socks" "$C/run" && cd "$B" || exit 1
rm -f conmon.pid pidfile
/usr/bin/python3 - <<'PY'
import json
c=json.load(open("config.json")); c["process"]["args"]=["sh","-c","echo hello; sleep 2; exit 3"]
c["linux"].pop("resources",None); c["linux"].pop("cgroupsPath",None); c["process"].pop("oomScoreAdj",None)
c["linux"]["devices"]=[]
json.dump(c,open("config.json","w"))
PY
unshare --user --map-root-user --map-auto --mount --fork /usr/bin/python3 "$H/conmon-sync.py" "$B" "$C" </dev/null
runc --root "$C/run" start c2 && echo "runc start (outside the namespace, as the user): ok"
sleep 0.3; P=$(cat conmon.pid); echo "conmon $P after the namespace's init exited: parent $(ps -o ppid= -p "$P")"
ls -l "$C/socks/c2/attach"
sleep 3; echo "exit file: $(cat "$C/exits/c2")"; echo "log: $(cat "$C/log")"
runc --root "$C/run" delete c2
