import { describe, expect, it } from 'vitest';
import { linkEnv, withLinkEnv } from '../../src/engine/containers/links.js';
import { parseNetDev } from '../../src/engine/containers/io/stats.js';
import { parseLink } from '../../src/engine/network/endpoints.js';

describe('legacy links', () => {
  it("parse as dockerd's ParseLink: name:alias, name, inspect's /name:/parent/alias", () => {
    expect(parseLink('db:data')).toEqual({ name: 'db', alias: 'data' });
    expect(parseLink('db')).toEqual({ name: 'db', alias: 'db' });
    expect(parseLink('/db:/web/data')).toEqual({ name: 'db', alias: 'data' });
    expect(() => parseLink('a:b:c')).toThrow('bad format for links: a:b:c');
    expect(() => parseLink('')).toThrow('empty string specified for links');
  });

  it("make dockerd's variables: TCP first, ranges of consecutive ports, the child's Env but HOME and PATH", () => {
    const env = linkEnv(
      '10.0.0.2',
      '/web/my-db',
      ['A=1', 'HOME=/root', 'PATH=/bin', 'B=x=y'],
      ['53/udp', '6380/tcp', '6379/tcp'],
    );
    expect(env).toEqual([
      'MY_DB_PORT=tcp://10.0.0.2:6379',
      'MY_DB_PORT_6379_TCP=tcp://10.0.0.2:6379',
      'MY_DB_PORT_6379_TCP_ADDR=10.0.0.2',
      'MY_DB_PORT_6379_TCP_PORT=6379',
      'MY_DB_PORT_6379_TCP_PROTO=tcp',
      'MY_DB_PORT_6380_TCP=tcp://10.0.0.2:6380',
      'MY_DB_PORT_6380_TCP_ADDR=10.0.0.2',
      'MY_DB_PORT_6380_TCP_PORT=6380',
      'MY_DB_PORT_6380_TCP_PROTO=tcp',
      'MY_DB_PORT_53_UDP=udp://10.0.0.2:53',
      'MY_DB_PORT_53_UDP_ADDR=10.0.0.2',
      'MY_DB_PORT_53_UDP_PORT=53',
      'MY_DB_PORT_53_UDP_PROTO=udp',
      'MY_DB_PORT_6379_TCP_START=tcp://10.0.0.2:6379',
      'MY_DB_PORT_6379_TCP_PORT_START=6379',
      'MY_DB_PORT_6379_TCP_END=tcp://10.0.0.2:6380',
      'MY_DB_PORT_6379_TCP_PORT_END=6380',
      'MY_DB_NAME=/web/my-db',
      'MY_DB_ENV_A=1',
      'MY_DB_ENV_B=x=y',
    ]);
  });

  it("yield to the linking container's own Env of the same name", () => {
    expect(withLinkEnv(['DB_NAME=/web/db', 'DB_PORT=tcp://x:1'], ['DB_PORT=mine', 'X=1'])).toEqual([
      'DB_NAME=/web/db',
      'DB_PORT=mine',
      'X=1',
    ]);
  });
});

describe('network stats', () => {
  it('reads /proc/net/dev, lo left out', () => {
    const text = `Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:     100       2    0    0    0     0          0         0      100       2    0    0    0     0       0          0
  eth0:    1234      10    1    2    0     0          0         0     5678      20    3    4    0     0       0          0
`;
    expect(parseNetDev(text)).toEqual({
      eth0: {
        rx_bytes: 1234,
        rx_packets: 10,
        rx_errors: 1,
        rx_dropped: 2,
        tx_bytes: 5678,
        tx_packets: 20,
        tx_errors: 3,
        tx_dropped: 4,
      },
    });
  });
});
