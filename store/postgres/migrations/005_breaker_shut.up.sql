-- Whether each breaker holds its type back from every lease but its probes (it is not CLOSED),
-- beside its document, so a lease's own statement leaves those types out (ExcludeShut) instead
-- of reading the breakers in a round trip of its own. Brokers write it with the document; the
-- rows stored before it existed take it from the document's state (CLOSED is 1).
ALTER TABLE breakers ADD COLUMN shut boolean NOT NULL DEFAULT false;
UPDATE breakers SET shut = (convert_from(data, 'UTF8')::jsonb ->> 'State') IS DISTINCT FROM '1';
