// Memory: hands the C heap's free pages back to the kernel. glibc keeps what
// was freed in its arenas (the main one and one per thread that allocated:
// libuv's pool, V8's helpers, SQLite), so after a burst of work the daemon
// holds it until the same allocations come again; malloc_trim returns the free
// pages of every arena.
#define _GNU_SOURCE
#include <malloc.h>

#include "addon.h"
#include "args.h"

// mallocTrim(): whether any memory was returned (false also where the C
// library is not glibc, which has no such call).
BINDING(js_malloc_trim) {
  (void)info;
  int released = 0;
#ifdef __GLIBC__
  released = malloc_trim(0);
#endif
  return js_bool(env, released != 0);
}
