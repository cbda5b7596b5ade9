package journal

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/narwhal-bench/narwhal-bench/event"
)

// A journal whose store another process holds (as a router still serving
// holds it) is refused as in use, not as damaged. The other process is
// this test binary again, holding Pebble's lock (a POSIX record lock,
// which only another process can contend for) until its stdin closes.
func TestOpenInUseByAnotherProcess(t *testing.T) {
	if lock := os.Getenv("NWB_HOLD_LOCK"); lock != "" {
		f, err := os.OpenFile(lock, os.O_RDWR, 0)
		if err == nil {
			err = syscall.FcntlFlock(f.Fd(), syscall.F_SETLK, &syscall.Flock_t{Type: syscall.F_WRLCK, Whence: io.SeekStart})
		}
		if err != nil {
			os.Stdout.WriteString("error " + err.Error() + "\n")
			os.Exit(1)
		}
		os.Stdout.WriteString("locked\n")
		io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}
	dir := filepath.Join(t.TempDir(), "run")
	w, err := Create(dir, event.RunMeta{Version: "test", Driver: "sim", Arm: "a", Rate: 1}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	var lock []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Name() == "LOCK" {
			lock = append(lock, p)
		}
		return nil
	})
	if len(lock) != 1 {
		t.Fatalf("Pebble LOCK files under %s: %v", dir, lock)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestOpenInUseByAnotherProcess$")
	cmd.Env = append(os.Environ(), "NWB_HOLD_LOCK="+lock[0])
	stdin, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); cmd.Wait() }()
	if line, _ := bufio.NewReader(out).ReadString('\n'); line != "locked\n" {
		t.Fatalf("the lock holder said %q", line)
	}
	_, err = Open(dir)
	if err == nil || !strings.Contains(err.Error(), "in use") || strings.Contains(err.Error(), "damaged") {
		t.Fatalf("open while another process holds the lock: %v; expected \"in use\", not damaged", err)
	}
}

// A run opened as "." (or "x/..") is named by its directory, not the dot:
// the name is the join key between the exported tables.
func TestRunNameOfDot(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "adaptive@2.4")
	if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	for _, p := range []string{".", "sub/..", dir} {
		if got := RunName(p); got != "adaptive@2.4" {
			t.Errorf("RunName(%q) = %q, expected adaptive@2.4", p, got)
		}
	}
}
