// Shared helpers for the bench scripts (plain .mjs: run with bare `node`).
// Starts berthd, Debian's dockerd and a loopback docker-registry on temp
// directories, talks HTTP over unix sockets, and undoes everything it started
// (daemons, containers, mounts, directories) when the script ends, fails or is
// interrupted: every start registers its own clean-up, run last-in first-out.
// Its parts are in bench/lib/, one file a concern; this file gathers them for the scripts.
export * from './lib/core.mjs';
export * from './lib/http.mjs';
export * from './lib/mounts.mjs';
export * from './lib/registry.mjs';
export * from './lib/daemons.mjs';
export * from './lib/networks.mjs';
export * from './lib/cli.mjs';
export * from './lib/floor.mjs';
export * from './lib/processes.mjs';
