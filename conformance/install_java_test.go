package conformance

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/jobwire/jobwire/job"
)

// javaAppPOM is a reader's project: the library and Jackson as the README lists them, and the
// plugin versions the library's own build uses, so that a warm local repository needs no network.
const javaAppPOM = `<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>com.example</groupId>
  <artifactId>app</artifactId>
  <version>1</version>
  <properties>
    <maven.compiler.release>17</maven.compiler.release>
    <project.build.sourceEncoding>UTF-8</project.build.sourceEncoding>
  </properties>
  <dependencies>
    <dependency>
      <groupId>io.jobwire</groupId>
      <artifactId>jobwire-worker</artifactId>
      <version>0.1.0</version>
    </dependency>
    <dependency>
      <groupId>com.fasterxml.jackson.core</groupId>
      <artifactId>jackson-databind</artifactId>
      <version>2.23.0</version>
    </dependency>
  </dependencies>
  <build>
    <plugins>
      <plugin><artifactId>maven-compiler-plugin</artifactId><version>3.14.0</version></plugin>
      <plugin><artifactId>maven-resources-plugin</artifactId><version>3.3.1</version></plugin>
      <plugin><artifactId>maven-surefire-plugin</artifactId><version>3.5.4</version></plugin>
      <plugin><artifactId>maven-jar-plugin</artifactId><version>3.4.2</version></plugin>
      <plugin>
        <artifactId>maven-dependency-plugin</artifactId>
        <version>3.8.1</version>
        <executions>
          <execution>
            <phase>package</phase>
            <goals><goal>build-classpath</goal></goals>
            <configuration><outputFile>${project.build.directory}/classpath.txt</outputFile></configuration>
          </execution>
        </executions>
      </plugin>
    </plugins>
  </build>
</project>
`

var javaPublicClass = regexp.MustCompile(`(?m)^public (?:final )?class (\w+)`)

func TestInstalledJavaLibraryRunsTheREADMEWorker(t *testing.T) {
	t.Parallel()
	lang := runtimeFor(t, "java")
	scratch := t.TempDir()
	readme := filepath.Join(repoRoot, "sdks", "java", "README.md")
	doc, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	// runtimeFor built the library with the README's command, `mvn install` in sdks/java (see
	// javaPrograms.build), once for the whole suite; here a project of the reader's depends on it
	// by the coordinates the README gives.
	for _, coordinate := range []string{"<groupId>io.jobwire</groupId>", "<artifactId>jobwire-worker</artifactId>", "<version>0.1.0</version>", "mvn -q install -f sdks/java"} {
		if !bytes.Contains(doc, []byte(coordinate)) {
			t.Fatalf("%s no longer says %s, which this test installs and depends on", readme, coordinate)
		}
	}

	app := filepath.Join(scratch, "app")
	src := filepath.Join(app, "src", "main", "java")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(app, "pom.xml"), []byte(javaAppPOM), 0o644); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, lang, storeSQLite, brokerConfig{})
	tmp := filepath.Join(scratch, "Worker.java")
	writeREADMEWorker(t, readme, "java", e.broker.addr, tmp)
	body, err := os.ReadFile(tmp)
	if err != nil {
		t.Fatal(err)
	}
	m := javaPublicClass.FindSubmatch(body)
	if m == nil {
		t.Fatalf("%s: the first worker declares no public class", readme)
	}
	class := string(m[1])
	if err := os.WriteFile(filepath.Join(src, class+".java"), body, 0o644); err != nil {
		t.Fatal(err)
	}
	// The package's example, copied into the project as a reader would start from it.
	copyInto(t, filepath.Join(repoRoot, "sdks", "java", "examples", "src", "main", "java", "io", "jobwire", "examples", "Greet.java"),
		filepath.Join(src, "io", "jobwire", "examples", "Greet.java"))
	run(t, app, nil, "mvn", "-B", "-q", "package")

	deps, err := os.ReadFile(filepath.Join(app, "target", "classpath.txt"))
	if err != nil {
		t.Fatal(err)
	}
	classpath := filepath.Join(app, "target", "classes") + string(os.PathListSeparator) + strings.TrimSpace(string(deps))
	for _, entry := range filepath.SplitList(classpath) {
		if strings.Contains(entry, "jobwire-worker") && !strings.Contains(entry, filepath.Join("io", "jobwire", "jobwire-worker", "0.1.0")) {
			t.Fatalf("the project resolved jobwire-worker to %s, not to the installed library", entry)
		}
	}
	w := e.spawn("installed-worker", []string{"java", "-cp", classpath, class})
	runREADMEJob(e, w)

	ex := e.spawn("installed-example", []string{"java", "-cp", classpath, "io.jobwire.examples.Greet"},
		"JOBWIRE_ADDR="+e.broker.addr, "JOBWIRE_WORKER_ID=installed-example")
	id := e.enqueue("greet", []byte(`{"name":"Ada"}`))
	e.waitState(id, job.StateSucceeded)
	if log, err := os.ReadFile(ex.log); err != nil || !bytes.Contains(log, []byte("hello, Ada")) {
		t.Fatalf("the example's output lacks its greeting (%v):\n%s", err, log)
	}
}
