-- Volumes (volumes/service.ts), local driver: the data lives in
-- <data-root>/volumes/<name>/_data; this is their record. An anonymous volume
-- carries dockerd's label com.docker.volume.anonymous, as dockerd marks it.
CREATE TABLE volumes (
  name     TEXT PRIMARY KEY,
  driver   TEXT NOT NULL DEFAULT 'local',
  labels   TEXT NOT NULL DEFAULT '{}',        -- JSON, as given
  options  TEXT NOT NULL DEFAULT '{}',        -- DriverOpts (type, device, o), as given
  created  INTEGER NOT NULL                   -- unix ms
);

-- The volumes a container mounts, and the binds it took from another by
-- VolumesFrom: fixed at create, as dockerd fixes a container's mount points.
-- A row is the volume's reference: a volume named here is in use and cannot be
-- removed (the foreign key holds it too). The container's own binds stay in
-- its HostConfig.
CREATE TABLE container_mounts (
  container_id  TEXT NOT NULL REFERENCES containers(id) ON DELETE CASCADE,
  destination   TEXT NOT NULL,
  volume        TEXT REFERENCES volumes(name),  -- NULL for a bind
  source        TEXT NOT NULL DEFAULT '',       -- a bind's host path
  rw            INTEGER NOT NULL,
  mode          TEXT NOT NULL DEFAULT '',       -- as given in a Binds spec (Mounts' Mode)
  copy          INTEGER NOT NULL DEFAULT 1,     -- fill an empty volume from the image (0: nocopy)
  propagation   TEXT NOT NULL DEFAULT '',
  seq           INTEGER NOT NULL,
  PRIMARY KEY (container_id, destination)
);
CREATE INDEX container_mounts_volume ON container_mounts(volume);
