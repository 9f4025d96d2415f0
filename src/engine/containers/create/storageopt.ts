// HostConfig.StorageOpt: per-container options of the storage driver. With
// overlay2, dockerd's only one is `size`, a project quota on the container's
// upper directory, which needs xfs mounted with pquota
// (daemon/graphdriver/overlay2/overlay.go CreateReadWrite, parseStorageOpt).
// berth sets no project quotas: on a filesystem that cannot have them the
// refusal is dockerd's, on xfs (where dockerd could) it says berth cannot.
import { statfsSync } from 'node:fs';
import { invalidParameter } from '../../../errors.js';

const XFS_SUPER_MAGIC = 0x58465342;

/** Refuses a StorageOpt that asks for anything; `root` is where the containers' layers live. */
export function checkStorageOpt(opts: unknown, root: string): void {
  const keys = typeof opts === 'object' && opts !== null ? Object.keys(opts) : [];
  if (!keys.length) return;
  // dockerd tests for an exact `size` first, then reads every key lower-cased.
  if (!keys.includes('size')) {
    const unknown = keys.map((k) => k.toLowerCase()).find((k) => k !== 'size');
    if (unknown !== undefined) throw invalidParameter(`Unknown option ${unknown}`);
  }
  if (isXfs(root)) {
    throw invalidParameter('StorageOpt size is not supported by berth yet: it sets no project quotas');
  }
  throw invalidParameter("--storage-opt is supported only for overlay over xfs with 'pquota' mount option");
}

function isXfs(dir: string): boolean {
  try {
    return statfsSync(dir).type === XFS_SUPER_MAGIC;
  } catch {
    return false;
  }
}
