// zlib, which berthd needs only for some requests (a rotated log, a layer to
// pack or unpack), loaded when first used rather than at start: it costs a
// fresh daemon ~5 ms before its first answer (docs/decisions/performance.md, "Start-up").
import type * as Zlib from 'node:zlib';

export const zlib = (): typeof Zlib => process.getBuiltinModule('node:zlib');
