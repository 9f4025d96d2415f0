-- Legacy links (HostConfig.Links on the default bridge, containers/links.ts):
-- the parent (the linking container) knows the child by an alias; the child
-- is also named /<parent name>/<alias>. A link goes with its parent; it
-- outlives its child, as dockerd's does: the parent then cannot start.
CREATE TABLE container_links (
  parent_id  TEXT NOT NULL REFERENCES containers(id) ON DELETE CASCADE,
  child_id   TEXT NOT NULL,               -- no foreign key: see above
  alias      TEXT NOT NULL,
  seq        INTEGER NOT NULL,            -- the order given at create
  PRIMARY KEY (parent_id, alias)
);
CREATE INDEX container_links_child ON container_links(child_id);
