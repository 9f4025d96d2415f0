{
  "targets": [
    {
      "target_name": "berth_native",
      "sources": ["berth_native.c"],
      "cflags": ["-O2", "-Wall", "-Wextra"]
    }
  ]
}
