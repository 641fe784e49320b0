-- Several brokers serve one database at once (see Store.BrokerID, Listen, Campaign).

-- Every broker that has opened the database, one row each, never reused: its id comes from the
-- identity column, so a record one broker left behind (a write receipt, a lease granted
-- through it) is never taken for another's. last_seen is written every second or so while the
-- broker runs; an operator lists brokers with it (a row not seen for long is a broker gone).
CREATE TABLE brokers (
    id         bigint  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    addr       text    NOT NULL,
    pid        integer NOT NULL,
    host       text    NOT NULL,
    started_at bigint  NOT NULL,
    last_seen  bigint  NOT NULL
);

-- The one-broker claim is gone: brokers share the database.
DROP TABLE broker_holder;

-- Write receipts are each broker's own numbers (see Store.Write): two brokers take the same
-- numbers, and one must never take the other's receipt for its own.
DROP TABLE write_receipts;
CREATE TABLE write_receipts (
    broker  bigint  NOT NULL REFERENCES brokers (id) ON DELETE CASCADE,
    slot    integer NOT NULL,
    receipt bigint  NOT NULL,
    PRIMARY KEY (broker, slot)
);
