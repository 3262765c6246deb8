package http1

import (
	"bufio"
	"errors"
	"strconv"
	"strings"
)

// Response is a parsed upstream response head.
type Response struct {
	Status int
	Reason string
	HTTP10 bool
	Header Header
	Body   Framing
	Close  bool
}

// ReadResponse reads one response head and its framing for a request of
// method; any grammar fault is a 502 so nothing of it reaches the client.
func ReadResponse(br *bufio.Reader, method string) (*Response, error) {
	resp, err := readResponseHead(br, method)
	var pe *Error
	if errors.As(err, &pe) {
		return nil, &Error{Status: 502, Reason: "upstream sent an invalid response: " + pe.Reason}
	}
	return resp, err
}

func readResponseHead(br *bufio.Reader, method string) (*Response, error) {
	line, err := readLine(br)
	if err != nil {
		return nil, err
	}
	version, rest, _ := strings.Cut(line, " ")
	code, reason, _ := strings.Cut(rest, " ")
	r := &Response{Reason: reason}
	var known bool
	if r.HTTP10, known = parseVersion(version); !known {
		return nil, badRequest("malformed status line")
	}
	if len(code) != 3 || strings.TrimLeft(code, "0123456789") != "" || code[0] == '0' {
		return nil, badRequest("malformed status code")
	}
	r.Status, _ = strconv.Atoi(code)
	if !validValue(reason) {
		return nil, badRequest("reason phrase holds a control character")
	}
	if r.Header, err = readHeader(br); err != nil {
		return nil, err
	}
	r.Close = wantsClose(r.Header, r.HTTP10)
	switch {
	case r.Status < 200, r.Status == 204, r.Status == 304, method == "HEAD":
		r.Body = Framing{Kind: NoBody}
		return r, nil
	}
	if r.Body, err = bodyFraming(r.Header, r.HTTP10); err != nil {
		return nil, err
	}
	if r.Body.Kind == NoBody {
		r.Body.Kind, r.Close = ByClose, true
	}
	return r, nil
}

// WriteResponseHead writes a status line and fields, without the final CRLF
// unless the message is interim (1xx).
func WriteResponseHead(w *bufio.Writer, resp *Response, fields Header, f Framing) {
	w.WriteString("HTTP/1.1 " + strconv.Itoa(resp.Status) + " " + resp.Reason + "\r\n")
	writeFields(w, fields)
	writeFraming(w, f)
	if resp.Status < 200 && resp.Status != 101 {
		w.WriteString("\r\n")
	}
}
