// Package imagefile reads the image's configuration files (/etc/passwd,
// /etc/hosts, …) the way anything in the daemon must: they lie in a
// filesystem the agent can write, so only a regular file is read (a FIFO
// planted there would hang whoever opens it), it is opened without
// blocking, and only so much of it is read.
package imagefile

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
)

// Lines calls fn with each line of the file at path, reading at most limit
// bytes. A missing file has no lines (an image may lack /etc/passwd, as
// Docker allows).
func Lines(path string, limit int64, fn func(line string)) error {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return fmt.Errorf("read %s: not a regular file", path)
	}
	sc := bufio.NewScanner(io.LimitReader(f, limit))
	for sc.Scan() {
		fn(sc.Text())
	}
	return sc.Err()
}
