package grade

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/imagefile"
	"github.com/sandboxd/sandboxd/pkg/visit"
)

// The reward files, as Harbor reads them: reward.json wins over reward.txt,
// in what the verifier sees as visit.VerdictDir.
const (
	rewardJSON = "reward.json"
	rewardTxt  = "reward.txt"
	// maxRewardSize bounds what is read: a reward is a few numbers, and the
	// verifier runs the agent's code, which could leave a huge file there.
	maxRewardSize = 1 << 20
)

// errEmpty marks a reward file that holds nothing: no reward, not a bad one.
var errEmpty = errors.New("is empty")

// readReward reads the reward the verifier left in the verdict directory
// (dirfd): reward.json if it exists, else reward.txt. Absent or empty is
// no_reward; anything unusable is verifier_error with a message that names
// the file and the problem.
func readReward(dirfd int) (map[string]float64, Status, string) {
	// The verifier owns the directory and runs what the agent built: no
	// symlink of its is followed, a FIFO never blocks, a huge file is not read.
	dir, err := imagefile.Beneath(dirfd, visit.VerdictDir)
	if err != nil {
		return nil, StatusError, fmt.Sprintf("read %s: %v", visit.VerdictDir, err)
	}
	defer dir.Close()
	for _, name := range []string{rewardJSON, rewardTxt} {
		data, err := dir.ReadFile(name, maxRewardSize)
		switch {
		case errors.Is(err, unix.ENOENT):
			continue
		case errors.Is(err, unix.ELOOP):
			return nil, StatusError, fmt.Sprintf("%s/%s is a symlink; the verifier must write a regular file", visit.VerdictDir, name)
		case errors.Is(err, imagefile.ErrTooLarge):
			return nil, StatusError, fmt.Sprintf("%s/%s is more than the %d bytes a reward may take", visit.VerdictDir, name, maxRewardSize)
		case err != nil:
			return nil, StatusError, fmt.Sprintf("read %s/%s: %v", visit.VerdictDir, name, err)
		}
		parse := parseRewardTxt
		if name == rewardJSON {
			parse = parseRewardJSON
		}
		r, err := parse(data)
		switch {
		case errors.Is(err, errEmpty):
			return nil, StatusNoReward, fmt.Sprintf("%s/%s %v: the verifier wrote no reward", visit.VerdictDir, name, err)
		case err != nil:
			return nil, StatusError, fmt.Sprintf("%s/%s: %v", visit.VerdictDir, name, err)
		}
		return r, StatusGraded, ""
	}
	return nil, StatusNoReward, "the verifier left neither " + visit.VerdictDir + "/" + rewardJSON + " nor " + visit.VerdictDir + "/" + rewardTxt
}

// parseRewardTxt reads one finite number, surrounded by any white space.
func parseRewardTxt(data []byte) (map[string]float64, error) {
	s := strings.TrimSpace(string(data))
	if s == "" {
		return nil, errEmpty
	}
	x, err := strconv.ParseFloat(s, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return nil, fmt.Errorf("%q is not a number; write one number such as 1 or 0.5", clip(s))
	}
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return nil, fmt.Errorf("%q is not a finite number", clip(s))
	}
	return map[string]float64{"reward": x}, nil
}

// parseRewardJSON reads a flat JSON object of finite numbers.
func parseRewardJSON(data []byte) (map[string]float64, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, errEmpty
	}
	var raw map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&raw); err != nil {
		var ute *json.UnmarshalTypeError
		if errors.As(err, &ute) {
			return nil, fmt.Errorf("is %s, not an object; write a flat object such as {\"reward\": 1}", ute.Value)
		}
		if bytes.Contains(data, []byte("NaN")) || bytes.Contains(data, []byte("Infinity")) {
			return nil, fmt.Errorf("invalid JSON (%v): NaN and Infinity are not finite numbers", err)
		}
		return nil, fmt.Errorf("invalid JSON: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("invalid JSON: more follows the object; write one flat object")
	}
	if raw == nil {
		return nil, errors.New("is null, not an object; write a flat object such as {\"reward\": 1}")
	}
	if len(raw) == 0 {
		return nil, fmt.Errorf("%w: the object has no metrics", errEmpty)
	}
	names := make([]string, 0, len(raw))
	for k := range raw {
		names = append(names, k)
	}
	sort.Strings(names) // the first problem reported is the same every time
	out := make(map[string]float64, len(raw))
	for _, k := range names {
		v := bytes.TrimSpace(raw[k])
		if len(v) == 0 || !(v[0] == '-' || (v[0] >= '0' && v[0] <= '9')) {
			return nil, fmt.Errorf("metric %q is %s, not a number; every value must be a finite number", k, clip(string(v)))
		}
		x, err := strconv.ParseFloat(string(v), 64)
		if err != nil && !errors.Is(err, strconv.ErrRange) {
			return nil, fmt.Errorf("metric %q: %v", k, err)
		}
		if math.IsInf(x, 0) || math.IsNaN(x) {
			return nil, fmt.Errorf("metric %q is %s, which is not a finite number", k, clip(string(v)))
		}
		out[k] = x
	}
	return out, nil
}

// clip shortens what a message quotes from a file the agent's code may have written.
func clip(s string) string {
	const n = 64
	if len(s) > n {
		return strings.ToValidUTF8(s[:n], "") + "…"
	}
	return s
}
