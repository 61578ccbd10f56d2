//go:build linux

package builtin

import (
	"io/fs"
	"os"
	"path"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/toolbus/toolbus/permission"
	"golang.org/x/sys/unix"
)

// On Linux every open is an openat2 beneath the base directory's descriptor
// that follows no symlink, or a walk of O_NOFOLLOW opens without openat2:
// what was judged is what is opened (docs/builtin.md, "Paths").
const resolveBeneath = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

// noOpenat2 is set once openat2 answered ENOSYS: every open walks.
var noOpenat2 atomic.Bool

// openBase opens the base directory's descriptor: O_PATH reads nothing.
func openBase(dir string) (int, error) {
	return unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
}

// openNoSymlinks opens p (relative to dirfd, or absolute) following no
// symlink on any component: openat2 with resolve (which holds
// RESOLVE_NO_SYMLINKS), or walkOpen where the kernel has no openat2.
func openNoSymlinks(dirfd int, p string, flag int, perm fs.FileMode, resolve uint64) (int, error) {
	flag |= unix.O_CLOEXEC | unix.O_NOFOLLOW
	if !noOpenat2.Load() && !forceWalk {
		how := unix.OpenHow{Flags: uint64(flag), Resolve: resolve}
		if flag&unix.O_CREAT != 0 {
			how.Mode = uint64(perm.Perm())
		}
		for range 16 { // EAGAIN: a rename raced a scoped lookup; retry
			fd, err := unix.Openat2(dirfd, p, &how)
			switch err {
			case unix.EINTR, unix.EAGAIN:
				continue
			case unix.ENOSYS:
				noOpenat2.Store(true)
			case unix.EPERM, unix.E2BIG: // a seccomp filter, or a struct the kernel does not know
			default:
				return fd, err
			}
			break
		}
	}
	return walkOpen(dirfd, p, flag, perm)
}

// forceWalk makes every open walk, as on a kernel without openat2 (tests).
var forceWalk bool

// walkOpen is openNoSymlinks without openat2: p's directories opened with
// dirFd, then its last component with flag, which holds O_NOFOLLOW.
func walkOpen(dirfd int, p string, flag int, perm fs.FileMode) (int, error) {
	dir, leaf := path.Split(p)
	switch leaf {
	case "..":
		return -1, unix.EXDEV
	case "":
		leaf = "."
	}
	d, err := dirFd(dirfd, dir, false)
	if err != nil {
		return -1, err
	}
	defer unix.Close(d)
	for {
		fd, err := unix.Openat(d, leaf, flag, uint32(perm.Perm()))
		if err != unix.EINTR {
			return fd, err
		}
	}
}

// dirFd opens the directory dir (relative to dirfd, or absolute) one
// component at a time, none followed if it is a symlink; with create, a
// missing component is made (mode 0755, less the umask) first. A ".."
// component is refused (EXDEV). The caller closes the descriptor.
func dirFd(dirfd int, dir string, create bool) (int, error) {
	start := "."
	if strings.HasPrefix(dir, "/") {
		start = "/"
	}
	cur, err := unix.Openat(dirfd, start, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	for _, c := range strings.Split(dir, "/") {
		switch c {
		case "", ".":
			continue
		case "..":
			unix.Close(cur)
			return -1, unix.EXDEV
		}
		if create {
			if err := unix.Mkdirat(cur, c, 0o755); err != nil && err != unix.EEXIST {
				unix.Close(cur)
				return -1, err
			}
		}
		next, err := unix.Openat(cur, c, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(cur)
		if err != nil {
			return -1, err
		}
		cur = next
	}
	return cur, nil
}

// open opens p (relative to the base) with flag, never following a symlink
// on any component: one that appeared since the resolution is errSwapped,
// or errEscapes when the path now leaves the base. Reads and writes open
// non-blocking, so a FIFO answers at once.
func (t *tree) open(p string, flag int, perm fs.FileMode) (*os.File, error) {
	if flag&unix.O_PATH == 0 {
		flag |= unix.O_NONBLOCK
	}
	fd, err := openNoSymlinks(t.fd, p, flag, perm, resolveBeneath)
	if err != nil {
		if err == unix.ELOOP || err == unix.EXDEV || err == unix.ENOTDIR && t.linkIn(p) {
			err = errSwapped
			if !within(t.base, permission.Resolve(t.abs(p))) {
				err = errEscapes
			}
		}
		return nil, &os.PathError{Op: "open", Path: p, Err: err}
	}
	return os.NewFile(uintptr(fd), t.abs(p)), nil
}

// stat describes p itself (relative to the base), never following a link.
func (t *tree) stat(p string) (fs.FileInfo, error) {
	fh, err := t.open(p, unix.O_PATH, 0)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	return fh.Stat()
}

// mkdirs makes the missing directories of dir, following no symlink.
func (t *tree) mkdirs(dir string) error {
	fd, err := dirFd(t.fd, dir, true)
	if err != nil {
		if err == unix.ELOOP || err == unix.ENOTDIR && t.linkIn(dir) {
			err = errSwapped
		}
		return &os.PathError{Op: "mkdir", Path: dir, Err: err}
	}
	return unix.Close(fd)
}

// readDir lists dir (unsorted), opened without following a symlink.
func (t *tree) readDir(dir string) ([]fs.DirEntry, error) {
	fh, err := t.open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	return fh.ReadDir(-1)
}

// hardLinks is the number of names fi's file has.
func hardLinks(fi fs.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Nlink)
	}
	return 1
}
