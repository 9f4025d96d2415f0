// Legacy links (HostConfig.Links, `docker run --link name:alias`), as dockerd
// makes them on the default bridge (daemon/links, addLegacyLinks): at create
// the linked container (the child) must exist and is recorded; at each start
// of the linking container (the parent) the child must run, and the parent
// gets an /etc/hosts line for it (its alias, hostname and name at its bridge
// address) and the variables that describe it (ALIAS_NAME, ALIAS_PORT…,
// ALIAS_ENV_…). The child is also named /<parent>/<alias>: in the list's
// Names, and as a name to find it by. On a user network dockerd ignores
// HostConfig.Links: there a link is an endpoint's (endpoints.ts).
import { invalidParameter, systemError } from '../../errors.js';
import { checkLinkAlias, parseLink } from '../network/endpoints.js';
import type { LinkRow } from '../store/containers.js';
import type { Container, LegacyLink } from './container.js';

/** The predefined networks, where HostConfig.Links are legacy links (not a user network's). */
const isLegacyLinkMode = (mode: string) => mode === 'default' || mode === 'bridge';

/** Where dockerd registers HostConfig.Links as legacy links: the predefined networks but the host's (where they do nothing on none). */
export const registersLegacyLinks = (mode: string) => isLegacyLinkMode(mode) || mode === 'none';

/**
 * At create: each HostConfig.Links entry's child, found (dockerd's 400 when it
 * is not: a 404 would read as the image missing) through any container:<id>
 * chain to the container that owns the network, and not on the host's network.
 */
export function resolveLinks(
  links: readonly string[],
  find: (ref: string) => Container,
): { childId: string; alias: string }[] {
  const out = new Map<string, { childId: string; alias: string }>();
  for (const spec of links) {
    const { name, alias } = parseLink(spec);
    checkLinkAlias(alias);
    let child = findForLink(find, name);
    for (let hops = 0; child.hostConfig.NetworkMode.startsWith('container:') && hops < 10; hops++) {
      child = findForLink(find, child.hostConfig.NetworkMode.slice('container:'.length));
    }
    if (child.hostConfig.NetworkMode === 'host') {
      throw invalidParameter(
        "conflicting options: host type networking can't be used with links. This would result in undefined behavior",
      );
    }
    out.set(alias, { childId: child.id, alias }); // a later one of the same alias wins, as in dockerd's index
  }
  return [...out.values()];
}

/**
 * HostConfig.Links on a predefined network, at create: legacy links, their
 * children found now, as dockerd's registerLinks finds them. On network none
 * they do nothing, as with dockerd (docker-compose 1.29 sends a service's
 * links there). On a user network they are its links (withUserNetworkLinks).
 */
export function legacyLinks(
  mode: string,
  links: readonly string[],
  find: (ref: string) => Container,
): { childId: string; alias: string }[] {
  if (mode === 'host') {
    throw invalidParameter(
      "conflicting options: host type networking can't be used with links. This would result in undefined behavior",
    );
  }
  if (!registersLegacyLinks(mode)) return [];
  return resolveLinks(links, find);
}

/**
 * HostConfig.Links with a user network as NetworkMode: dockerd ignores them
 * there (the docker CLI sends them as the network's endpoint links too); berth
 * applies them as that network's links, unless the endpoint names its own.
 */
export function withUserNetworkLinks(
  configs: Record<string, unknown>,
  mode: string,
  links: string[],
): Record<string, unknown> {
  if (!links.length || mode.startsWith('container:') || mode === 'none') return configs;
  const own = (configs[mode] ?? {}) as { Links?: string[] | null };
  if (own.Links?.length) return configs;
  return { ...configs, [mode]: { ...own, Links: links } };
}

function findForLink(find: (ref: string) => Container, name: string): Container {
  try {
    return find(name);
  } catch (e) {
    const msg = (e as Error).message;
    throw invalidParameter(`could not get container for ${name}: ${msg}`);
  }
}

/** What the lookup shows of a container's links: HostConfig.Links as dockerd's inspect, and its link names. */
export function linkViews(id: string, rows: LinkRow[]): { children: LegacyLink[]; links: string[]; names: string[] } {
  const mine = rows.filter((r) => r.parent_id === id);
  return {
    children: mine.map((r) => ({ childId: r.child_id, childName: r.child_name, alias: r.alias })),
    // dockerd: "<child name>:<full link name>"; a removed child has no name left to show.
    links: mine.filter((r) => r.child_name !== null).map((r) => `/${r.child_name}:/${r.parent_name}/${r.alias}`),
    names: rows.filter((r) => r.child_id === id).map((r) => `/${r.parent_name}/${r.alias}`),
  };
}

/** What a start of the parent gets from its links: /etc/hosts lines and environment variables. */
export interface LinkedSettings {
  hosts: string[];
  env: string[];
}

/**
 * At the parent's start: each child runs, and its address on the default
 * bridge goes in the parent's /etc/hosts and environment (dockerd's wording
 * for a child that does not run, a 500 from the start).
 */
