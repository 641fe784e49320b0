package store

import "time"

// TokenRecord is a stored API token. The secret itself is never stored: Hash is its SHA-256,
// and ID is a public accessor that is safe to show and log.
type TokenRecord struct {
	ID   string
	Name string
	Hash []byte
	// Role is the role's name (producer, worker, admin, viewer).
	Role string
	// Queues and Types are the scope patterns; empty means any.
	Queues    []string
	Types     []string
	CreatedAt time.Time
	RevokedAt time.Time // zero while the token is valid
}
