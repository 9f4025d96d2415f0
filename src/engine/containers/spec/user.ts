// Docker's `User`: name or uid, optionally :group or :gid, resolved in the
// image's /etc/passwd and /etc/group (read inside the rootfs, never executed).
import { invalidParameter } from '../../../errors.js';
import { readFileInRoot } from '../../os/rootfs.js';

export interface ResolvedUser {
  uid: number;
  gid: number;
  additionalGids: number[];
  home: string;
}

const isNum = (s: string) => /^\d+$/.test(s);

function parseDb(text: string | null): string[][] {
  return (text ?? '')
    .split('\n')
    .filter((l) => l && !l.startsWith('#'))
    .map((l) => l.split(':'));
}

/**
 * `user` in the image's /etc/passwd and /etc/group, with `groupAdd`
 * (HostConfig.GroupAdd: gids, or group names in /etc/group) among the
 * supplementary groups.
 */
export async function resolveUser(
  rootfs: string,
  user: string,
  groupAdd: readonly string[] = [],
): Promise<ResolvedUser> {
  const [u = '', g] = user.split(':', 2);
  const [passwd, groups] = (
    await Promise.all([readFileInRoot(rootfs, '/etc/passwd'), readFileInRoot(rootfs, '/etc/group')])
  ).map(parseDb) as [string[][], string[][]];
  let uid = 0;
  let gid = 0;
  let home = '/';
  let name = 'root';
  if (u !== '') {
    const entry = passwd.find((p) => (isNum(u) ? p[2] === u : p[0] === u));
    if (entry) {
      uid = Number(entry[2]);
      gid = Number(entry[3] ?? 0);
      home = entry[5] || '/';
      name = entry[0]!;
    } else if (isNum(u)) {
      uid = Number(u);
      name = '';
    } else {
      throw invalidParameter(`unable to find user ${u}: no matching entries in passwd file`);
    }
  } else {
    const root = passwd.find((p) => p[2] === '0');
    if (root) home = root[5] || '/';
  }
  if (g !== undefined && g !== '') {
    const entry = groups.find((e) => (isNum(g) ? e[2] === g : e[0] === g));
    if (entry) gid = Number(entry[2]);
    else if (isNum(g)) gid = Number(g);
    else throw invalidParameter(`unable to find group ${g}: no matching entries in group file`);
  }
  // Supplementary groups as dockerd gives them: the primary group first (so a uid:gid
  // of no entry still has its gid among them), then every group that lists the user
  // by name when no group was given (runc's rule), then GroupAdd's.
  const listed =
    name && (g === undefined || g === '')
      ? groups.filter((e) => (e[3] ?? '').split(',').includes(name)).map((e) => Number(e[2]))
      : [];
  const added = groupAdd.map((g) => {
    const entry = groups.find((e) => e[0] === g);
    if (entry) return Number(entry[2]);
    if (isNum(g)) return Number(g);
    throw invalidParameter(`Unable to find group ${g}: no matching entries in group file`);
  });
  return { uid, gid, additionalGids: [...new Set([gid, ...listed, ...added])], home };
}
