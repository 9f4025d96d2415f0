-- A user network's IPAM AuxiliaryAddresses (name -> address, as given): never
-- given to a container, shown in inspect's IPAM.Config. IPAM options are kept
-- as given, null included (dockerd shows `"Options": null` when none came).
ALTER TABLE networks ADD COLUMN aux_addresses TEXT NOT NULL DEFAULT '{}';
