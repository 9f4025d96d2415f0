// The Dockerfile language: parsing, word expansion, typed instructions and
// stages, and the config-only instructions. Pure functions, no I/O.
export * from './config.js';
export * from './expand.js';
export * from './instructions.js';
export * from './parse.js';
export * from './heredoc.js';
export * from './run-mount.js';
export * from './syntax.js';
