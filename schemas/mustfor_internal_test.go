package schemas

import "encoding/json"

// MustFor is For that panics on error, for package-level variables.
func MustFor[T any]() json.RawMessage {
	raw, err := For[T]()
	if err != nil {
		panic(err)
	}
	return raw
}
