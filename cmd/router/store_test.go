//go:build unix

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/internal/testkit"
)

// TestDefaultStoreTakeover: another local user who made the default store
// directory first cannot get the router to use it (issue 26, item 4). A
// 0777 directory with a symlinked lock file is refused, naming the mode;
// a private directory with a symlinked lock file is refused, naming the
// link; the link's target is never created. A fresh default store is made
// 0700 under the user's cache directory.
func TestDefaultStoreTakeover(t *testing.T) {
	const listen = "127.0.0.1:4999"
	for _, tc := range []struct {
		name      string
		parent    os.FileMode // mode of <cache>/toolbus
		mode      os.FileMode // mode of the data directory
		want      string
		linkFirst bool
	}{
		{"open_dir_linked_lock", 0o700, 0o777, "has mode 0777: other users may reach it; refusing it for the JetStream store", true},
		{"open_parent", 0o777, 0o700, "toolbus has mode 0777", false},
		{"private_dir_linked_lock", 0o700, 0o700, "is a symbolic link; refusing to follow it", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cache := t.TempDir()
			t.Setenv("XDG_CACHE_HOME", cache)
			data := filepath.Join(cache, "toolbus", "data-127.0.0.1-4999")
			if err := os.MkdirAll(data, 0o700); err != nil {
				t.Fatal(err)
			}
			for d, m := range map[string]os.FileMode{filepath.Dir(data): tc.parent, data: tc.mode} {
				if err := os.Chmod(d, m); err != nil {
					t.Fatal(err)
				}
			}
			target := filepath.Join(t.TempDir(), "theirs")
			if tc.linkFirst {
				if err := os.Symlink(target, filepath.Join(data, "toolbus-router.lock")); err != nil {
					t.Fatal(err)
				}
			}
			err := run(t.Context(), []string{"--listen", listen}, &testkit.Buffer{}, &testkit.Buffer{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("router on a taken-over default store: %v, want %q", err, tc.want)
			}
			if _, err := os.Lstat(target); !os.IsNotExist(err) {
				t.Fatalf("the link's target was created: %v", err)
			}
		})
	}
	t.Run("fresh", func(t *testing.T) {
		cache := filepath.Join(t.TempDir(), "no-cache-yet")
		t.Setenv("XDG_CACHE_HOME", cache)
		dir, err := storeDir("", listen)
		if err != nil {
			t.Fatal(err)
		}
		if dir != filepath.Join(cache, "toolbus", "data-127.0.0.1-4999") {
			t.Fatalf("store %s", dir)
		}
		for _, d := range []string{filepath.Dir(dir), dir} {
			if fi, err := os.Lstat(d); err != nil || fi.Mode().Perm() != 0o700 {
				t.Fatalf("%s: %v %v, want 0700", d, fi.Mode(), err)
			}
		}
		unlock, err := lockStore(dir, "127.0.0.1:4222")
		if err != nil {
			t.Fatal(err)
		}
		unlock()
	})
}

// TestExplicitStore: a --data directory others may write is refused; one
// they may only read is used as it is.
func TestExplicitStore(t *testing.T) {
	for _, tc := range []struct {
		mode os.FileMode
		want string
	}{{0o755, ""}, {0o775, "has mode 0775"}, {0o777, "has mode 0777"}} {
		dir := filepath.Join(t.TempDir(), "data")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, tc.mode); err != nil {
			t.Fatal(err)
		}
		_, err := storeDir(dir, "x")
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Fatalf("--data with mode %#o: %v, want %q", tc.mode, err, tc.want)
		}
	}
}

// TestSecureDirMode: a --secure directory others may read is set to 0700
// and the router says so; one others may write, or a link, is refused and
// the router does not start (issue 26, item 9).
func TestSecureDirMode(t *testing.T) {
	for _, tc := range []struct {
		name string
		mode os.FileMode
		link bool
		want string // in the error; "" for fixed
	}{
		{"readable_fixed", 0o755, false, ""},
		{"private", 0o700, false, ""},
		{"writable_refused", 0o777, false, "has mode 0777"},
		{"group_writable_refused", 0o770, false, "has mode 0770"},
		{"link_refused", 0o700, true, "not a directory (a symlink?)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "secure")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(dir, tc.mode); err != nil {
				t.Fatal(err)
			}
			if tc.link {
				link := filepath.Join(t.TempDir(), "link")
				if err := os.Symlink(dir, link); err != nil {
					t.Fatal(err)
				}
				dir = link
			}
			var out testkit.Buffer
			if tc.want != "" {
				err := run(t.Context(), []string{"--secure", dir, "--listen", "127.0.0.1:-1", "--data", t.TempDir()}, &out, &testkit.Buffer{})
				if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "refused") {
					t.Fatalf("--secure %s: %v, want %q", tc.name, err, tc.want)
				}
				if _, err := os.Stat(filepath.Join(dir, "nats-server.conf")); !os.IsNotExist(err) {
					t.Fatal("users were generated in a refused directory")
				}
				return
			}
			if err := secureMode(dir, &out); err != nil {
				t.Fatal(err)
			}
			if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
				t.Fatalf("mode %v %v", fi.Mode(), err)
			}
			said := strings.Contains(out.String(), "had mode 0755") && strings.Contains(out.String(), "fixed: it is 0700 now")
			if said != (tc.mode == 0o755) {
				t.Fatalf("the router said %q", out.String())
			}
		})
	}
}
