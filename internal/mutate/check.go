package main

import (
	"bytes"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// checkList reports every way the list no longer fits the source tree at root, one error per
// problem, each naming its mutation: a text that is not found exactly once, a mutation that
// changes nothing or leaves a Go file that does not parse, a package or test file that is gone,
// and a test pattern that selects no test of a package it names. It reads files and runs
// nothing, so it takes milliseconds; TestListApplies runs it within go test ./....
//
// What it cannot see statically is the subtest part of a Go pattern (after its first "/"): the
// runner checks that by running the tests unmutated first.
func checkList(root string, ms []mutation) []error {
	var errs []error
	fail := func(m mutation, format string, args ...any) {
		errs = append(errs, fmt.Errorf("mutation %q: "+format, append([]any{m.name}, args...)...))
	}
	names := map[string]bool{}
	sources := map[string][]byte{}
	tests := map[string][]string{} // test names by package or file, read once
	for _, m := range ms {
		if names[m.name] {
			fail(m, "another mutation has the same name")
		}
		names[m.name] = true

		src, ok := sources[m.file]
		if !ok {
			var err error
			if src, err = os.ReadFile(filepath.Join(root, m.file)); err != nil {
				fail(m, "cannot read its file: %v", err)
				continue
			}
			sources[m.file] = src
		}
		switch n := bytes.Count(src, []byte(m.from)); {
		case m.from == "":
			fail(m, "its text is empty")
		case n != 1:
			fail(m, "its text is in %s %d times, want exactly once: the code changed, so point the entry at the line that now holds the guard (text: %q)", m.file, n, m.from)
		case m.from == m.to:
			fail(m, "it changes nothing: to is the same as from")
		case strings.HasSuffix(m.file, ".go"):
			mutated := bytes.Replace(src, []byte(m.from), []byte(m.to), 1)
			if _, err := parser.ParseFile(token.NewFileSet(), m.file, mutated, parser.SkipObjectResolution); err != nil {
				fail(m, "the mutated %s does not parse: %v", m.file, err)
			}
		}

		if len(m.pkgs) == 0 {
			fail(m, "it names no tests to run")
		}
		for _, p := range m.pkgs {
			names, ok := tests[m.sdk+"\x00"+p]
			if !ok {
				var err error
				names, err = testNames(root, m.sdk, p)
				if err != nil {
					fail(m, "%v", err)
					continue
				}
				tests[m.sdk+"\x00"+p] = names
			}
			if err := m.selects(p, names); err != nil {
				fail(m, "%v", err)
			}
		}
		if m.sdk != "" && m.postgres {
			fail(m, "only Go tests use PostgreSQL")
		}
	}
	return errs
}

// testNames lists the tests in p: for Go the Test and Fuzz functions of the package directory
// p; for the other languages the names in the test file p that sourceTestNames reads.
func testNames(root, sdk, p string) ([]string, error) {
	if sdk == "" {
		return goTestNames(filepath.Join(root, p))
	}
	read, ok := sourceTestNames[sdk]
	if !ok {
		return nil, fmt.Errorf("unknown sdk %q (want %q, %q, %q, %q or none for Go)", sdk, sdkPython, sdkNode, sdkJava, sdkRust)
	}
	src, err := os.ReadFile(filepath.Join(root, p))
	if err != nil {
		return nil, fmt.Errorf("cannot read test file %s: %v", p, err)
	}
	return read(src), nil
}

// sourceTestNames reads the names of a test file's tests, by SDK: Python's Class.test_method
// names, the names Node.js gives test() and it(), a JUnit class's @Test methods, a Rust
// file's #[test] functions.
var sourceTestNames = map[string]func(src []byte) []string{
	sdkPython: pythonTestNames,
	sdkNode:   nodeTestNames,
	sdkJava:   firstGroups(javaTest),
	sdkRust:   firstGroups(rustTest),
}

// firstGroups reads the first group of each of re's matches.
func firstGroups(re *regexp.Regexp) func(src []byte) []string {
	return func(src []byte) []string {
		var out []string
		for _, m := range re.FindAllSubmatch(src, -1) {
			out = append(out, string(m[1]))
		}
		return out
	}
}

func goTestNames(dir string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("package %s has no test files (is it gone or moved?)", dir)
	}
	var names []string
	fset := token.NewFileSet()
	for _, f := range files {
		af, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		for _, d := range af.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv != nil || fd.Type.Params.NumFields() != 1 {
				continue
			}
			if n := fd.Name.Name; strings.HasPrefix(n, "Test") || strings.HasPrefix(n, "Fuzz") {
				names = append(names, n)
			}
		}
	}
	return names, nil
}

var (
	pyClass  = regexp.MustCompile(`(?m)^class (\w+)`)
	pyMethod = regexp.MustCompile(`(?m)^    (?:async )?def (test\w*)`)
	javaTest = regexp.MustCompile(`@(?:Test|ParameterizedTest)\b[^{;]*?\bvoid\s+(\w+)\s*\(`)
	nodeTest = regexp.MustCompile("(?m)^\\s*(?:test|it)\\(\\s*(?:'((?:[^'\\\\]|\\\\.)*)'|\"((?:[^\"\\\\]|\\\\.)*)\"|`([^`]*)`)")
)

