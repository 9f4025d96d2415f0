// The OCI / Docker image config: the parts berth reads.
import { invalidParameter, messageOf } from '../../errors.js';
import type { ConfigFields } from '../dockerfile/config.js';
import type { ImageRow } from '../store/images.js';

/** A container config as an image carries it: the fields Dockerfile instructions set, and the rest as given. */
export interface ContainerConfigFields extends ConfigFields {
  Hostname?: string;
  Domainname?: string;
  [k: string]: unknown;
}

export interface HistoryEntry {
  created?: string;
  created_by?: string;
  author?: string;
  comment?: string;
  empty_layer?: boolean;
}

export interface ImageConfig {
  architecture?: string;
  variant?: string;
  os?: string;
  'os.version'?: string;
  created?: string;
  author?: string;
  comment?: string;
  container?: string;
  container_config?: ContainerConfigFields;
  docker_version?: string;
  config?: ContainerConfigFields;
  rootfs?: { type: string; diff_ids: string[] };
  history?: HistoryEntry[];
  [k: string]: unknown;
}

/** A config's bytes read as JSON with its diff ids checked; a 400 "invalid image config" (naming `what`) otherwise. */
export function parseImageConfig(bytes: Buffer, what = ''): { config: ImageConfig; diffIds: string[] } {
  try {
    const config = JSON.parse(bytes.toString('utf8')) as ImageConfig;
    return { config, diffIds: diffIdsOf(config) };
  } catch (e) {
    throw invalidParameter(`invalid image config${what ? ` ${what}` : ''}: ${messageOf(e)}`);
  }
}

/** The image config's diff ids, checked to be a list of sha256 digests. */
export function diffIdsOf(config: ImageConfig): string[] {
  const ids = config.rootfs?.diff_ids;
  if (!Array.isArray(ids) || !ids.every((d) => typeof d === 'string' && /^sha256:[0-9a-f]{64}$/.test(d))) {
    throw new Error('image config has no valid rootfs.diff_ids');
  }
  return ids;
}

/** The record of an image made from a registry's or an archive's config: no parent, its layers' size. */
export function imageRowOf(id: string, configBytes: Buffer, config: ImageConfig, layers: { size: number }[]): ImageRow {
  return {
    id,
    parent: '',
    config: configBytes.toString('utf8'),
    size: layers.reduce((a, r) => a + r.size, 0),
    created: config.created ?? new Date(0).toISOString(),
    added_at: Date.now(),
  };
}

/** Seconds since the epoch, as the images API gives `Created`. */
export const createdSeconds = (created: string | undefined): number => {
  const t = created ? Date.parse(created) : NaN;
  return Number.isNaN(t) ? 0 : Math.floor(t / 1000);
};

/** A config in Docker's full shape and field order (empty optional maps left out, as Go's omitempty). */
export function dockerConfig(c: ContainerConfigFields): ContainerConfigFields {
  const base: ContainerConfigFields = {
    Hostname: '',
    Domainname: '',
    User: '',
    AttachStdin: false,
    AttachStdout: false,
    AttachStderr: false,
    ExposedPorts: undefined,
    Tty: false,
    OpenStdin: false,
    StdinOnce: false,
    Env: null,
    Cmd: null,
    Healthcheck: undefined,
    ArgsEscaped: undefined,
    Image: '',
    Volumes: null,
    WorkingDir: '',
    Entrypoint: null,
    OnBuild: null,
    Labels: null,
  };
  const out: ContainerConfigFields = { ...base, ...c };
  if (!out.ExposedPorts || Object.keys(out.ExposedPorts).length === 0) delete out.ExposedPorts;
  for (const k of Object.keys(out)) if (out[k] === undefined) delete out[k];
  return out;
}
