// A create's network settings beyond NetworkMode: NetworkingConfig's endpoints
// and the container-wide MAC address. berth's containers join one network, the
// one NetworkMode names (a private namespace with loopback only, the host's, or
// none), and have no interface an address or a MAC could be given to. So an
// endpoint entry is accepted only for that network and only when it asks for
// nothing (the docker CLI sends one, all empty, from API 1.44); anything else
// is refused rather than stored and dropped.
import { invalidParameter } from '../../errors.js';
import type { NetworkingConfig } from './config.js';
import { asksNothing } from './unsupported.js';

/** The networks berth has; `default` is Docker's name for the default one, bridge. */
export const NETWORKS: readonly string[] = ['default', 'bridge', 'none', 'host'];
const canonical = (name: string) => (name === 'default' ? 'bridge' : name);

export function checkNetworking(
  mode: string,
  networking: NetworkingConfig | undefined,
  macAddress: string | null | undefined,
): void {
  if (macAddress) {
    throw invalidParameter(
      `a MAC address (${macAddress}) is not supported by berth yet: its containers have no network interface to give one`,
    );
  }
  for (const [name, endpoint] of Object.entries(networking?.EndpointsConfig ?? {})) {
    if (!NETWORKS.includes(name)) throw invalidParameter(`network ${name} not found`);
    if (canonical(name) !== canonical(mode)) {
      throw invalidParameter(
        `berth connects a container to one network only, its NetworkMode's (${mode}), not also to ${name}`,
      );
    }
    for (const [field, value] of Object.entries(endpoint ?? {})) {
      if (asksNothing(value)) continue;
      throw invalidParameter(
        `NetworkingConfig.EndpointsConfig.${name}.${field} is not supported by berth yet (asked: ${JSON.stringify(value)})`,
      );
    }
  }
}
