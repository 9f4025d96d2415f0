// What the kernel knows about a connected unix socket and Node does not tell:
// for the API's hijacked connections (attach, exec), whose clients may
// half-close or vanish without a word; and a socket's send buffer, which Node
// does not set.
import { native } from './native.js';

/**
 * Whether the socket's peer has closed it (POLLHUP), not only shut its sending
 * side. A descriptor the kernel cannot answer for is taken as closed.
 */
export function peerClosed(fd: number): boolean {
  try {
    return native.peerClosed(fd);
  } catch {
    return true;
  }
}

/** Bytes sent on the socket that its peer has not read yet (SIOCOUTQ); 0 when the kernel cannot tell. */
export function unreadBytes(fd: number): number {
  try {
    return native.unreadBytes(fd);
  } catch {
    return 0;
  }
}

/**
 * Lets the socket hold up to `bytes` its peer has not read yet (SO_SNDBUF,
 * capped by the kernel's net.core.wmem_max); best effort: a socket that
 * refuses keeps its own.
 */
export function setSendBuffer(fd: number, bytes: number): void {
  try {
    native.setSendBuffer(fd, bytes);
  } catch {
    // the default buffer then
  }
}
