import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { scratchDir } from '../harness/tmp.js';
import { ConfigError, loadConfig, parseHost } from '../../src/config.js';

const tmp = scratchDir('berth-config-');
const file = (name: string, json: unknown) => {
  const p = path.join(tmp, name);
  writeFileSync(p, JSON.stringify(json));
  return p;
};
const missing = path.join(tmp, 'absent.json');

describe('loadConfig', () => {
  it("takes dockerd's exec options with the cgroupfs driver and refuses the ones berth cannot honour", () => {
    const cfg = file('x0.json', {});
    for (const ok of [[], ['native.cgroupdriver=cgroupfs'], ['isolation=process'], ['cgroupdriver']]) {
      expect(() => loadConfig([...ok.flatMap((o) => ['--exec-opt', o]), '--config-file', cfg], {})).not.toThrow();
    }
    expect(() =>
      loadConfig(['--config-file', file('x1.json', { 'exec-opts': ['native.cgroupdriver=cgroupfs'] })], {}),
    ).not.toThrow();
    expect(() =>
      loadConfig(['--config-file', file('x2.json', { 'exec-opts': ['native.cgroupdriver=systemd'] })], {}),
    ).toThrow(/native.cgroupdriver option systemd is not supported by berth.*--cgroup-driver=cgroupfs/);
    expect(() => loadConfig(['--exec-opt', 'native.cgroupdriver=none', '--config-file', cfg], {})).toThrow(
      'native.cgroupdriver option none is internally used and cannot be specified manually',
    );
    expect(() => loadConfig(['--exec-opt', 'native.cgroupdriver=lxc', '--config-file', cfg], {})).toThrow(
      'native.cgroupdriver option lxc not supported',
    );
  });

  it("has dockerd-like defaults when the default config file doesn't exist", () => {
    // The default file may not exist; only an explicit --config-file must.
    const { config } = loadConfig(['--data-root', '/d'], {});
    expect(config.hosts).toEqual(['unix:///run/berth/berth.sock']);
    expect(config.execRoot).toBe('/run/berth');
    expect(config.maxConcurrentDownloads).toBe(3);
    expect(config.defaultRuntime).toBe('runc');
    expect(Object.isFrozen(config)).toBe(true);
  });

  it('takes registry-stall-timeout in seconds (default 60), from a flag or daemon.json, and refuses nonsense', () => {
    expect(loadConfig(['--config-file', file('s0.json', {})], {}).config.registryStallTimeoutMs).toBe(60_000);
    expect(
      loadConfig(['--registry-stall-timeout', '1.5', '--config-file', file('s1.json', {})], {}).config
        .registryStallTimeoutMs,
    ).toBe(1500);
    expect(
      loadConfig(['--config-file', file('s2.json', { 'registry-stall-timeout': 5 })], {}).config.registryStallTimeoutMs,
    ).toBe(5000);
    for (const bad of ['0', '1e3', 'soon']) {
      expect(() => loadConfig(['--registry-stall-timeout', bad, '--config-file', file('s3.json', {})], {})).toThrow(
        ConfigError,
      );
    }
    expect(() =>
      loadConfig(
        ['--registry-stall-timeout', '2', '--config-file', file('s4.json', { 'registry-stall-timeout': 3 })],
        {},
      ),
    ).toThrow(/specified both as a flag and in the configuration file/);
  });

  it("takes dockerd's userland-proxy (default true) from a bare flag, =false or daemon.json", () => {
    const proxy = (args: string[], json: unknown = {}) =>
      loadConfig([...args, '--config-file', file('u.json', json)], {}).config.network.userlandProxy;
    expect(proxy([])).toBe(true);
    expect(proxy(['--userland-proxy'])).toBe(true);
    expect(proxy(['--userland-proxy=false'])).toBe(false);
    expect(proxy([], { 'userland-proxy': false })).toBe(false);
    expect(() => proxy(['--userland-proxy=maybe'])).toThrow(ConfigError);
  });

  it('takes repeatable flags', () => {
    const { config } = loadConfig(
      [
        '-H',
        'unix:///a.sock',
        '--host',
        'tcp://127.0.0.1:2376',
        '--registry-mirror',
        'http://m1',
        '--insecure-registry',
        'r:5000',
        '--insecure-registry',
        'q',
        '--config-file',
        file('e.json', {}),
      ],
      {},
    );
    expect(config.hosts).toEqual(['unix:///a.sock', 'tcp://127.0.0.1:2376']);
    expect(config.registryMirrors).toEqual(['http://m1']);
    expect(config.insecureRegistries).toEqual(['r:5000', 'q']);
  });

  it('reads daemon.json keys', () => {
    const f = file('d.json', {
      'data-root': '/x',
      'registry-mirrors': ['http://mirror'],
      'log-level': 'debug',
      runtimes: { other: { path: '/usr/bin/other', runtimeArgs: ['--debug'] } },
      'default-runtime': 'other',
      'unknown-key-dockerd-has': true,
    });
    const { config } = loadConfig(['--config-file', f], {});
    expect(config.dataRoot).toBe('/x');
    expect(config.registryMirrors).toEqual(['http://mirror']);
    expect(config.logLevel).toBe('debug');
    expect(config.runtimes.other).toEqual({ path: '/usr/bin/other', runtimeArgs: ['--debug'] });
    expect(config.defaultRuntime).toBe('other');
  });

  it("takes dockerd's cpu-rt-period and cpu-rt-runtime (µs, default 0) from flags or daemon.json", () => {
    const none = loadConfig(['--config-file', file('rt0.json', {})], {}).config;
    expect([none.cpuRtPeriod, none.cpuRtRuntime]).toEqual([0, 0]);
    const flags = loadConfig(
      ['--cpu-rt-period', '1000000', '--cpu-rt-runtime', '950000', '--config-file', file('rt1.json', {})],
      {},
    ).config;
    expect([flags.cpuRtPeriod, flags.cpuRtRuntime]).toEqual([1_000_000, 950_000]);
    const json = loadConfig(['--config-file', file('rt2.json', { 'cpu-rt-runtime': 500000 })], {}).config;
    expect([json.cpuRtPeriod, json.cpuRtRuntime]).toEqual([0, 500_000]);
    expect(() => loadConfig(['--cpu-rt-runtime', 'lots', '--config-file', file('rt3.json', {})], {})).toThrow(
      'invalid value for --cpu-rt-runtime: lots',
    );
    expect(() => loadConfig(['--config-file', file('rt4.json', { 'cpu-rt-period': -1 })], {})).toThrow(/cpu-rt-period/);
    expect(() =>
      loadConfig(['--cpu-rt-runtime', '1', '--config-file', file('rt5.json', { 'cpu-rt-runtime': 2 })], {}),
    ).toThrow(/specified both as a flag and in the configuration file/);
  });

  it("takes dockerd's cgroup-parent from a flag or daemon.json ('' for berth's own), not both", () => {
    expect(loadConfig(['--config-file', file('cg0.json', {})], {}).config.cgroupParent).toBe('');
    expect(
      loadConfig(['--cgroup-parent', '/docker', '--config-file', file('cg1.json', {})], {}).config.cgroupParent,
    ).toBe('/docker');
    expect(loadConfig(['--config-file', file('cg2.json', { 'cgroup-parent': 'nomad' })], {}).config.cgroupParent).toBe(
      'nomad',
    );
    expect(() =>
      loadConfig(['--cgroup-parent', '/a', '--config-file', file('cg3.json', { 'cgroup-parent': '/b' })], {}),
    ).toThrow(/specified both as a flag and in the configuration file/);
  });

  it('refuses a directive given as a flag and in the file', () => {
    const f = file('c.json', { 'data-root': '/x' });
    expect(() => loadConfig(['--config-file', f, '--data-root', '/y'], {})).toThrow(
      /specified both as a flag and in the configuration file/,
    );
  });

  it('refuses a missing explicit config file, bad JSON and bad values', () => {
    expect(() => loadConfig(['--config-file', missing], {})).toThrow(ConfigError);
    const bad = path.join(tmp, 'bad.json');
    writeFileSync(bad, '{nope');
    expect(() => loadConfig(['--config-file', bad], {})).toThrow(/unable to configure the daemon/);
    expect(() => loadConfig(['--config-file', file('l.json', { 'log-level': 'loud' })], {})).toThrow(/log-level/);
    expect(() => loadConfig(['--log-level', 'loud', '--config-file', file('m.json', {})], {})).toThrow(
      /invalid log level/,
    );
    expect(() => loadConfig(['--default-runtime', 'nope', '--config-file', file('n.json', {})], {})).toThrow(
      /not defined/,
    );
    expect(() => loadConfig(['--bogus'], {})).toThrow();
  });
});

describe('parseHost', () => {
  it.each([
    ['unix:///run/x.sock', { kind: 'unix', path: '/run/x.sock' }],
    ['/run/y.sock', { kind: 'unix', path: '/run/y.sock' }],
    ['tcp://127.0.0.1:2375', { kind: 'tcp', host: '127.0.0.1', port: 2375 }],
    ['tcp://[::1]:1', { kind: 'tcp', host: '::1', port: 1 }],
  ])('%s', (h, want) => expect(parseHost(h)).toEqual(want));
  it('refuses nonsense', () => expect(() => parseHost('ftp://x')).toThrow(ConfigError));
});
