#!/usr/bin/python3
"""Tiny TCP bench for the network experiments (no iperf3 on this host).
  tcpbench.py serve PORT           sink + one-line answer server (threads)
  tcpbench.py bulk HOST PORT MB    send MB mebibytes, print Gbit/s
  tcpbench.py rr HOST PORT N       N sequential connect/send/answer round trips, print median ms
"""
import socket, sys, threading, time, statistics

def serve(port):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", port)); s.listen(128)
    def handle(c):
        with c:
            while True:
                b = c.recv(1 << 20)
                if not b: break
                if b.endswith(b"?\n"): c.sendall(b"ok\n")
    while True:
        c, _ = s.accept(); threading.Thread(target=handle, args=(c,), daemon=True).start()

def bulk(host, port, mb):
    buf = b"\0" * (1 << 20); c = socket.create_connection((host, port)); t = time.monotonic()
    for _ in range(mb): c.sendall(buf)
    c.shutdown(socket.SHUT_WR); c.recv(1); dt = time.monotonic() - t
    print(f"bulk {mb} MiB: {mb * 8 * 1.048576 / 1000 / dt:.2f} Gbit/s")

def rr(host, port, n):
    ts = []
    for _ in range(n):
        t = time.monotonic(); c = socket.create_connection((host, port)); c.sendall(b"?\n")
        assert c.recv(16) == b"ok\n"; c.close(); ts.append((time.monotonic() - t) * 1000)
    print(f"rr n={n}: median {statistics.median(ts):.3f} ms, p90 {sorted(ts)[int(n * .9)]:.3f} ms")

cmd = sys.argv[1]
if cmd == "serve": serve(int(sys.argv[2]))
elif cmd == "bulk": bulk(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
else: rr(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