export function linkedSettings(
  parent: Container,
  lookup: { byId(id: string): Container | undefined },
  bridgeAddress: (id: string) => string | undefined,
  /** false: a child that does not run is left out (rewriting the files of a parent that runs already). */
  strict = true,
): LinkedSettings {
  const out: LinkedSettings = { hosts: [], env: [] };
  const parentIp = bridgeAddress(parent.id);
  if (parentIp === undefined) return out; // dockerd: a parent not on the default bridge gets nothing of its links
  for (const link of parent.legacyLinks) {
    const fullName = `/${parent.name}/${link.alias}`;
    const child = lookup.byId(link.childId);
    const running = child?.status === 'running' || child?.status === 'paused';
    if (!running && !strict) continue;
    if (!child) throw systemError(`Cannot link to a removed container: ${link.alias} AS ${fullName}`);
    if (!running) throw systemError(`Cannot link to a non running container: /${child.name} AS ${fullName}`);
    const childIp = bridgeAddress(child.id);
    if (childIp === undefined) throw systemError(`container ${child.id} not attached to default bridge network`);
    // dockerd: the alias, the hostname, and the name when the alias is not it.
    const names = [link.alias, child.config.Hostname, ...(link.alias === child.name ? [] : [child.name])];
    if (childIp) out.hosts.push(`${childIp}\t${names.join(' ')}`);
    out.env.push(...linkEnv(childIp, fullName, child.config.Env ?? [], Object.keys(child.config.ExposedPorts ?? {})));
  }
  return out;
}

interface Port {
  num: number;
  proto: string;
}

/** dockerd's withTCPPriority: TCP first, then by number; other protocols by name, then number. */
function comparePorts(a: Port, b: Port): number {
  if (a.proto === b.proto) return a.num - b.num;
  if (a.proto === 'tcp') return -1;
  if (b.proto === 'tcp') return 1;
  return a.proto < b.proto ? -1 : 1;
}

/** dockerd's Link.ToEnv: the variables describing a linked container, named after the alias. */
export function linkEnv(childIp: string, fullName: string, childEnv: readonly string[], exposed: string[]): string[] {
  const alias = fullName
    .slice(fullName.lastIndexOf('/') + 1)
    .toUpperCase()
    .replaceAll('-', '_');
  const ports: Port[] = exposed
    .map((p) => {
      const [num = '', proto = 'tcp'] = p.split('/');
      return { num: Number(num), proto };
    })
    .filter((p) => Number.isInteger(p.num))
    .sort(comparePorts);
  const env: string[] = [];
  let start: Port | undefined;
  let end: Port | undefined;
  for (const [i, p] of ports.entries()) {
    if (i === 0) {
      start = end = p;
      env.push(`${alias}_PORT=${p.proto}://${childIp}:${p.num}`);
    }
    const prefix = `${alias}_PORT_${p.num}_${p.proto.toUpperCase()}`;
    env.push(
      `${prefix}=${p.proto}://${childIp}:${p.num}`,
      `${prefix}_ADDR=${childIp}`,
      `${prefix}_PORT=${p.num}`,
      `${prefix}_PROTO=${p.proto}`,
    );
    // A range: consecutive numbers of one protocol.
    if (p.num === end!.num + 1 && p.proto === end!.proto) {
      end = p;
      if (i < ports.length - 1) continue;
    }
    if (end !== start) {
      const s = start!;
      const e = end!;
      const rp = `${alias}_PORT_${s.num}_${s.proto.toUpperCase()}`;
      env.push(
        `${rp}_START=${s.proto}://${childIp}:${s.num}`,
        `${rp}_PORT_START=${s.num}`,
        `${rp}_END=${e.proto}://${childIp}:${e.num}`,
        `${rp}_PORT_END=${e.num}`,
      );
    }
    start = end = p;
  }
  env.push(`${alias}_NAME=${fullName}`);
  for (const v of childEnv) {
    const eq = v.indexOf('=');
    if (eq === -1) continue;
    const name = v.slice(0, eq);
    // dockerd leaves out what a build sets and means nothing of the linked container.
    if (name === 'HOME' || name === 'PATH') continue;
    env.push(`${alias}_ENV_${name}=${v.slice(eq + 1)}`);
  }
  return env;
}

/** The parent's environment: its link variables first, overridden by its own Config.Env of the same name. */
export function withLinkEnv(linkVars: readonly string[], own: readonly string[]): string[] {
  const ownNames = new Set(own.map((v) => v.split('=')[0]));
  return [...linkVars.filter((v) => !ownNames.has(v.split('=')[0])), ...own];
}

/**
 * The link variables a container's process got at its start: what its
 * environment has beyond its Config.Env and the defaults (an exec gets them
 * too, as dockerd's does).
 */
export function linkVarsOf(processEnv: readonly string[], c: Container): string[] {
  if (!c.legacyLinks.length) return [];
  const own = new Set((c.config.Env ?? []).map((v) => v.split('=')[0]));
  const defaults = new Set(['PATH', 'HOSTNAME', 'TERM', 'HOME']);
  return processEnv.filter((v) => {
    const name = v.split('=')[0]!;
    return !own.has(name) && !defaults.has(name);
  });
}

/** The parts of a link name /<parent>/<alias>, or undefined for a plain name. */
export function splitLinkName(ref: string): { parent: string; alias: string } | undefined {
  const m = /^\/?([^/]+)\/([^/]+)$/.exec(ref);
  return m ? { parent: m[1]!, alias: m[2]! } : undefined;
}
