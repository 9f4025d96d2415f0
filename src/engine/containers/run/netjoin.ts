// NetworkMode container:<id> as dockerd's initializeNetworking does it at each
// start: the joiner takes more than the donor's network namespace. It takes
// the donor's Hostname and Domainname (its UTS namespace stays its own, named
// as the donor is) and its hostname, hosts and resolv.conf files, so that a
// pod's containers read one set: cri-dockerd rewrites the sandbox's
// resolv.conf after CNI ran, and every container of the pod must see it.
import { conflict, systemError } from '../../../errors.js';
import { type Container, isRunning } from '../container.js';
import { joined } from '../spec/namespaces.js';

/** The names and /etc files a container starts with. */
export interface NetworkIdentity {
  hostname: string;
  domainname: string;
  /** Where its hostname, hosts and resolv.conf are (container.ts's etcDir). */
  etcDir: string;
}

/**
 * Its own, or its network donor's, which must run (dockerd's
 * getNetworkedContainer and its words). `find` throws the 404 of a donor gone.
 */
export function networkIdentity(c: Container, find: (ref: string) => Container): NetworkIdentity {
  const ref = joined(c.hostConfig.NetworkMode ?? '');
  if (ref === undefined) {
    return { hostname: c.config.Hostname, domainname: c.config.Domainname ?? '', etcDir: c.bundleDir };
  }
  const donor = find(ref);
  if (donor.id === c.id) throw systemError('cannot join own network');
  if (!isRunning(donor)) throw conflict(`cannot join network of a non running container: ${ref}`);
  return { hostname: donor.config.Hostname, domainname: donor.config.Domainname ?? '', etcDir: donor.etcDir };
}
