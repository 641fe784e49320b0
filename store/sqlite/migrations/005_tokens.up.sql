-- API tokens. Only the SHA-256 of each token is stored; id is the public part of a token, shown
-- by `jobwire tokens list` and written to logs. Scopes are JSON arrays of patterns; an empty
-- array means any queue or type. Revoked tokens are kept (revoked_at set) so listings show them.
CREATE TABLE api_tokens (
    id         TEXT    PRIMARY KEY,
    name       TEXT    NOT NULL,
    hash       BLOB    NOT NULL UNIQUE,
    role       TEXT    NOT NULL,
    queues     TEXT    NOT NULL,
    types      TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    revoked_at INTEGER
);
