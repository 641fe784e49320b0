// Package docblocks holds the test that runs the command blocks of README.md, docs/*.md and the
// SDK READMEs as written. A block runs unless an HTML comment right before it says why not:
//
//	<!-- not run: needs a second machine -->
//
// See docblocks_test.go for how a block runs.
package docblocks
