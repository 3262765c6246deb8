package grade

import (
	"io"
	"os"
	"strings"
)

// Status is the outcome of one grading, as the verdict JSON names it.
type Status string

// The four outcomes. Only StatusGraded carries a reward.
const (
	StatusGraded   Status = "graded"           // a finite reward was read
	StatusNoReward Status = "no_reward"        // the verifier left no reward, or an empty one
	StatusTimeout  Status = "verifier_timeout" // the verifier ran past its timeout and was killed
	StatusError    Status = "verifier_error"   // test.sh missing or unable to start, or an unusable reward
)

// Exit codes of `sandboxd grade` and `sandboxd trial` (see the package
// documentation).
const (
	ExitGraded        = 0
	ExitNoReward      = 3
	ExitTimeout       = 4
	ExitVerifierError = 5
	ExitInternal      = 125 // sandboxd's own failure, as docker run and timeout(1) use it
)

// ExitCode is the process exit code that reports s.
func (s Status) ExitCode() int {
	switch s {
	case StatusGraded:
		return ExitGraded
	case StatusNoReward:
		return ExitNoReward
	case StatusTimeout:
		return ExitTimeout
	}
	return ExitVerifierError
}

// Verdict is what one grading found; its JSON is what `sandboxd grade --json`
// prints.
type Verdict struct {
	Status Status `json:"status"`
	// Reward holds every metric of reward.json, or {"reward": x} from
	// reward.txt; nil (JSON null) unless Status is graded.
	Reward map[string]float64 `json:"reward"`
	// ExitCode is test.sh's exit code (128+N when signal N ended it); -1 when
	// it never ran or did not end by itself (timeout). Harbor ignores it for
	// the reward, and so do we; it is reported for people reading the verdict.
	ExitCode    int     `json:"exit_code"`
	DurationSec float64 `json:"duration_sec"`
	StdoutTail  string  `json:"stdout_tail"` // the end of test-stdout.txt
	Message     string  `json:"message,omitempty"`
}

// tailSize is how much of test-stdout.txt the verdict carries: enough for a
// pytest summary, small enough for one JSON line.
const tailSize = 8 << 10

// readTail returns the last tailSize bytes of f as valid UTF-8. It reads the
// descriptor the daemon created, never the path: the verifier owns the
// verdict directory and could put a symlink where the file was.
func readTail(f *os.File) string {
	st, err := f.Stat()
	if err != nil {
		return ""
	}
	off := st.Size() - tailSize
	if off < 0 {
		off = 0
	}
	b, err := io.ReadAll(io.NewSectionReader(f, off, tailSize))
	if err != nil && len(b) == 0 {
		return ""
	}
	s := string(b)
	if off > 0 {
		// Cut at a line start when one is near, so the tail reads cleanly.
		if i := strings.IndexByte(s, '\n'); i >= 0 && i < 256 {
			s = s[i+1:]
		}
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}
