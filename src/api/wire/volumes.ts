// Docker's volume shapes (list entries and inspect are the same), and a container's Mounts.
import type { ContainerMount, Volume } from '../../engine/index.js';

/** RFC 3339 to the second with the local offset, as Go's time.RFC3339 prints a volume's CreatedAt. */
function rfc3339(ms: number): string {
  const d = new Date(ms);
  const off = -d.getTimezoneOffset();
  const pad = (n: number) => String(Math.trunc(Math.abs(n))).padStart(2, '0');
  const local = new Date(ms + off * 60_000).toISOString().slice(0, 19);
  return off === 0 ? `${local}Z` : `${local}${off > 0 ? '+' : '-'}${pad(off / 60)}:${pad(off % 60)}`;
}

export function volumeShape(v: Volume, usage?: { Size: number; RefCount: number }): Record<string, unknown> {
  return {
    CreatedAt: rfc3339(v.created),
    Driver: v.driver,
    Labels: v.labels,
    Mountpoint: v.mountpoint,
    Name: v.name,
    Options: v.options,
    Scope: 'local',
    ...(usage ? { UsageData: usage } : {}),
  };
}

/** A container's `Mounts`, as dockerd lists them in inspect and in `GET /containers/json`. */
export function mountsShape(mounts: ContainerMount[]): Record<string, unknown>[] {
  return mounts.map((m) => ({
    Type: m.type,
    ...(m.name ? { Name: m.name } : {}),
    Source: m.source,
    Destination: m.destination,
    ...(m.type === 'volume' ? { Driver: 'local' } : {}),
    Mode: m.mode,
    RW: m.rw,
    Propagation: m.propagation,
  }));
}
