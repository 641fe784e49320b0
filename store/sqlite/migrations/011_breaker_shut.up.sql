-- Whether each breaker holds its type back from every lease but its probes (it is not CLOSED),
-- beside its document, so a lease's statement can leave those types out (ExcludeShut). The
-- rows stored before it existed take it from the document's state (CLOSED is 1).
ALTER TABLE breakers ADD COLUMN shut INTEGER NOT NULL DEFAULT 0;
UPDATE breakers SET shut = coalesce(json_extract(CAST(data AS TEXT), '$.State'), 0) != 1;
