// The C heap's free memory back to the kernel (see src/native/memory.c).
import { native } from './native.js';

/** Returns the free pages of every malloc arena to the kernel; false when there were none. */
export function releaseFreeCHeap(): boolean {
  return native.mallocTrim();
}
