-- dockerd's HostnamePath, HostsPath and ResolvConfPath of a container in
-- another's network namespace (NetworkMode container:<id>): the donor's files,
-- taken at each start (netjoin.ts). Empty: the container's own bundle.
ALTER TABLE containers ADD COLUMN etc_dir TEXT NOT NULL DEFAULT '';
