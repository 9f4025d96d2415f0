-- Networks (network/service.ts): Docker's predefined bridge, host and none,
-- and user-defined bridge networks. berth is their IPAM: the subnet, gateway
-- and every address are chosen here and kept here; the links and the firewall
-- are told.
CREATE TABLE networks (
  id           TEXT PRIMARY KEY,              -- 64 hex
  name         TEXT NOT NULL UNIQUE,
  driver       TEXT NOT NULL,                 -- bridge | host | null
  predefined   INTEGER NOT NULL DEFAULT 0,    -- bridge, host, none: made by berthd, never removed
  bridge       TEXT NOT NULL DEFAULT '',      -- the Linux bridge's name (bridge driver)
  subnet       TEXT NOT NULL DEFAULT '',      -- a.b.c.d/n ('' for host and none)
  gateway      TEXT NOT NULL DEFAULT '',
  ip_range     TEXT NOT NULL DEFAULT '',      -- where addresses are given from ('' = the whole subnet)
  ipam_given   INTEGER NOT NULL DEFAULT 0,    -- 1: the subnet came from the user (inspect shows IPAM.Config as given)
  internal     INTEGER NOT NULL DEFAULT 0,
  attachable   INTEGER NOT NULL DEFAULT 0,
  labels       TEXT NOT NULL DEFAULT '{}',
  options      TEXT NOT NULL DEFAULT '{}',    -- driver options, as given
  ipam_options TEXT NOT NULL DEFAULT '{}',
  created      INTEGER NOT NULL               -- unix ms
);

-- A container's place on a network: connected at create (NetworkMode,
-- NetworkingConfig) or by /networks/{id}/connect, until disconnect or removal.
-- The address is held for as long, so a restarted container keeps it.
CREATE TABLE endpoints (
  id            TEXT PRIMARY KEY,             -- EndpointID, 64 hex
  network_id    TEXT NOT NULL REFERENCES networks(id),
  container_id  TEXT NOT NULL REFERENCES containers(id) ON DELETE CASCADE,
  ip            TEXT NOT NULL DEFAULT '',     -- IPv4 address ('' on host and none)
  mac           TEXT NOT NULL DEFAULT '',
  static_ip     INTEGER NOT NULL DEFAULT 0,   -- 1: IPAMConfig.IPv4Address asked for it
  aliases       TEXT NOT NULL DEFAULT '[]',   -- JSON array, as given
  links         TEXT NOT NULL DEFAULT '[]',
  seq           INTEGER NOT NULL,             -- connection order: the first is eth0
  UNIQUE (network_id, container_id)
);
CREATE UNIQUE INDEX endpoints_address ON endpoints(network_id, ip) WHERE ip <> '';
CREATE INDEX endpoints_container ON endpoints(container_id);

-- The host ports a running container publishes, as chosen at its start (an
-- ephemeral one included), so that berthd holds the same ones again after a
-- restart. Cleared when it stops.
CREATE TABLE published_ports (
  container_id  TEXT PRIMARY KEY REFERENCES containers(id) ON DELETE CASCADE,
  bindings      TEXT NOT NULL                 -- JSON: [{proto, containerPort, hostIp, hostPort}]
);
