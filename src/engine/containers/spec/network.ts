// Config.NetworkDisabled, as dockerd does it (daemon/container_operations.go,
// oci_linux.go): the container joins no network, not even the one its
// NetworkMode names (which is kept as given): no endpoint, no links, no
// published ports; at start it gets a network namespace of its own with only
// loopback, whatever the mode (host's or another container's included).
import type { ContainerConfig, HostConfig } from '../config.js';

export const networkDisabled = (c: Pick<ContainerConfig, 'NetworkDisabled'>): boolean => c.NetworkDisabled === true;

/** The network namespace the spec gives the container: the host's, none but loopback, or one berth plumbs. */
export function specNetworkMode(
  c: Pick<ContainerConfig, 'NetworkDisabled'>,
  h: Pick<HostConfig, 'NetworkMode'>,
): 'host' | 'none' | 'private' {
  if (networkDisabled(c) || h.NetworkMode === 'none') return 'none';
  return h.NetworkMode === 'host' ? 'host' : 'private';
}

/**
 * The names of the container's own line in /etc/hosts, as libnetwork writes
 * them: the FQDN (Hostname, and Domainname after a dot) then the bare name,
 * so that `hostname -f` and `hostname -d` find the domain.
 */
export function ownHostsNames(hostname: string, domainname: string | undefined): string {
  const fqdn = domainname ? `${hostname}.${domainname}` : hostname;
  const dot = fqdn.indexOf('.');
  return dot < 0 ? fqdn : `${fqdn} ${fqdn.slice(0, dot)}`;
}

/**
 * The exposed ports the container's network reports (inspect's
 * NetworkSettings.Ports, the list's Ports): a bridge's endpoint reports them;
 * no network, the host's and another container's report none, as libnetwork's
 * null and host drivers report none and a joiner has no endpoint of its own.
 */
export function reportedExposedPorts(
  c: Pick<ContainerConfig, 'NetworkDisabled' | 'ExposedPorts'>,
  h: Pick<HostConfig, 'NetworkMode'>,
): ContainerConfig['ExposedPorts'] {
  const mode = h.NetworkMode ?? '';
  if (networkDisabled(c) || mode === 'none' || mode === 'host' || mode.startsWith('container:')) return null;
  return c.ExposedPorts;
}
