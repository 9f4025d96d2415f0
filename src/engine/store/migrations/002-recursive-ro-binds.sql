-- Whether the container's read-only binds are made recursively read-only (rro) where the kernel
-- can: dockerd's behaviour for containers created through API 1.44 and later. Containers created
-- before (by berth, or by an older client) keep non-recursive read-only binds.
ALTER TABLE containers ADD COLUMN recursive_ro_binds INTEGER NOT NULL DEFAULT 0;
