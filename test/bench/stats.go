package main

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
)

// samples are measurements of one side of a pair, in the row's unit.
type samples []float64

// pct is the p-th percentile (0–100) by nearest rank.
func (s samples) pct(p float64) float64 {
	if len(s) == 0 {
		return math.NaN()
	}
	c := slices.Clone(s)
	slices.Sort(c)
	i := int(math.Ceil(p/100*float64(len(c)))) - 1
	return c[max(0, min(i, len(c)-1))]
}

// mean is the arithmetic mean.
func (s samples) mean() float64 {
	if len(s) == 0 {
		return math.NaN()
	}
	var sum float64
	for _, v := range s {
		sum += v
	}
	return sum / float64(len(s))
}

func (s samples) median() float64 {
	if len(s) == 0 {
		return math.NaN()
	}
	c := slices.Clone(s)
	slices.Sort(c)
	n := len(c)
	if n%2 == 1 {
		return c[n/2]
	}
	return (c[n/2-1] + c[n/2]) / 2
}

// spread is the interquartile range relative to the median, a quick sign of
// how stable the median is.
func (s samples) spread() float64 {
	m := s.median()
	if m == 0 || len(s) < 4 {
		return 0
	}
	return (s.pct(75) - s.pct(25)) / m
}

// alternate runs the measurements in turn — A B C A B C … — for warmup
// discarded rounds and then rounds kept ones, and returns each side's
// samples. Alternation gives every side the same share of whatever else the
// machine is doing while the benchmark runs.
func alternate(ctx context.Context, warmup, rounds int, fns ...func() (float64, error)) ([]samples, error) {
	out := make([]samples, len(fns))
	for r := 0; r < warmup+rounds; r++ {
		for i, fn := range fns {
			if err := ctx.Err(); err != nil {
				return out, err
			}
			v, err := fn()
			if err != nil {
				return out, fmt.Errorf("round %d, side %d: %w", r, i, err)
			}
			if r >= warmup {
				out[i] = append(out[i], v)
			}
		}
	}
	return out, nil
}

// inParallel runs fn(0) … fn(n-1) at once, each in a goroutine of its own,
// released together once all exist, and returns their samples joined in that
// order, or the error of the first (by that order) that failed.
func inParallel(n int, fn func(i int) (samples, error)) (samples, error) {
	lats := make([]samples, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			lats[i], errs[i] = fn(i)
		}()
	}
	close(start)
	wg.Wait()
	var all samples
	for i := range lats {
		if errs[i] != nil {
			return nil, errs[i]
		}
		all = append(all, lats[i]...)
	}
	return all, nil
}

// result is one row of the main table: sandboxd against one peer.
type result struct {
	id     string // stable key, for the notes on missed targets
	name   string
	unit   string // "ms", "MiB/s", …
	peer   string
	peerV  float64
	ours   float64
	n      int     // samples per side
	spread float64 // the larger IQR/median of the two sides
	// target is on ours/peer (ratio) unless absolute is set, in which case
	// it is on ours itself.
	target   float64
	lessIsOK bool // the target is an upper bound (≤); else a lower bound (≥)
	absolute bool
	noTarget bool // reported only
	detail   string
}

func (r *result) ratio() float64 {
	if r.peerV == 0 || math.IsNaN(r.peerV) {
		return math.NaN()
	}
	return r.ours / r.peerV
}

// met says whether the target holds; reported-only rows are always "met".
func (r *result) met() bool {
	if r.noTarget {
		return true
	}
	v := r.ratio()
	if r.absolute {
		v = r.ours
	}
	if math.IsNaN(v) {
		return false
	}
	if r.lessIsOK {
		return v <= r.target
	}
	return v >= r.target
}

func (r *result) targetText() string {
	if r.noTarget {
		return "report"
	}
	op := "≥"
	if r.lessIsOK {
		op = "≤"
	}
	if r.absolute {
		return fmt.Sprintf("%s %s %s", op, trimNum(r.target), r.unit)
	}
	return fmt.Sprintf("%s %s×", op, trimNum(r.target))
}

// addPair records a pair measured with alternate (side 0 the peer, side 1
// sandboxd); a target of 0 means the row is reported only.
func (b *bench) addPair(id, name, unit, peer string, s []samples, target float64, lessIsOK bool) *result {
	r := &result{id: id, name: name, unit: unit, peer: peer, peerV: s[0].median(), ours: s[1].median(),
		n: len(s[1]), spread: max(s[0].spread(), s[1].spread()), target: target, lessIsOK: lessIsOK, noTarget: target == 0}
	b.results = append(b.results, r)
	b.debugf("%s samples: %s %v; sandboxd %v", name, peer, s[0], s[1])
	b.logf("%s: %s %s %s, sandboxd %s %s → %.3f× (target %s) %s", name, peer, fmtNum(r.peerV), unit, fmtNum(r.ours), unit, r.ratio(), r.targetText(), verdict(r.met()))
	return r
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "MISSED"
}

func trimNum(v float64) string {
	s := fmt.Sprintf("%.2f", v)
	for len(s) > 1 && s[len(s)-1] == '0' {
		s = s[:len(s)-1]
	}
	if s[len(s)-1] == '.' {
		s = s[:len(s)-1]
	}
	return s
}

// fmtNum prints a measurement with three significant digits or so.
func fmtNum(v float64) string {
	switch a := math.Abs(v); {
	case math.IsNaN(v):
		return "–"
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	case a >= 1:
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.3f", v)
	}
}
