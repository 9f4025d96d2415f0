#!/usr/bin/python3
# opaque-image.py OUT.tar [high]: a `docker load` tar of two layers; the second makes d/ opaque
# (d/.wh..wh..opq), or with "high" instead owns d/g by uid 70000 (outside a 65536-id map).
import hashlib, io, json, sys, tarfile, time
def layer(entries):
    b = io.BytesIO(); t = tarfile.open(fileobj=b, mode="w", format=tarfile.PAX_FORMAT)
    for name, data, uid in entries:
        ti = tarfile.TarInfo(name); ti.mtime = 1700000000; ti.uid = ti.gid = uid
        if data is None: ti.type = tarfile.DIRTYPE; ti.mode = 0o755; t.addfile(ti)
        else: ti.size = len(data); ti.mode = 0o644; t.addfile(ti, io.BytesIO(data))
    t.close(); return b.getvalue()
high = len(sys.argv) > 2 and sys.argv[2] == "high"
l1 = layer([("d", None, 0), ("d/f", b"lower\n", 0)])
l2 = layer([("d", None, 0)] + ([] if high else [("d/.wh..wh..opq", b"", 0)]) + [("d/g", b"upper\n", 70000 if high else 0)])
ids = ["sha256:" + hashlib.sha256(l).hexdigest() for l in (l1, l2)]
cfg = json.dumps({"architecture": "amd64", "os": "linux", "config": {"Cmd": ["sh"]},
                  "rootfs": {"type": "layers", "diff_ids": ids}, "history": [{"created": "2023-01-01T00:00:00Z"}] * 2}).encode()
out = tarfile.open(sys.argv[1], "w")
def add(name, data):
    ti = tarfile.TarInfo(name); ti.size = len(data); ti.mtime = 1700000000; out.addfile(ti, io.BytesIO(data))
ch = hashlib.sha256(cfg).hexdigest(); add(ch + ".json", cfg)
names = []
for i, l in enumerate((l1, l2)):
    n = "l%d/layer.tar" % i; add(n, l); names.append(n)
add("manifest.json", json.dumps([{"Config": ch + ".json", "RepoTags": ["opq:" + ("high" if high else "latest")], "Layers": names}]).encode())
out.close()
