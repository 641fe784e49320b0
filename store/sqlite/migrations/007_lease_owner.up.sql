-- Who a lease was granted to, besides its worker id: the accessor id of the token the worker
-- stream authenticated with ('' when auth is off). A worker that reconnects adopts its held
-- leases only under the same worker id and the same token, so a leaked lease token is of no
-- use to another worker or another token's holder.
ALTER TABLE jobs ADD COLUMN lease_owner TEXT NOT NULL DEFAULT '';
