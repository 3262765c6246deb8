// Command upstream is the test upstream of testdata/tasks/README.md for the
// e2e containers: run inside a container's substrate (docker exec), it serves
// a directory and a /token that is fresh for every process, so that a token
// fetched in an earlier trial never passes.
package main

import (
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
)

func main() {
	addr := flag.String("listen", "127.0.0.7:18080", "address to serve on")
	dir := flag.String("dir", ".", "directory whose files are served")
	flag.Parse()
	b := make([]byte, 12) // 24 hex digits, the token testdata/tasks/trial/agent-host checks for
	if _, err := rand.Read(b); err != nil {
		log.Fatal(err)
	}
	token := hex.EncodeToString(b)
	mux := http.NewServeMux()
	mux.HandleFunc("/token", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, token) })
	mux.Handle("/", http.FileServer(http.Dir(*dir)))
	fmt.Fprintln(os.Stderr, "upstream: serving", *dir, "on", *addr)
	log.Fatal(http.ListenAndServe(*addr, mux))
}
