-- Dual-stack bridge networks (EnableIPv6): a network's IPv6 subnet, gateway
-- and range as given ('' when none; kept when EnableIPv6 is off, as dockerd
-- keeps and shows such an IPAM config without using it), and each endpoint's
-- IPv6 address ('' on a network without IPv6) and whether it was asked for.
ALTER TABLE networks ADD COLUMN enable_ipv6 INTEGER NOT NULL DEFAULT 0;
ALTER TABLE networks ADD COLUMN subnet6 TEXT NOT NULL DEFAULT '';
ALTER TABLE networks ADD COLUMN gateway6 TEXT NOT NULL DEFAULT '';
ALTER TABLE networks ADD COLUMN ip_range6 TEXT NOT NULL DEFAULT '';
ALTER TABLE endpoints ADD COLUMN ip6 TEXT NOT NULL DEFAULT '';
ALTER TABLE endpoints ADD COLUMN static_ip6 INTEGER NOT NULL DEFAULT 0;
CREATE UNIQUE INDEX endpoints_address6 ON endpoints(network_id, ip6) WHERE ip6 <> '';
