package schedule

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// tzChildEnv marks the run of this test inside a mount namespace whose time zone databases
// are hidden.
const tzChildEnv = "JOBWIRE_TZ_HIDDEN"

// A time_zone is read on a machine without a time zone database, as in a distroless or scratch
// container: the database is built into the binary. The test runs itself again in a mount
// namespace where every place Go looks for one (the system's directories and Go's own
// zoneinfo.zip) is an empty directory.
func TestTimeZonesWithoutASystemDatabase(t *testing.T) {
	if os.Getenv(tzChildEnv) == "1" {
		if _, err := os.Stat("/usr/share/zoneinfo/Europe/Paris"); err == nil {
			t.Fatal("the system's time zone database is still visible")
		}
		if _, err := Parse("0 2 * * *", "Europe/Paris"); err != nil {
			t.Fatal(err)
		}
		return
	}
	out, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		t.Skipf("go env GOROOT: %v", err)
	}
	hidden := []string{"/usr/share/zoneinfo", "/usr/share/lib/zoneinfo", "/usr/lib/locale/TZ", "/etc/zoneinfo",
		filepath.Join(strings.TrimSpace(string(out)), "lib", "time")}
	var script strings.Builder
	for _, dir := range hidden {
		if _, err := os.Stat(dir); err == nil {
			script.WriteString("mount -t tmpfs tmpfs " + dir + " && ")
		}
	}
	script.WriteString(`exec "$0" -test.run='^TestTimeZonesWithoutASystemDatabase$' -test.count=1 -test.v`)
	var unshare []string
	for _, try := range [][]string{{"unshare", "--mount"}, {"unshare", "--map-root-user", "--mount"}} {
		if exec.Command(try[0], append(try[1:], "true")...).Run() == nil {
			unshare = try
			break
		}
	}
	if unshare == nil {
		t.Skip("cannot make a mount namespace (unshare --mount) to hide the time zone databases")
	}
	cmd := exec.Command(unshare[0], append(unshare[1:], "sh", "-c", script.String(), os.Args[0])...)
	cmd.Env = append(os.Environ(), tzChildEnv+"=1", "ZONEINFO=")
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "--- PASS") {
		t.Fatalf("with the time zone databases hidden: %v\n%s", err, out)
	}
}
