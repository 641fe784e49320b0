package server

import (
	"go/build"
	"strings"
	"testing"
)

// The server turns protobuf into the broker's types and back; storage stays behind the
// broker (and the token keeper), so no store type can leak into the API's handlers.
func TestServerDoesNotImportStore(t *testing.T) {
	t.Parallel()
	const storePkg = "github.com/jobwire/jobwire/store"
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range pkg.Imports {
		if imp == storePkg || strings.HasPrefix(imp, storePkg+"/") {
			t.Errorf("package server imports %s: speak the broker's types instead", imp)
		}
	}
}
