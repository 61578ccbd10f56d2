package embedded_test

import "time"

// bound limits every wait in these tests.
const bound = 10 * time.Second
