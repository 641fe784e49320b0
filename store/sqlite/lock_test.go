package sqlite_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jobwire/jobwire/store/sqlite"
)

func TestLockFileRefusesASecondHolder(t *testing.T) {
	db := filepath.Join(t.TempDir(), "jobwire.db")
	release, err := sqlite.LockFile(db, "127.0.0.1:7070")
	if err != nil {
		t.Fatal(err)
	}

	_, err = sqlite.LockFile(db, "127.0.0.1:7080")
	var inUse *sqlite.InUseError
	if !errors.As(err, &inUse) {
		t.Fatalf("second LockFile: got %v, want *InUseError", err)
	}
	want := fmt.Sprintf("database %s is already in use by another broker (pid %d, listening on 127.0.0.1:7070); one SQLite file serves one broker", db, os.Getpid())
	if err.Error() != want {
		t.Fatalf("error:\n got %s\nwant %s", err, want)
	}

	release()
	release2, err := sqlite.LockFile(db, "127.0.0.1:7080")
	if err != nil {
		t.Fatalf("LockFile after release: %v", err)
	}
	release2()
}

// A broker killed with SIGKILL cannot release its lock; the kernel does, so the next broker
// starts without anyone deleting a stale file.
func TestLockFileIsFreedWhenTheHolderIsKilled(t *testing.T) {
	if os.Getenv("JOBWIRE_LOCK_HOLDER") != "" {
		if _, err := sqlite.LockFile(os.Getenv("JOBWIRE_LOCK_HOLDER"), "holder"); err != nil {
			fmt.Println("lock failed:", err)
			os.Exit(3)
		}
		fmt.Println("locked")
		select {} // hold until killed
	}
	db := filepath.Join(t.TempDir(), "jobwire.db")
	cmd := exec.Command(os.Args[0], "-test.run=^TestLockFileIsFreedWhenTheHolderIsKilled$")
	cmd.Env = append(os.Environ(), "JOBWIRE_LOCK_HOLDER="+db)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n, _ := out.Read(buf)
	if !strings.Contains(string(buf[:n]), "locked") {
		t.Fatalf("holder said %q", buf[:n])
	}
	_, err = sqlite.LockFile(db, "second")
	var inUse *sqlite.InUseError
	if !errors.As(err, &inUse) || inUse.PID != fmt.Sprint(cmd.Process.Pid) || inUse.Addr != "holder" {
		t.Fatalf("while the holder runs: got %v (%+v), want InUseError naming pid %d", err, inUse, cmd.Process.Pid)
	}

	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	release, err := sqlite.LockFile(db, "second")
	if err != nil {
		t.Fatalf("after the holder was killed: %v", err)
	}
	release()
}

func TestLockFileSkipsInMemoryDatabases(t *testing.T) {
	for _, p := range []string{":memory:", "file:x?mode=memory"} {
		r1, err := sqlite.LockFile(p, "a")
		if err != nil {
			t.Fatal(err)
		}
		r2, err := sqlite.LockFile(p, "b")
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		r1()
		r2()
	}
}
