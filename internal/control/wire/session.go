package wire

import (
	"context"
	"errors"
	"io"
	"os"
	"strconv"
	"syscall"
)

// Streams are the local ends of an exec.
type Streams struct {
	Stdin          io.Reader // nil: no stdin (the command sees EOF)
	Stdout, Stderr io.Writer
	Resize         <-chan Resize
	// Signal carries the signals the client got: SIGHUP, SIGUSR1 and
	// SIGUSR2 are passed on to the command; any other ends the session, as
	// the end of its context does.
	Signal <-chan os.Signal
	// AbortOnStdinError makes an error reading Stdin end the request
	// instead of sending EOF: an archive cut short is no archive to unpack.
	AbortOnStdinError bool
}

// Session runs the client's side of an exec whose request conn has sent:
// it forwards stdin, window sizes and signals, writes the command's output
// to s, and returns how the command ended. The context's end closes the
// connection, which makes the daemon end the command's whole tree.
func Session(ctx context.Context, conn *Conn, c io.Closer, s Streams) (Exit, error) {
	done := make(chan struct{})
	defer close(done)
	ended := make(chan os.Signal, 1) // the signal that ended the session
	// One goroutine for all that the client sends besides stdin: each one
	// started is a wake-up of a thread, which shows in the start of a
	// short exec.
	resize, signals := s.Resize, s.Signal
	go func() {
		for {
			select {
			case <-ctx.Done():
				c.Close()
				return
			case r, ok := <-resize:
				if !ok {
					resize = nil // a closed channel sends no more sizes
					continue
				}
				conn.Write(KindResize, r.json())
			case sig, ok := <-signals:
				if !ok {
					signals = nil
					continue
				}
				if name := signalName(sig); name != "" {
					conn.Write(KindSignal, []byte(name))
					continue
				}
				ended <- sig
				c.Close()
				return
			case <-done:
				return
			}
		}
	}()
	if s.Stdin != nil {
		go func() {
			if _, err := io.Copy(Writer{C: conn, Kind: KindStdin}, s.Stdin); err != nil && s.AbortOnStdinError {
				c.Close()
				return
			}
			conn.Write(KindEOF, nil)
		}()
	}
	for {
		kind, payload, err := conn.Read()
		if err != nil {
			if ctx.Err() != nil {
				return Exit{}, ctx.Err()
			}
			select {
			case sig := <-ended:
				return Exit{}, &Interrupted{sig}
			default:
			}
			return Exit{}, errors.New("the daemon closed the session without an exit status (" + err.Error() + "): see its log")
		}
		switch kind {
		case KindStdout:
			if _, err := s.Stdout.Write(payload); err != nil {
				return Exit{}, err
			}
		case KindStderr:
			if _, err := s.Stderr.Write(payload); err != nil {
				return Exit{}, err
			}
		case KindExit:
			var e Exit
			if err := e.decode(payload); err != nil {
				return Exit{}, errors.New("decode exit: " + err.Error())
			}
			return e, nil
		case KindError:
			var f Failure
			if err := f.decode(payload); err != nil {
				return Exit{}, errors.New("decode failure: " + err.Error())
			}
			return Exit{}, &f
		default:
			return Exit{}, errors.New("unexpected frame " + strconv.QuoteRune(rune(kind)) + " in exec")
		}
	}
}

// signalName is a signal's name as the daemon takes it, "" for one it does
// not pass on.
func signalName(sig os.Signal) string {
	switch sig {
	case syscall.SIGHUP:
		return "HUP"
	case syscall.SIGUSR1:
		return "USR1"
	case syscall.SIGUSR2:
		return "USR2"
	}
	return ""
}

// Interrupted is a session that a signal to the client ended: the daemon
// ends the command's whole tree when the connection closes.
type Interrupted struct{ Signal os.Signal }

func (e *Interrupted) Error() string {
	return "ended by " + signalDisplayName(e.Signal) + ": the command's whole tree was killed"
}

// signalDisplayName is the name a user sends a signal by, for the two
// that end a session; the runtime's description for the others.
func signalDisplayName(sig os.Signal) string {
	switch sig {
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGINT:
		return "SIGINT"
	}
	return sig.String()
}
