// Content digests (`sha256:<hex>`) as go-digest parses them, with its error texts.
// A leaf: imports nothing of the engine's folders.
import { invalidParameter } from '../errors.js';

/** Hex length of each algorithm go-digest knows; anything else is unsupported. */
export const DIGEST_ALGORITHMS: Readonly<Record<string, number>> = { sha256: 64, sha384: 96, sha512: 128 };

export interface ParsedDigest {
  algorithm: 'sha256' | 'sha384' | 'sha512';
  encoded: string;
}

/** Validates `alg:hex` as go-digest does, with its error texts. */
export function parseDigest(s: string): ParsedDigest {
  const i = s.indexOf(':');
  if (i < 1 || i + 1 >= s.length) throw invalidParameter('invalid checksum digest format');
  const algorithm = s.slice(0, i);
  const encoded = s.slice(i + 1);
  const length = DIGEST_ALGORITHMS[algorithm];
  if (length === undefined) {
    // go-digest: a well-formed digest of an unknown algorithm is "unsupported", junk is "format".
    const wellFormed = /^[a-z0-9]+(?:[.+_-][a-z0-9]+)*:[a-zA-Z0-9=_-]+$/.test(s);
    throw invalidParameter(wellFormed ? 'unsupported digest algorithm' : 'invalid checksum digest format');
  }
  if (encoded.length !== length) throw invalidParameter('invalid checksum digest length');
  if (!/^[a-f0-9]+$/.test(encoded)) throw invalidParameter('invalid checksum digest format');
  return { algorithm: algorithm as ParsedDigest['algorithm'], encoded };
}

export function isDigest(s: string): boolean {
  try {
    parseDigest(s);
    return true;
  } catch {
    return false;
  }
}
