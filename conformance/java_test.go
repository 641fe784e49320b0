package conformance

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// javaWorker is the Java library's example programs (sdks/java/examples), built once per run of the
// suite with Maven and started with plain `java -cp`: the classpath Maven computes is written to
// examples/target/classpath.txt, so no Maven process stands between a scenario and its worker.
var javaWorker = &javaPrograms{}

type javaPrograms struct {
	once      sync.Once
	why       string // why the programs cannot run, or ""
	classpath string
}

// missing builds the programs the first time it is asked and says why they cannot run, or "".
func (j *javaPrograms) missing() string {
	j.once.Do(func() { j.why = j.build() })
	return j.why
}

func (j *javaPrograms) build() string {
	for _, tool := range []string{"java", "mvn"} {
		if _, err := exec.LookPath(tool); err != nil {
			return tool + " is not on PATH (apt-get install openjdk-17-jdk-headless maven)"
		}
	}
	dir := filepath.Join(repoRoot, "sdks", "java")
	// package, not verify: the library's own tests run in `make test-sdks`. Dependencies come from
	// the local Maven repository, and from Maven Central only when it lacks them.
	cmd := exec.Command("mvn", "-B", "-q", "package", "-DskipTests")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Sprintf("mvn package in sdks/java failed: %v\n%s", err, out)
	}
	examples := filepath.Join(dir, "examples", "target")
	deps, err := os.ReadFile(filepath.Join(examples, "classpath.txt"))
	if err != nil {
		return fmt.Sprintf("the build wrote no classpath: %v", err)
	}
	j.classpath = filepath.Join(examples, "classes") + string(os.PathListSeparator) + strings.TrimSpace(string(deps))
	return ""
}

// command is the argv that runs the example program class.
func (j *javaPrograms) command(class string) []string {
	// The quick JIT tier alone: the scenarios run few jobs, and a JVM that compiles less starts
	// sooner and leaves more of a loaded machine to the broker.
	return []string{"java", "-XX:TieredStopAtLevel=1", "-cp", j.classpath, class}
}
