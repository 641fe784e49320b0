package main

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// javaModule splits the path of a JUnit test file under sdks/java into the Maven project's
// directory, the module that holds the test and the test class's simple name, e.g.
// sdks/java/worker/src/test/java/io/jobwire/worker/FailuresTest.java is module worker of the
// project sdks/java, class FailuresTest.
func javaModule(path string) (project, module, class string, err error) {
	project, rest, ok := strings.Cut(filepath.ToSlash(path), "/src/test/java/")
	if !ok || !strings.HasSuffix(rest, ".java") {
		return "", "", "", fmt.Errorf("%s is not a JUnit test file under a Maven module's src/test/java", path)
	}
	project, module = filepath.Split(project)
	return filepath.Clean(project), module, strings.TrimSuffix(filepath.Base(rest), ".java"), nil
}

// surefireTotals matches the summary surefire prints once a module's tests ran.
var surefireTotals = regexp.MustCompile(`(?m)Tests run: (\d+), Failures: (\d+), Errors: (\d+), Skipped: (\d+)\s*$`)

// runJavaTests runs m's test classes (one method of each when m.run names it) with Maven,
// offline: make test-java has fetched what they need.
func runJavaTests(ctx context.Context, m mutation, timeout time.Duration) testRun {
	return eachFile(m, func(f string) testRun {
		project, module, class, err := javaModule(f)
		if err != nil {
			return testRun{err: err, failed: true}
		}
		sel := class
		if m.run != "" {
			sel += "#" + m.run
		}
		r := command(ctx, timeout, exec.Command("mvn", "-B", "-o", "-f", project, "test", "-pl", module,
			"-Dtest="+sel, "-Dsurefire.failIfNoSpecifiedTests=false"))
		// The last summary is the module's total.
		if all := surefireTotals.FindAllSubmatch(r.out, -1); len(all) > 0 {
			last := all[len(all)-1]
			n, _ := strconv.Atoi(string(last[1]))
			skipped, _ := strconv.Atoi(string(last[4]))
			r.ran = n - skipped
		}
		r.buildFailed = strings.Contains(string(r.out), "COMPILATION ERROR")
		return r
	})
}
