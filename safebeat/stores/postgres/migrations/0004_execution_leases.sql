-- safebeat schema, version 4: execution leases. A running execution renews lease_until;
-- one whose lease passed without a finish is dead and may be taken over.

ALTER TABLE safebeat_dispatch ADD COLUMN lease_until timestamptz;
