package skills

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"time"
)

// Pack returns files as a gzipped tar, the form of a skill in the object
// store: regular files only, in path order, with fixed times and modes
// (executable for files under scripts/), so equal skills pack equally.
func Pack(files map[string][]byte) ([]byte, error) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, p := range slices.Sorted(maps.Keys(files)) {
		if err := checkPath(p); err != nil {
			return nil, fmt.Errorf("skills: pack: %w", err)
		}
		mode := int64(0o644)
		if isScript(p) {
			mode = 0o755
		}
		hdr := &tar.Header{Name: p, Mode: mode, Size: int64(len(files[p])), Typeflag: tar.TypeReg,
			ModTime: time.Unix(0, 0), Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, fmt.Errorf("skills: pack %s: %w", p, err)
		}
		if _, err := tw.Write(files[p]); err != nil {
			return nil, fmt.Errorf("skills: pack %s: %w", p, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func isScript(p string) bool { return len(p) > len("scripts/") && p[:len("scripts/")] == "scripts/" }

// Unpack reads a gzipped tar made by Pack. It refuses anything but regular
// files and directories, paths that are not clean and relative, and
// archives beyond the limits of a skill.
func Unpack(data []byte) (map[string][]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("skills: unpack: %w", err)
	}
	tr := tar.NewReader(zr)
	files := map[string][]byte{}
	total := 0
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files, nil
		}
		if err != nil {
			return nil, fmt.Errorf("skills: unpack: %w", err)
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			continue
		case tar.TypeReg:
		default:
			return nil, fmt.Errorf("skills: unpack: %s is not a regular file", hdr.Name)
		}
		if err := checkPath(hdr.Name); err != nil {
			return nil, fmt.Errorf("skills: unpack: %w", err)
		}
		if hdr.Size > MaxFile || len(files) >= MaxFiles {
			return nil, fmt.Errorf("skills: unpack: %s is beyond the limits of a skill", hdr.Name)
		}
		if total += int(hdr.Size); total > MaxSkill {
			return nil, fmt.Errorf("skills: unpack: the skill holds more than %d bytes", MaxSkill)
		}
		b, err := io.ReadAll(io.LimitReader(tr, MaxFile+1))
		if err != nil {
			return nil, fmt.Errorf("skills: unpack %s: %w", hdr.Name, err)
		}
		files[hdr.Name] = b
	}
}
