// HostConfig.Devices: host device nodes made in the container's /dev, with
// the devices cgroup allowing what CgroupPermissions says (dockerd's
// --device host[:container[:rwm]]). The form is checked at create; the host
// node is looked at when the spec is built, at each start, as dockerd does.
import { statSync } from 'node:fs';
import path from 'node:path';
import { invalidParameter, messageOf } from '../../../errors.js';
import type { OciDeviceRule, OciLinuxDevice } from './oci.js';

export interface DeviceMapping {
  PathOnHost?: string | null;
  PathInContainer?: string | null;
  CgroupPermissions?: string | null;
}

const PERMISSIONS = /^[rwm]{1,3}$/;

/** The checks dockerd makes of a mapping at create (validateDevice). */
export function checkDevice(d: DeviceMapping): void {
  const host = d.PathOnHost ?? '';
  if (!path.isAbsolute(host)) throw invalidParameter(`${host} is not an absolute path`);
  const inContainer = d.PathInContainer || host;
  if (!path.isAbsolute(inContainer)) throw invalidParameter(`${inContainer} is not an absolute path`);
  const mode = d.CgroupPermissions || 'rwm';
  if (!PERMISSIONS.test(mode)) throw invalidParameter(`invalid device mode: ${mode}`);
}

/** The kernel's major and minor numbers of a dev_t (glibc's gnu_dev_major/minor). */
export const major = (rdev: number) => Number(((BigInt(rdev) >> 8n) & 0xfffn) | ((BigInt(rdev) >> 32n) & ~0xfffn));
export const minor = (rdev: number) => Number((BigInt(rdev) & 0xffn) | ((BigInt(rdev) >> 12n) & ~0xffn));

/** The node to make in the container, and the cgroup rule that lets it be used. */
export function deviceOf(d: DeviceMapping): { node: OciLinuxDevice; rule: OciDeviceRule } {
  const host = d.PathOnHost ?? '';
  let st: ReturnType<typeof statSync>;
  try {
    st = statSync(host);
  } catch (e) {
    const why = (e as NodeJS.ErrnoException).code === 'ENOENT' ? 'no such file or directory' : messageOf(e);
    throw invalidParameter(`error gathering device information while adding custom device "${host}": ${why}`);
  }
  const type = st.isCharacterDevice() ? 'c' : st.isBlockDevice() ? 'b' : undefined;
  if (!type)
    throw invalidParameter(
      `error gathering device information while adding custom device "${host}": not a device node`,
    );
  const node: OciLinuxDevice = {
    path: d.PathInContainer || host,
    type,
    major: major(st.rdev),
    minor: minor(st.rdev),
    fileMode: st.mode & 0o7777,
    uid: st.uid,
    gid: st.gid,
  };
  return {
    node,
    rule: { allow: true, type, major: node.major, minor: node.minor, access: d.CgroupPermissions || 'rwm' },
  };
}
