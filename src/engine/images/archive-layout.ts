// The image archive `docker save` writes and `docker load` reads, as Docker 25
// lays it out: an OCI image layout (oci-layout, index.json, blobs/<alg>/<hex>)
// with Docker's own manifest.json and repositories beside it, so that both a
// dockerd 20.10 (which reads manifest.json) and OCI tools (index.json) read it.
export const OCI_LAYOUT_FILE = 'oci-layout';
export const OCI_LAYOUT = { imageLayoutVersion: '1.0.0' };
export const INDEX_FILE = 'index.json';
export const MANIFEST_FILE = 'manifest.json';
export const REPOSITORIES_FILE = 'repositories';

/** containerd's annotation for the full name of an index entry (Docker 25 writes it). */
export const ANNOTATION_IMAGE_NAME = 'io.containerd.image.name';
/** The OCI annotation: the tag of an index entry (or, from other tools, a full name). */
export const ANNOTATION_REF_NAME = 'org.opencontainers.image.ref.name';

/** One image of manifest.json. */
export interface ArchiveManifestEntry {
  Config: string;
  RepoTags: string[] | null;
  Layers: string[];
}

/** `blobs/sha256/<hex>` for a digest. */
export const blobPath = (digest: string): string => `blobs/${digest.replace(':', '/')}`;
