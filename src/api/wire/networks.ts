// Docker's network shapes: list entries, inspect, and a container's endpoints.
import { z } from 'zod';
import { lazySchema } from '../../lazy-schema.js';
import type { ContainerEndpoint, Network, NetworkEndpoint, PortBinding } from '../../engine/index.js';
import { versionBelow } from '../version.js';

export const ConnectBody = lazySchema(() =>
  z.looseObject({ Container: z.string(), EndpointConfig: z.unknown().nullish() }),
);
export const DisconnectBody = lazySchema(() => z.looseObject({ Container: z.string(), Force: z.boolean().nullish() }));

/** A network as `GET /networks` lists it (no containers, as dockerd from API 1.28) and as inspect shows it. */
export function networkShape(n: Network, apiVersion: string, endpoints?: NetworkEndpoint[]): Record<string, unknown> {
  return {
    Name: n.name,
    Id: n.id,
    Created: new Date(n.created).toISOString(),
    Scope: 'local',
    Driver: n.driver,
    // API 1.47's EnableIPv4 came with 1.48 in dockerd; berth's networks always have IPv4.
    ...(versionBelow(apiVersion, '1.48') ? {} : { EnableIPv4: n.driver === 'bridge' }),
    EnableIPv6: n.enableIPv6,
    IPAM: {
      Driver: 'default',
      Options: n.predefined ? null : n.ipamOptions,
      Config: n.subnet
        ? [
            {
              Subnet: n.subnet,
              Gateway: n.gateway,
              ...(n.ipRange ? { IPRange: n.ipRange } : {}),
              ...(Object.keys(n.auxAddresses).length ? { AuxiliaryAddresses: n.auxAddresses } : {}),
            },
            ...(n.subnet6
              ? [
                  {
                    Subnet: n.subnet6,
                    ...(n.gateway6 ? { Gateway: n.gateway6 } : {}),
                    ...(n.ipRange6 ? { IPRange: n.ipRange6 } : {}),
                  },
                ]
              : []),
          ]
        : [],
    },
    Internal: n.internal,
    Attachable: n.attachable,
    Ingress: false,
    ConfigFrom: { Network: '' },
    ConfigOnly: false,
    Containers: Object.fromEntries(
      (endpoints ?? []).map((e) => [
        e.containerId,
        {
          Name: e.containerName,
          EndpointID: e.row.id,
          MacAddress: e.row.mac,
          IPv4Address: e.row.ip ? `${e.row.ip}/${n.prefixLen}` : '',
          IPv6Address: e.row.ip6 ? `${e.row.ip6}/${n.prefixLen6}` : '',
        },
      ]),
    ),
    Options: n.options,
    Labels: n.labels,
  };
}

/** An endpoint's IPAMConfig as asked: its static address, its link-local ones; null when neither. */
function ipamConfig(row: ContainerEndpoint['row']): Record<string, unknown> | null {
  const linkLocal = JSON.parse(row.link_local_ips) as string[];
  if (!row.static_ip && !row.static_ip6 && !linkLocal.length) return null;
  return {
    ...(row.static_ip ? { IPv4Address: row.ip } : {}),
    ...(row.static_ip6 ? { IPv6Address: row.ip6 } : {}),
    ...(linkLocal.length ? { LinkLocalIPs: linkLocal } : {}),
  };
}

/** NetworkSettings.Networks of a container: one entry per endpoint; addresses while it runs. */
export function containerNetworks(
  endpoints: ContainerEndpoint[],
  running: boolean,
  apiVersion: string,
): Record<string, unknown> {
  return Object.fromEntries(
    endpoints.map((e) => {
      const live = running && e.row.ip !== '';
      return [
        e.network.name,
        {
          IPAMConfig: ipamConfig(e.row),
          Links: e.links.length ? e.links : null,
          Aliases: e.aliases.length ? e.aliases : null,
          // A MAC given at create or connect is shown before the start (dockerd's configured one, API 1.44+).
          MacAddress: live || e.macGiven ? e.row.mac : '',
          DriverOpts: null,
          NetworkID: e.network.id,
          EndpointID: running ? e.row.id : '',
          Gateway: live ? e.network.gateway : '',
          IPAddress: live ? e.row.ip : '',
          IPPrefixLen: live ? e.network.prefixLen : 0,
          IPv6Gateway: live && e.row.ip6 ? e.network.gateway6 : '',
          GlobalIPv6Address: live ? e.row.ip6 : '',
          GlobalIPv6PrefixLen: live && e.row.ip6 ? e.network.prefixLen6 : 0,
          // API 1.44: the names the endpoint answers to on its network.
          ...(versionBelow(apiVersion, '1.44') ? {} : { DNSNames: live && !e.network.predefined ? e.dnsNames : null }),
        },
      ];
    }),
  );
}

const portKey = (port: number, proto: string) => `${port}/${proto}`;

/** NetworkSettings.Ports: every exposed or published port, with its host bindings (null when not published). */
export function portMap(
  exposed: Record<string, unknown> | null | undefined,
  ports: PortBinding[],
): Record<string, { HostIp: string; HostPort: string }[] | null> {
  const out: Record<string, { HostIp: string; HostPort: string }[] | null> = {};
  for (const k of Object.keys(exposed ?? {})) out[k.includes('/') ? k : `${k}/tcp`] = null;
  for (const p of ports) {
    const k = portKey(p.containerPort, p.proto);
    out[k] = [...(out[k] ?? []), { HostIp: p.hostIp, HostPort: String(p.hostPort) }];
  }
  return out;
}

/** The list's Ports: published ones with their host side, exposed ones without. */
export function listedPorts(
  exposed: Record<string, unknown> | null | undefined,
  ports: PortBinding[],
): Record<string, unknown>[] {
  const published = new Set(ports.map((p) => portKey(p.containerPort, p.proto)));
  const unpublished = Object.keys(exposed ?? {})
    .map((k) => k.split('/'))
    .filter(([port, proto = 'tcp']) => !published.has(portKey(Number(port), proto)))
    .map(([port, proto = 'tcp']) => ({ PrivatePort: Number(port), Type: proto }));
  const bound = ports.map((p) => ({
    IP: p.hostIp,
    PrivatePort: p.containerPort,
    PublicPort: p.hostPort,
    Type: p.proto,
  }));
  return [...bound, ...unpublished];
}
