// Memory: hands what an idle daemon holds but does not use back to the kernel.
// glibc keeps what was freed in its arenas (the main one and one per thread
// that allocated: libuv's pool, V8's helpers, SQLite), so after a burst of work
// the daemon holds it until the same allocations come again; malloc_trim
// returns the free pages of every arena. And the pages of the node binary and
// the libraries that a burst of work ran (tens of MiB of code and read-only
// data) stay mapped in the process, counted in its resident size and PSS,
// although the page cache holds them anyway.
#define _GNU_SOURCE
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "addon.h"
#include "args.h"

// mallocTrimAsync() -> Promise<boolean>: malloc_trim, which returns the free
// pages of every arena, on a thread of its own, so that the loop goes on
// meanwhile (a trim of tens of MiB of free pages takes milliseconds of madvise;
// the loop waits only if it allocates from an arena while that arena is being
// trimmed). Whether any memory was returned (false also where the C library is
// not glibc, which has no such call).
typedef struct {
  int released;
} trim_job_t;

static void trim_work(void *data) {
  trim_job_t *j = data;
#ifdef __GLIBC__
  j->released = malloc_trim(0);
#else
  j->released = 0;
#endif
}

static void trim_settle(napi_env env, napi_deferred deferred, void *data) {
  trim_job_t *j = data;
  if (env != NULL) napi_resolve_deferred(env, deferred, js_bool(env, j->released != 0));
  free(j);
}

BINDING(js_malloc_trim_async) {
  (void)info;
  trim_job_t *j = calloc(1, sizeof *j);
  if (!j) return throw_message(env, NULL, "mallocTrimAsync: out of memory");
  return promise_on_thread(env, "mallocTrimAsync", trim_work, trim_settle, j);
}

// mallocThresholds(mmapBytes, trimBytes): blocks of at least mmapBytes get
// mappings of their own, unmapped when freed; the top of an arena is given back
// once trimBytes of it are free. Fixed values also stop glibc from raising the
// mapping threshold to the largest block freed so far (up to 32 MiB), after
// which a pull's 1 MiB blocks all came from the arenas and stayed there.
// Whether both were taken (false where the C library is not glibc).
BINDING(js_malloc_thresholds) {
  ARGS(a, 2);
  int ok = 0;
#ifdef __GLIBC__
  ok = mallopt(M_MMAP_THRESHOLD, args_int32(&a, 0)) && mallopt(M_TRIM_THRESHOLD, args_int32(&a, 1));
#endif
  return args_done(&a, js_bool(env, ok != 0));
}

typedef struct {
  unsigned long start, end, rss_kib;
} range_t;

// releaseFileMappedPages(): unmaps the resident pages of the process's private,
// read-only file mappings that hold no page of their own (smaps' Anonymous and
// Swap both 0; a kernel whose smaps has no Swap line gets nothing released),
// i.e. code and read-only data exactly as the file has them. MADV_DONTNEED on
// such a mapping only drops the page table entries: the pages stay in the page
// cache, and the next touch maps them again with a minor fault. A mapping with
// a private copy of some page (a relocated RELRO segment, a breakpoint) is left
// alone, since that copy would be lost; writable and shared mappings are never
// candidates. Returns the KiB that were resident in the mappings released, or
// -1 when /proc/self/smaps cannot be read.
BINDING(js_release_file_mapped_pages) {
  (void)info;
  FILE *f = fopen("/proc/self/smaps", "re");
  if (!f) return js_int32(env, -1);
  size_t n = 0, cap = 64;
  range_t *ranges = malloc(cap * sizeof *ranges);
  if (!ranges) {
    fclose(f);
    return js_int32(env, -1);
  }
  char line[4096];
  range_t cur = {0};
  bool candidate = false;
  while (fgets(line, sizeof line, f)) {
    unsigned long start, end, inode;
    char perms[5];
    int path_at = 0;
    // A mapping's header: "start-end perms offset dev inode   path".
    if (sscanf(line, "%lx-%lx %4s %*s %*s %lu %n", &start, &end, perms, &inode, &path_at) == 4) {
      candidate = inode != 0 && line[path_at] == '/' && perms[0] == 'r' && perms[1] != 'w' && perms[3] == 'p';
      cur = (range_t){start, end, 0};
      continue;
    }
    if (!candidate) continue;
    if (strncmp(line, "Rss:", 4) == 0) {
      cur.rss_kib = strtoul(line + 4, NULL, 10);
    } else if (strncmp(line, "Anonymous:", 10) == 0) {
      if (strtoul(line + 10, NULL, 10) != 0) candidate = false;
    } else if (strncmp(line, "Swap:", 5) == 0) {
      // A private page swapped out is not counted as Anonymous, and would be lost just the same.
      candidate = false;
      if (strtoul(line + 5, NULL, 10) != 0 || cur.rss_kib == 0) continue;
      if (n == cap) {
        range_t *more = realloc(ranges, 2 * cap * sizeof *ranges);
        if (!more) break;
        ranges = more;
        cap *= 2;
      }
      ranges[n++] = cur;
    }
  }
  fclose(f);
  // After the read: the smaps text is generated as it is read.
  long released = 0;
  for (size_t i = 0; i < n; i++)
    if (madvise((void *)ranges[i].start, ranges[i].end - ranges[i].start, MADV_DONTNEED) == 0)
      released += (long)ranges[i].rss_kib;
  free(ranges);
  return js_int32(env, released > INT32_MAX ? INT32_MAX : (int32_t)released);
}
