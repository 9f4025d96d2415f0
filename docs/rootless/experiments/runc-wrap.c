// For the experiment of plan.md §6.0 only (not a design): a "runtime" for daemon.json's runtimes
// that, on `create --bundle B`, rewrites B/config.json as rootless berth will (no cgroupsPath, no
// linux.resources, ping_group_range within the mapped gids) when built with -DSTRIP=1, leaves it as
// is with -DSTRIP=0 (the same wrapper cost for the rootful side), then execs runc.
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <unistd.h>
int main(int argc, char **argv) {
  const char *bundle = 0; int create = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "create")) create = 1;
    if (!strcmp(argv[i], "--bundle") && i + 1 < argc) bundle = argv[i + 1];
    if (!strncmp(argv[i], "--bundle=", 9)) bundle = argv[i] + 9;
  }
  if (create && bundle) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 -c 'import json,sys; p=sys.argv[1]+\"/config.json\"; c=json.load(open(p)); "
             "c[\"linux\"].pop(\"cgroupsPath\",None) if %d else 0; c[\"linux\"].pop(\"resources\",None) if %d else 0; s=c[\"linux\"].get(\"sysctl\") or {}; (s.__setitem__(\"net.ipv4.ping_group_range\",\"0 65536\") if %d and \"net.ipv4.ping_group_range\" in s else 0); json.dump(c,open(p,\"w\"))' '%s'",
             STRIP, STRIP, STRIP, bundle);
    if (system(cmd) != 0) return 99;
  }
  argv[0] = "runc";
  execv("/usr/sbin/runc", argv);
  return 127;
}
