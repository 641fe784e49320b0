-- Every write transaction stores its receipt: the number Store.Write gave the call. A try whose
-- commit went through but was reported failed (its acknowledgement was lost) is run again by
-- the storage retry policy; finding its receipt, the rerun knows the first try committed and
-- changes nothing more (see Store.Write). A receipt is looked for only by the next tries of the
-- same call, so 64 slots, reused in turn, are plenty: the table never grows.
CREATE TABLE write_receipts (
    slot    INTEGER PRIMARY KEY,
    receipt INTEGER NOT NULL
);
