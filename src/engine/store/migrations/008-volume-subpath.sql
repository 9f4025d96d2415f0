-- A mount point's VolumeOptions.Subpath (API 1.45): the directory or file of
-- the volume mounted instead of the whole of it ('' for the whole), resolved
-- and checked at each start, as dockerd does.
ALTER TABLE container_mounts ADD COLUMN subpath TEXT NOT NULL DEFAULT '';
