package auth

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/jobwire/jobwire/store"
)

// BootstrapOptions say where the first admin token comes from.
type BootstrapOptions struct {
	// Token, when set, becomes the first admin token (JOBWIRE_BOOTSTRAP_TOKEN): an operator
	// that provisions secrets itself knows the token before the broker starts.
	Token string
	// File receives a generated admin token (mode 0600) when Token is empty.
	File string
}

// BootstrapResult says what Bootstrap did.
type BootstrapResult struct {
	Created bool   // false: tokens existed, nothing was done
	TokenID string // the admin token's id when created
	File    string // the file the token was written to, when generated
}

// Bootstrap creates an admin token when the store holds no token at all, so that a broker with
// auth switched on can be administered from its first start. Once any token exists (even a
// revoked one) it does nothing: a bootstrap token cannot be planted later through the
// environment.
func (a *Authenticator) Bootstrap(ctx context.Context, opts BootstrapOptions) (BootstrapResult, error) {
	if opts.Token != "" && len(opts.Token) < MinBootstrapTokenLen {
		return BootstrapResult{}, fmt.Errorf("the bootstrap token must be at least %d characters long, got %d", MinBootstrapTokenLen, len(opts.Token))
	}
	if opts.Token == "" && opts.File == "" {
		return BootstrapResult{}, errors.New("bootstrap needs a token or a file to write one to")
	}
	token, rec, err := a.newToken(CreateParams{Name: "bootstrap", Role: RoleAdmin}, opts.Token)
	if err != nil {
		return BootstrapResult{}, err
	}
	res := BootstrapResult{TokenID: rec.ID}
	wrote := false
	err = a.st.Write(ctx, "token_bootstrap", func(tx store.Tx) error {
		res.Created = false
		n, err := tx.TokenCount()
		if err != nil || n > 0 {
			return err
		}
		if opts.Token == "" {
			// The file is written before the commit: a token stored but never written down
			// would lock the operator out.
			if err := writeSecret(opts.File, token); err != nil {
				return err
			}
			wrote = true
		}
		res.Created = true
		if err := tx.TokenInsert(&rec); err != nil {
			return err
		}
		return a.audit(ctx, tx, rec)
	})
	if err != nil {
		if wrote {
			_ = os.Remove(opts.File)
		}
		return BootstrapResult{}, err
	}
	if res.Created && wrote {
		res.File = opts.File
	}
	return res, nil
}

// writeSecret writes token to path readable by its owner only, replacing what was there.
func writeSecret(path, token string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("write bootstrap token: %w", err)
	}
	// An existing file keeps its mode through O_TRUNC: narrow it.
	if err := f.Chmod(0o600); err != nil {
		_ = f.Close()
		return fmt.Errorf("write bootstrap token: %w", err)
	}
	if _, err := f.WriteString(token + "\n"); err != nil {
		_ = f.Close()
		return fmt.Errorf("write bootstrap token: %w", err)
	}
	return f.Close()
}
