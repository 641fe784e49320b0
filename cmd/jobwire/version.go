package main

import "runtime/debug"

// version is set by `make build` with -ldflags "-X main.version=$(git describe ...)". A binary
// built without it, such as one from `go install ...@v1.2.3`, reports the version the go command
// recorded in its build info.
var version = ""

func versionString() string {
	info, _ := debug.ReadBuildInfo()
	return versionOf(version, info)
}

// versionOf picks the version to print: the one given at link time, else the main module's
// version from the build info, else "(devel)" followed by the commit the build info names, if
// any, so that even a `go run` from a checkout says what it runs.
func versionOf(linked string, info *debug.BuildInfo) string {
	if linked != "" {
		return linked
	}
	if info == nil {
		return "(devel)"
	}
	if v := info.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if rev == "" {
		return "(devel)"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if modified == "true" {
		rev += "-dirty"
	}
	return "(devel) " + rev
}
