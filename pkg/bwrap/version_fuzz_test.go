package bwrap

import (
	"testing"
)

// FuzzParseVersion feeds `bwrap --version` output of any shape to the parser
// that gates every option the argv builder may emit
// (docs/failures.md#options-newer-than-the-bwrap-are-never-emitted): what it
// accepts is a version that prints and parses back to itself, never a
// negative number, and it orders consistently against the minimum.
func FuzzParseVersion(f *testing.F) {
	for _, s := range []string{
		"bubblewrap 0.8.0\n", "bubblewrap 0.4.1", "bubblewrap 0.8.0-2ubuntu1", "bubblewrap 0.11",
		"bubblewrap 1", "bubblewrap", "bwrap 0.8.0", "bubblewrap .8.0", "bubblewrap 0.8.0.1",
		"bubblewrap 99999999999999999999.0.0", "bubblewrap -1.0.0", "  bubblewrap\t0.5.0  extra",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, out string) {
		v, err := ParseVersion(out)
		if err != nil {
			return
		}
		if v.Major < 0 || v.Minor < 0 || v.Patch < 0 {
			t.Fatalf("%q parsed as %v", out, v)
		}
		back, err := ParseVersion("bubblewrap " + v.String())
		if err != nil || back != v {
			t.Fatalf("%q → %v → %q → %v (%v)", out, v, v.String(), back, err)
		}
		if v.Less(v) || (v.Less(Minimum) && Minimum.Less(v)) {
			t.Fatalf("%v orders inconsistently", v)
		}
		// An argv for it either builds or says which option is missing.
		a := NewArgs(v)
		a.Add("--unshare-user").Add("--disable-userns")
		if _, err := a.Build(); err != nil && !v.Less(Version{0, 8, 0}) {
			t.Fatalf("bwrap %v refused --disable-userns: %v", v, err)
		}
	})
}
