package inbox

import "testing"

// TestIsJSON: an action must be sent as application/json, parameters
// allowed; a look-alike (application/jsonx, issue 26) or a type a form may
// send without a preflight is refused.
func TestIsJSON(t *testing.T) {
	for ct, want := range map[string]bool{
		"application/json":                  true,
		"application/json; charset=utf-8":   true,
		"Application/JSON":                  true,
		"application/jsonx":                 false,
		"application/json-patch+json":       false,
		"application/jsonp":                 false,
		"text/plain":                        false,
		"application/x-www-form-urlencoded": false,
		"":                                  false,
		"application/json;;":                false,
	} {
		if got := isJSON(ct); got != want {
			t.Errorf("isJSON(%q) = %v, want %v", ct, got, want)
		}
	}
}
