{
  "targets": [
    {
      "target_name": "berth_native",
      "sources": ["addon.c", "args.c", "mounts.c", "hash.c", "xattrs.c", "files.c", "rooted.c", "spawn.c", "sockets.c", "netlink.c", "memory.c"],
      "cflags": ["-O2", "-Wall", "-Wextra"]
    }
  ]
}
