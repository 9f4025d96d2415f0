// Docker's link syntax: a link spec as HostConfig.Links and EndpointSettings.Links
// give it, and the alias it names.
import { invalidParameter } from '../../errors.js';

/** dockerd's opts.ParseLink: `name:alias`, `name` (alias the name), or inspect's own `/name:/parent/alias`. */
export function parseLink(spec: string): { name: string; alias: string } {
  if (spec === '') throw invalidParameter('empty string specified for links');
  const parts = spec.split(':');
  if (parts.length > 2) throw invalidParameter(`bad format for links: ${spec}`);
  const [name = '', alias] = parts;
  if (alias === undefined) return { name, alias: name };
  if (name.startsWith('/')) return { name: name.slice(1), alias: alias.slice(alias.lastIndexOf('/') + 1) };
  return { name, alias };
}

/** A link's alias goes in /etc/hosts and names variables: a container name's characters only. */
export function checkLinkAlias(alias: string): void {
  if (!/^[a-zA-Z0-9][a-zA-Z0-9_.-]*$/.test(alias)) {
    throw invalidParameter(`invalid link alias ${JSON.stringify(alias)}: it must be a valid container name`);
  }
}
