-- Images: one row per image config digest (the image id).
CREATE TABLE images (
  id          TEXT PRIMARY KEY,            -- sha256:<hex> of the config blob
  parent      TEXT NOT NULL DEFAULT '',    -- image id of the parent (commit), '' when none
  config      TEXT NOT NULL,               -- the image config JSON, as stored in the content store
  size        INTEGER NOT NULL DEFAULT 0,  -- total uncompressed size of its layers
  created     TEXT NOT NULL,               -- RFC 3339, from the config
  added_at    INTEGER NOT NULL             -- unix ms when berth stored it
);

-- The layers of each image, bottom first.
CREATE TABLE image_layers (
  image_id  TEXT NOT NULL REFERENCES images(id) ON DELETE CASCADE,
  idx       INTEGER NOT NULL,
  chain_id  TEXT NOT NULL REFERENCES layers(chain_id),
  PRIMARY KEY (image_id, idx)
);
CREATE INDEX image_layers_chain ON image_layers(chain_id);

-- Blobs in the content store that an image holds (manifest, config, layer blobs).
CREATE TABLE image_blobs (
  image_id  TEXT NOT NULL REFERENCES images(id) ON DELETE CASCADE,
  digest    TEXT NOT NULL,
  PRIMARY KEY (image_id, digest)
);
CREATE INDEX image_blobs_digest ON image_blobs(digest);

-- Tags: a full reference (docker.io/library/busybox:latest) names one image.
CREATE TABLE tags (
  ref       TEXT PRIMARY KEY,
  image_id  TEXT NOT NULL REFERENCES images(id) ON DELETE CASCADE
);
CREATE INDEX tags_image ON tags(image_id);

-- Repo digests: docker.io/library/busybox@sha256:<manifest digest>.
CREATE TABLE repo_digests (
  ref       TEXT PRIMARY KEY,
  image_id  TEXT NOT NULL REFERENCES images(id) ON DELETE CASCADE
);
CREATE INDEX repo_digests_image ON repo_digests(image_id);

-- Extracted layers, shared between images by chain id.
CREATE TABLE layers (
  chain_id   TEXT PRIMARY KEY,
  diff_id    TEXT NOT NULL,
  parent     TEXT,                        -- chain id of the layer below, NULL for a base layer
  dir        TEXT NOT NULL,               -- directory name under layers/
  size       INTEGER NOT NULL,            -- uncompressed bytes
  blob       TEXT                         -- compressed blob digest it came from, when known
);

-- Containers: the config as given (JSON), plus state columns.
CREATE TABLE containers (
  id           TEXT PRIMARY KEY,          -- 64 hex
  name         TEXT NOT NULL UNIQUE,      -- without the leading '/'
  image_id     TEXT NOT NULL REFERENCES images(id),
  image_ref    TEXT NOT NULL,             -- what the user asked for (Config.Image)
  config       TEXT NOT NULL,             -- Docker's Config JSON (resolved)
  host_config  TEXT NOT NULL,             -- Docker's HostConfig JSON
  created      INTEGER NOT NULL,          -- unix ms
  status       TEXT NOT NULL,             -- created|running|paused|restarting|removing|exited|dead
  pid          INTEGER NOT NULL DEFAULT 0,
  conmon_pid   INTEGER NOT NULL DEFAULT 0,
  exit_code    INTEGER NOT NULL DEFAULT 0,
  error        TEXT NOT NULL DEFAULT '',
  started_at   INTEGER NOT NULL DEFAULT 0,
  finished_at  INTEGER NOT NULL DEFAULT 0,
  restart_count INTEGER NOT NULL DEFAULT 0,
  oom_killed   INTEGER NOT NULL DEFAULT 0,
  stopped_by_user INTEGER NOT NULL DEFAULT 0,
  seq          INTEGER NOT NULL           -- creation order, for before/since filters
);
CREATE INDEX containers_image ON containers(image_id);
CREATE INDEX containers_status ON containers(status);