// pythonTestNames reads Class.test_method names from a unittest file, class by class.
func pythonTestNames(src []byte) []string {
	var names []string
	classes := pyClass.FindAllSubmatchIndex(src, -1)
	for i, c := range classes {
		end := len(src)
		if i+1 < len(classes) {
			end = classes[i+1][0]
		}
		class := string(src[c[2]:c[3]])
		for _, m := range pyMethod.FindAllSubmatch(src[c[1]:end], -1) {
			names = append(names, class+"."+string(m[1]))
		}
	}
	return names
}

func nodeTestNames(src []byte) []string {
	var names []string
	for _, m := range nodeTest.FindAllSubmatch(src, -1) {
		names = append(names, string(bytes.Join(m[1:], nil)))
	}
	return names
}

// selects reports why m's pattern selects no test among names, the tests of p, or nil.
func (m mutation) selects(p string, names []string) error {
	if len(names) == 0 {
		return fmt.Errorf("%s has no tests", p)
	}
	switch m.sdk {
	case sdkPython:
		// unittest -k: a pattern without * is a case-sensitive substring of the test's name.
		if m.run == "" || strings.Contains(m.run, "*") {
			return fmt.Errorf("run must be a plain substring of a Python test's name, got %q", m.run)
		}
		if !slices.ContainsFunc(names, func(n string) bool { return strings.Contains(n, m.run) }) {
			return fmt.Errorf("no test in %s has a name containing %q (was it renamed?)", p, m.run)
		}
		return nil
	case sdkNode:
		re, err := regexp.Compile(m.run)
		if err != nil || m.run == "" {
			return fmt.Errorf("run must be a regular expression over Node.js test names, got %q", m.run)
		}
		if !slices.ContainsFunc(names, re.MatchString) {
			return fmt.Errorf("no test in %s has a name matching %q (was it renamed?)", p, m.run)
		}
		return nil
	case sdkRust:
		// cargo test NAME: a substring of a test's path; here, of a test function's name.
		if m.run == "" || !slices.ContainsFunc(names, func(n string) bool { return strings.Contains(n, m.run) }) {
			return fmt.Errorf("no test function in %s has a name containing %q (was it renamed?)", p, m.run)
		}
		return nil
	case sdkJava:
		// surefire -Dtest=Class#method: run names one method of the test class p, or is empty
		// for the whole class.
		if m.run != "" && !slices.Contains(names, m.run) {
			return fmt.Errorf("the test class %s has no @Test method %q (was it renamed?)", p, m.run)
		}
		return nil
	}
	if m.run == "" {
		return nil
	}
	// go test -run: the pattern is split at "/" into one expression per level of subtests;
	// the first selects top-level tests. Each of its alternatives must still name a test of
	// some package (checked over all of them in alternativesExist), and the whole of it a
	// test of this one.
	top := splitRun(m.run)[0]
	re, err := regexp.Compile(top)
	if err != nil {
		return fmt.Errorf("run %q: %v", m.run, err)
	}
	if !slices.ContainsFunc(names, re.MatchString) {
		return fmt.Errorf("-run %q selects no test function in %s (was the test renamed or moved?)", m.run, p)
	}
	return nil
}

// alternativesExist reports each alternative of the top level of a Go -run pattern that
// matches no test function of any of m's packages: with "TestA|TestB", a renamed TestB would
// otherwise leave TestA running alone, unnoticed.
func alternativesExist(root string, ms []mutation) []error {
	var errs []error
	for _, m := range ms {
		if m.sdk != "" || m.run == "" {
			continue
		}
		var all []string
		for _, p := range m.pkgs {
			names, err := goTestNames(filepath.Join(root, p))
			if err != nil {
				continue // checkList reports it
			}
			all = append(all, names...)
		}
		for _, alt := range splitTop(splitRun(m.run)[0], '|') {
			re, err := regexp.Compile(alt)
			if err != nil {
				continue // the whole pattern compiles or checkList reports it; a part may not
			}
			if !slices.ContainsFunc(all, re.MatchString) {
				errs = append(errs, fmt.Errorf("mutation %q: the part %q of -run %q names no test function in %s (was it renamed?)",
					m.name, alt, m.run, strings.Join(m.pkgs, " ")))
			}
		}
	}
	return errs
}

// splitRun splits a go test -run pattern into its levels, as go test does: at each "/" outside
// brackets and parentheses.
func splitRun(p string) []string { return splitTop(p, '/') }

// splitTop splits p at each sep outside brackets and parentheses.
func splitTop(p string, sep byte) []string {
	var out []string
	depth, cs, start := 0, 0, 0
	for i := 0; i < len(p); i++ {
		switch c := p[i]; {
		case c == '\\':
			i++
		case c == '[':
			cs++
		case c == ']' && cs > 0:
			cs--
		case c == '(' && cs == 0:
			depth++
		case c == ')' && cs == 0:
			depth--
		case c == sep && depth == 0 && cs == 0:
			out = append(out, p[start:i])
			start = i + 1
		}
	}
	return append(out, p[start:])
}

// errList joins errs into one error, one per line, or nil.
func errList(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	return errors.Join(errs...)
}
