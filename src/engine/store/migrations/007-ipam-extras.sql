-- A user network's IPAM AuxiliaryAddresses (name -> address, as given): never
-- given to a container, shown in inspect's IPAM.Config. IPAM options are kept
-- as given, null included (dockerd shows `"Options": null` when none came).
ALTER TABLE networks ADD COLUMN aux_addresses TEXT NOT NULL DEFAULT '{}';
-- An endpoint's IPAMConfig.LinkLocalIPs (IPv4 link-local addresses, JSON list):
-- added to its interface beside its address, as dockerd adds them.
ALTER TABLE endpoints ADD COLUMN link_local_ips TEXT NOT NULL DEFAULT '[]';
