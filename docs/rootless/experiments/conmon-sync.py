#!/usr/bin/python3
"""conmon-sync.py BUNDLE DIR: starts conmon as berth does (its _OCI_SYNCPIPE on fd 3) and prints the sync message."""
import os, subprocess, sys
B, C = sys.argv[1], sys.argv[2]
r, w = os.pipe()
r = os.dup2(r, 50, inheritable=False) if r == 3 else r  # fd 3 is the child's _OCI_SYNCPIPE
if w != 3: os.dup2(w, 3); os.close(w)
args = ["conmon", "--api-version", "-c", "c2", "-u", "c2", "-r", "/usr/sbin/runc", "-b", B, "-p", B + "/pidfile", "-P", B + "/conmon.pid",
        "--socket-dir-path", C + "/socks", "--runtime-arg", "--root=" + C + "/run", "--runtime-arg", "--log=" + C + "/runc.log",
        "-l", "k8s-file:" + C + "/log", "--exit-dir", C + "/exits", "--no-sync-log"]
p = subprocess.Popen(args, env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "_OCI_SYNCPIPE": "3"}, pass_fds=(3,), stdin=subprocess.DEVNULL,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
os.close(3)
print("conmon sync message:", os.read(r, 4096).decode().strip())
p.wait()
