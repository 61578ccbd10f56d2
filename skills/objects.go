package skills

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Object metadata keys of a pushed skill.
const (
	metaDigest = "toolbus-digest"
	metaUser   = "toolbus-user"
)

// ObjectName is the name of the object that holds skill name for user ("":
// every user): "<name>", or "users/<user>/<name>".
func ObjectName(name, user string) string {
	if user == "" {
		return name
	}
	return "users/" + user + "/" + name
}

// parseObjectName splits an object name into skill name and user.
func parseObjectName(obj string) (name, user string, ok bool) {
	if rest, scoped := strings.CutPrefix(obj, "users/"); scoped {
		i := strings.LastIndexByte(rest, '/')
		if i <= 0 {
			return "", "", false
		}
		return rest[i+1:], rest[:i], CheckName(rest[i+1:]) == nil
	}
	return obj, "", CheckName(obj) == nil
}

// Push checks skill folder dir and stores it as one object, for user ("" for
// everyone); a bad skill stores nothing (*Error).
func Push(ctx context.Context, os jetstream.ObjectStore, dir, user string) (*Skill, error) {
	s, err := LoadFolder(dir)
	if err != nil {
		return nil, err
	}
	if strings.ContainsAny(user, "\x00") {
		return nil, fmt.Errorf("skills: user %q is not valid", user)
	}
	data, err := Pack(s.files)
	if err != nil {
		return nil, err
	}
	obj := ObjectName(s.Name, user)
	_, err = os.Put(ctx, jetstream.ObjectMeta{Name: obj, Description: s.Description,
		Metadata: map[string]string{metaDigest: s.Digest, metaUser: user}}, bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("skills: push %s: %w", obj, err)
	}
	return s.withScope(objectSource(ctx, os, obj), user), nil
}

// ErrNotFound says there is no such skill in the object store.
var ErrNotFound = errors.New("skills: no such skill in the object store")

// Remove deletes the object of skill name for user; ErrNotFound when there
// is none.
func Remove(ctx context.Context, os jetstream.ObjectStore, name, user string) error {
	obj := ObjectName(name, user)
	_, err := os.GetInfo(ctx, obj)
	if err == nil {
		err = os.Delete(ctx, obj)
	}
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return fmt.Errorf("%w: %s", ErrNotFound, obj)
	}
	if err != nil {
		return fmt.Errorf("skills: remove %s: %w", obj, err)
	}
	return nil
}

// fetch reads and checks the object described by info.
func fetch(ctx context.Context, os jetstream.ObjectStore, info *jetstream.ObjectInfo) (*Skill, error) {
	name, user, ok := parseObjectName(info.Name)
	if !ok {
		return nil, &Error{File: info.Name, Rule: "object name is not <skill name> or users/<user>/<skill name>"}
	}
	if info.Size > MaxSkill*2 {
		return nil, &Error{File: info.Name, Rule: "object is larger than a skill may be"}
	}
	data, err := os.GetBytes(ctx, info.Name)
	if err != nil {
		return nil, fmt.Errorf("skills: read %s: %w", info.Name, err)
	}
	files, err := Unpack(data)
	if err != nil {
		return nil, &Error{File: info.Name, Rule: err.Error()}
	}
	s, err := newSkill(name, info.Name, "bus:"+info.Bucket+"/"+info.Name, files)
	if err != nil {
		return nil, err
	}
	s.User = user
	return s, nil
}

// objectSource is the Source of a skill held in object obj.
func objectSource(ctx context.Context, os jetstream.ObjectStore, obj string) string {
	if st, err := os.Status(ctx); err == nil {
		return "bus:" + st.Bucket() + "/" + obj
	}
	return "bus:" + obj
}

// Pack returns files as a deterministic gzipped tar (scripts/ executable).
func Pack(files map[string][]byte) ([]byte, error) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, p := range slices.Sorted(maps.Keys(files)) {
		if err := checkPath(p); err != nil {
			return nil, fmt.Errorf("skills: pack: %w", err)
		}
		hdr := &tar.Header{Name: p, Mode: int64(fileMode(p)), Size: int64(len(files[p])), Typeflag: tar.TypeReg,
			ModTime: time.Unix(0, 0), Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, fmt.Errorf("skills: pack %s: %w", p, err)
		}
		if _, err := tw.Write(files[p]); err != nil {
			return nil, fmt.Errorf("skills: pack %s: %w", p, err)
		}
	}
	if err := errors.Join(tw.Close(), zw.Close()); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// fileMode is the permissions of a skill's file p: the files under
// scripts/ are executable.
func fileMode(p string) fs.FileMode {
	if len(p) > len("scripts/") && strings.HasPrefix(p, "scripts/") {
		return 0o755
	}
	return 0o644
}

// Unpack reads Pack's tar, refusing other entry types, unclean paths and
// archives past a skill's limits.
func Unpack(data []byte) (map[string][]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("skills: unpack: %w", err)
	}
	tr := tar.NewReader(zr)
	files := map[string][]byte{}
	total, entries := 0, 0
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files, nil
		}
		if err != nil {
			return nil, fmt.Errorf("skills: unpack: %w", err)
		}
		// Every entry counts, directories too: a few MiB of gzip can hold
		// millions of directory headers, each read on every router that
		// loads the skill (session 18, red team: TestAttackUnpackEntries).
		if entries++; entries > 2*MaxFiles {
			return nil, fmt.Errorf("skills: unpack: more than %d entries", 2*MaxFiles)
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
