// Node's built-in modules that berthd needs only for some requests (a pull, a
// rotated log, a layer to pack), loaded when first used rather than at start:
// zlib alone costs a fresh daemon ~5 ms before its first answer, https and tls
// ~2 ms (docs/decisions.md, "Start-up").
import type * as Https from 'node:https';
import type * as Tls from 'node:tls';
import type * as Zlib from 'node:zlib';

export const zlib = (): typeof Zlib => process.getBuiltinModule('node:zlib');
export const https = (): typeof Https => process.getBuiltinModule('node:https');
export const tls = (): typeof Tls => process.getBuiltinModule('node:tls');
