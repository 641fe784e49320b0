package conformance

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// javaWorker is the Java library's example programs (sdks/java/examples), built once per run of the
// suite with Maven and started with plain `java -cp`: the classpath Maven computes is written to
// examples/target/classpath.txt, so no Maven process stands between a scenario and its worker.
var javaWorker = &javaPrograms{}

// javaMissing builds the programs the first time it is asked and says why they cannot run, or "".
var javaMissing = sync.OnceValue(javaWorker.build)

type javaPrograms struct {
	classpath string
	// archive is a class data sharing archive of the classes a worker loads as it starts, or ""
	// when none could be made: with it a JVM starts on about half the CPU time, which counts on a
	// loaded machine where scenarios start workers and wait for them.
	archive string
}

func (j *javaPrograms) build() string {
	for _, tool := range []string{"java", "mvn"} {
		if _, err := exec.LookPath(tool); err != nil {
			return tool + " is not on PATH (apt-get install openjdk-17-jdk-headless maven)"
		}
	}
	dir := filepath.Join(repoRoot, "sdks", "java")
	// install, as the README says (into the local Maven repository, where the install test's
	// project finds the library), without the tests, which `make test-java` runs. Dependencies
	// come from the local Maven repository, and from Maven Central only when it lacks them. It
	// runs once, before any Java worker starts from the jars it writes.
	cmd := exec.Command("mvn", "-B", "-q", "install", "-Dmaven.test.skip=true")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Sprintf("mvn install in sdks/java failed: %v\n%s", err, out)
	}
	target := filepath.Join(dir, "examples", "target")
	deps, err := os.ReadFile(filepath.Join(target, "classpath.txt"))
	if err != nil {
		return fmt.Sprintf("the build wrote no classpath: %v", err)
	}
	// The jar, not target/classes: class data sharing takes jars only.
	j.classpath = filepath.Join(target, "jobwire-examples-0.1.0.jar") + string(os.PathListSeparator) + strings.TrimSpace(string(deps))
	j.archive = j.dumpArchive(filepath.Join(filepath.Dir(brokerBin), "java-worker.jsa"))
	return ""
}

// dumpArchive runs the conformance worker against an address where nothing listens until it has
// tried to connect, then stops it with SIGTERM; the JVM writes the classes it loaded to path as
// it exits. It returns path, or "" when that did not work (the workers then start without it).
func (j *javaPrograms) dumpArchive(path string) string {
	var out lockedBuffer
	cmd := exec.Command("java", "-XX:ArchiveClassesAtExit="+path, "-cp", j.classpath, "io.jobwire.examples.ConformanceWorker")
	cmd.Env = append(os.Environ(), "JOBWIRE_ADDR=127.0.0.1:1", "JOBWIRE_CONFORMANCE_DIR="+filepath.Join(filepath.Dir(path), "java-archive-state"))
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return ""
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	deadline := time.After(waitTimeout)
	for !strings.Contains(out.String(), "reconnecting in") {
		select {
		case <-done:
			return ""
		case <-deadline:
			_ = cmd.Process.Kill()
			<-done
			return ""
		case <-time.After(pollInterval):
		}
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	if err := <-done; err != nil {
		return ""
	}
	if _, err := os.Stat(path); err != nil {
		return ""
	}
	return path
}

// command is the argv that runs the example program class.
func (j *javaPrograms) command(class string) []string {
	// The quick JIT tier alone: the scenarios run few jobs, and a JVM that compiles less starts
	// sooner and leaves more of a loaded machine to the broker.
	argv := []string{"java", "-XX:TieredStopAtLevel=1"}
	if j.archive != "" {
		argv = append(argv, "-XX:SharedArchiveFile="+j.archive)
	}
	return append(argv, "-cp", j.classpath, class)
}

// lockedBuffer is a bytes.Buffer that a process writes while the test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
