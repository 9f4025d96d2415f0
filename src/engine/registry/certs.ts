// Docker's per-registry TLS convention: <certsDir>/<host[:port]>/ holds
//   *.crt            CA certificates, trusted in addition to the system roots
//   *.cert + *.key   a client certificate and its key (same base name)
// as dockerd reads them (registry.ReadCertsDirectory), from each configured
// directory in turn (/etc/docker/certs.d, then berth's own /etc/berth/certs.d).
import { readdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import { systemError } from '../../errors.js';

export interface HostCerts {
  /** PEM CA certificates. */
  ca: string[];
  /** The first client certificate pair found (Node presents one per connection). */
  cert?: string;
  key?: string;
}

async function listDir(dir: string): Promise<string[]> {
  try {
    return (await readdir(dir)).sort();
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT' || (e as NodeJS.ErrnoException).code === 'ENOTDIR') return [];
    throw systemError(`reading ${dir}: ${(e as Error).message}`, e);
  }
}

/**
 * Reads the certificates configured for `host` (as written in the image
 * reference or mirror URL, e.g. `myregistry:5000`). A `.cert` without its
 * `.key` (or the reverse) is an error with dockerd's wording: a half-configured
 * client certificate must not silently become an anonymous connection.
 */
export async function readHostCerts(certsDirs: readonly string[], host: string): Promise<HostCerts> {
  const out: HostCerts = { ca: [] };
  // A host never contains a path separator or "..": refuse rather than read elsewhere.
  if (!host || host.includes('/') || host.includes('\\') || host === '.' || host === '..') return out;
  for (const base of certsDirs) {
    const dir = path.join(base, host);
    const names = await listDir(dir);
    for (const name of names) {
      const file = path.join(dir, name);
      if (name.endsWith('.crt')) out.ca.push(await readFile(file, 'utf8'));
      else if (name.endsWith('.cert')) {
        const keyName = `${name.slice(0, -'.cert'.length)}.key`;
        if (!names.includes(keyName)) {
          throw systemError(
            `missing key ${keyName} for client certificate ${name}. CA certificates must use the extension .crt`,
          );
        }
        if (!out.cert) {
          out.cert = await readFile(file, 'utf8');
          out.key = await readFile(path.join(dir, keyName), 'utf8');
        }
      } else if (name.endsWith('.key')) {
        const certName = `${name.slice(0, -'.key'.length)}.cert`;
        if (!names.includes(certName)) throw systemError(`missing client certificate ${certName} for key ${name}`);
      }
    }
  }
  return out;
}
