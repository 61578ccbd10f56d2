package inbox

import "time"

// Link mints another one-time link to the page, as Open does for URL.
func (r *Running) Link() string {
	return "http://" + r.Addr + "/?code=" + r.s.codes.mint(time.Now())
}
