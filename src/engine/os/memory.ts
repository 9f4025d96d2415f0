// Memory an idle daemon holds without using it, back to the kernel (see src/native/memory.c).
import { native } from './native.js';

/**
 * Returns the free pages of every malloc arena to the kernel, on a thread of
 * its own (the loop goes on meanwhile); false when there were none.
 */
export function releaseFreeCHeap(): Promise<boolean> {
  return native.mallocTrimAsync();
}

/**
 * Bounds what the C heap keeps while busy: blocks of `mmapBytes` or more (a
 * pull's 1 MiB blocks and gunzip output, the extraction's staging buffers) are
 * mapped on their own and go back to the kernel when freed, and an arena's free
 * top goes back beyond `trimBytes`. False where the C library is not glibc.
 */
export function boundCHeap(mmapBytes: number, trimBytes: number): boolean {
  return native.mallocThresholds(mmapBytes, trimBytes);
}

/**
 * Unmaps the pages of code and read-only data that the process mapped from files (the node binary, the libraries)
 * and never changed: they stay in the page cache, and what runs next maps them again with minor faults. Returns the
 * KiB that were resident, or -1 when the process's mappings could not be read.
 */
export function releaseFileMappedPages(): number {
  return native.releaseFileMappedPages();
}
