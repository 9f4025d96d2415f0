// What the running kernel offers, where Node cannot tell.
import { native } from './native.js';

/** Whether this kernel runs x32 system calls (false off x86-64). See src/native/spawn.c. */
export function x32Abi(): boolean {
  return native.x32Abi();
}
