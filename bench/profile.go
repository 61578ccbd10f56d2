package bench

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"runtime/pprof"
	"time"
)

// errProfiling says the CPU profiler was busy (e.g. go test -cpuprofile).
var errProfiling = errors.New("bench: the CPU profiler is in use")

// cpuByPart runs fn under the CPU profiler and returns the CPU time its
// samples attribute to each part (the labelKey goroutine label; unlabelled
// samples count as partOther).
func cpuByPart(fn func() error) (map[string]time.Duration, error) {
	var buf bytes.Buffer
	if err := pprof.StartCPUProfile(&buf); err != nil {
		return nil, errProfiling
	}
	err := fn()
	pprof.StopCPUProfile()
	if err != nil {
		return nil, err
	}
	return cpuByLabel(buf.Bytes(), labelKey)
}

// cpuByLabel sums the CPU nanoseconds of a gzipped pprof CPU profile by the
// value of the goroutine label key. It reads only what it needs of the
// profile.proto encoding: sample types, samples with their values and
// labels, and the string table.
func cpuByLabel(gz []byte, key string) (map[string]time.Duration, error) {
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return nil, fmt.Errorf("bench: profile: %w", err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		return nil, fmt.Errorf("bench: profile: %w", err)
	}
	type sample struct {
		values []int64
		labels [][2]int64 // key, str string indices
	}
	var (
		types   []int64 // type string index per value
		samples []sample
		strs    []string
	)
	err = fields(raw, func(f int, v uint64, b []byte) error {
		switch f {
		case 1: // sample_type
			return fields(b, func(f int, v uint64, _ []byte) error {
				if f == 1 {
					types = append(types, int64(v))
				}
				return nil
			})
		case 2: // sample
			var s sample
			err := fields(b, func(f int, v uint64, b []byte) error {
				switch f {
				case 2: // value, packed or not
					if b == nil {
						s.values = append(s.values, int64(v))
						return nil
					}
					for len(b) > 0 {
						x, n := binary.Uvarint(b)
						if n <= 0 {
							return errors.New("bad packed value")
						}
						s.values, b = append(s.values, int64(x)), b[n:]
					}
				case 3: // label
					var l [2]int64
					err := fields(b, func(f int, v uint64, _ []byte) error {
						if f == 1 || f == 2 {
							l[f-1] = int64(v)
						}
						return nil
					})
					s.labels = append(s.labels, l)
					return err
				}
				return nil
			})
			samples = append(samples, s)
			return err
		case 6: // string_table
			strs = append(strs, string(b))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("bench: profile: %w", err)
	}
	str := func(i int64) string {
		if i < 0 || int(i) >= len(strs) {
			return ""
		}
		return strs[i]
	}
	cpu := -1
	for i, t := range types {
		if str(t) == "cpu" {
			cpu = i
		}
	}
	if cpu < 0 {
		return nil, errors.New("bench: profile has no cpu samples type")
	}
	out := map[string]time.Duration{}
	for _, s := range samples {
		if cpu >= len(s.values) {
			continue
		}
		part := partOther
		for _, l := range s.labels {
			if str(l[0]) == key {
				part = str(l[1])
			}
		}
		out[part] += time.Duration(s.values[cpu])
	}
	return out, nil
}

// fields calls fn for each field of a protobuf message: varints with v set,
// length-delimited fields with b set (non-nil), fixed-size ones skipped.
func fields(b []byte, fn func(field int, v uint64, b []byte) error) error {
	for len(b) > 0 {
		k, n := binary.Uvarint(b)
		if n <= 0 {
			return errors.New("bad field key")
		}
		b = b[n:]
		field, wire := int(k>>3), k&7
		switch wire {
		case 0:
			v, n := binary.Uvarint(b)
			if n <= 0 {
				return errors.New("bad varint")
			}
			b = b[n:]
			if err := fn(field, v, nil); err != nil {
				return err
			}
		case 1, 5:
			size := 8
			if wire == 5 {
				size = 4
			}
			if len(b) < size {
				return errors.New("short fixed field")
			}
			b = b[size:]
		case 2:
			l, n := binary.Uvarint(b)
			if n <= 0 || uint64(len(b)-n) < l {
				return errors.New("bad length")
			}
			data := b[n : n+int(l) : n+int(l)]
			if data == nil {
				data = []byte{}
			}
			b = b[n+int(l):]
			if err := fn(field, 0, data); err != nil {
				return err
			}
		default:
			return fmt.Errorf("unsupported wire type %d", wire)
		}
	}
	return nil
}
