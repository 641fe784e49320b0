package job

import (
	"errors"
	"fmt"
	"math"
	"time"
	"unicode/utf8"
)

// MaxProgressMessage is the longest progress message, in bytes of UTF-8: a line for people,
// not a log.
const MaxProgressMessage = 256

// Progress is how far a job's attempt got, as its worker last said.
type Progress struct {
	// Attempt is the number of the attempt that reported it.
	Attempt int
	// Fraction is from 0 to 1; HasFraction is false when the worker gave only a message.
	Fraction    float64
	HasFraction bool
	Message     string
	UpdatedAt   time.Time
}

// CheckProgress refuses a progress report no one could show: a fraction outside 0..1, or a
// message that is too long or not UTF-8.
func CheckProgress(fraction float64, hasFraction bool, message string) error {
	if hasFraction && (math.IsNaN(fraction) || fraction < 0 || fraction > 1) {
		return fmt.Errorf("progress fraction %v is outside 0..1", fraction)
	}
	if len(message) > MaxProgressMessage {
		return fmt.Errorf("progress message is %d bytes; at most %d are allowed", len(message), MaxProgressMessage)
	}
	if !utf8.ValidString(message) {
		return errors.New("progress message is not valid UTF-8")
	}
	return nil
}
