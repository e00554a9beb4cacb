package agent

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"
)

// Limits of the heavy requests: each kind has its own slots, so readers of
// the trace, however slow, never keep evidence from being answered.
const (
	maxEvidenceRequests = 4
	maxTraceRequests    = 4
	// busyRetry is the Retry-After of a request refused for want of a slot.
	busyRetry = 5 * time.Second
	// stallTimeout is how long a client may take to accept each part of an
	// answer: one that stops reading is cut off and frees its slot.
	stallTimeout = 10 * time.Second
	// answerTimeout bounds a whole answer, as the server's WriteTimeout
	// does (which a per-write deadline replaces).
	answerTimeout = 2 * time.Minute
	writeChunk    = 256 << 10
)

func getOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			httpError(w, http.StatusMethodNotAllowed, "only GET is served")
			return
		}
		if hasBody(w, r) {
			httpError(w, http.StatusRequestEntityTooLarge, "requests carry no body")
			return
		}
		if len(r.URL.RawQuery) > 1024 {
			httpError(w, http.StatusRequestURITooLong, "query longer than 1024 bytes")
			return
		}
		// ServeMux would redirect a path with "..", "." or "//" to its clean
		// form; nothing is served under such a path, so it is not found here
		// rather than sent elsewhere.
		if p := r.URL.Path; p == "" || cleanPath(p) != p {
			httpError(w, http.StatusNotFound, "no such endpoint: /metrics, /v1/evidence and /v1/trace are served")
			return
		}
		h.ServeHTTP(w, r)
	})
}

// hasBody says whether a request carries a body: a declared length, or a
// chunked one that holds anything (read at most one byte of it, so a body
// of any length costs nothing).
func hasBody(w http.ResponseWriter, r *http.Request) bool {
	if r.ContentLength > 0 {
		return true
	}
	if r.ContentLength == 0 || r.Body == nil || r.Body == http.NoBody {
		return false
	}
	r.Body = http.MaxBytesReader(w, r.Body, 0)
	n, err := r.Body.Read(make([]byte, 1))
	return n > 0 || (err != nil && !errors.Is(err, io.EOF))
}

// cleanPath is ServeMux's: path.Clean keeping a trailing slash.
func cleanPath(p string) string {
	np := path.Clean("/" + p)
	if strings.HasSuffix(p, "/") && np != "/" {
		np += "/"
	}
	return np
}

// auth requires the bearer token; both sides are hashed so the comparison
// takes the same time whatever the token's length.
func (a *Agent) auth(h http.Handler) http.Handler {
	if a.opts.Token == "" {
		return h
	}
	want := sha256.Sum256([]byte(a.opts.Token))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		sum := sha256.Sum256([]byte(got))
		if !ok || subtle.ConstantTimeCompare(sum[:], want[:]) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="skbtrace"`)
			httpError(w, http.StatusUnauthorized, "missing or wrong bearer token")
			return
		}
		h.ServeHTTP(w, r)
	})
}

// limited answers 503 with a Retry-After beyond len(slots) concurrent
// requests.
func limited(slots chan struct{}, what string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case slots <- struct{}{}:
			defer func() { <-slots }()
			h.ServeHTTP(w, r)
		default:
			w.Header().Set("Retry-After", strconv.Itoa(int(busyRetry.Seconds())))
			httpError(w, http.StatusServiceUnavailable, "busy: "+strconv.Itoa(cap(slots))+" "+what+" requests are being answered; try again later")
		}
	})
}

func httpError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

// writeAnswer copies an answer to a client that must take each part of it
// within stall, and the whole within answerTimeout: a client that stops
// reading is cut off instead of holding its slot for the server's
// WriteTimeout.
func writeAnswer(w http.ResponseWriter, r io.Reader, stall time.Duration) error {
	rc := http.NewResponseController(w)
	end := time.Now().Add(answerTimeout)
	buf := make([]byte, writeChunk)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			deadline := time.Now().Add(stall)
			if deadline.After(end) {
				deadline = end
			}
			// Not every ResponseWriter has a connection (tests' recorders).
			if err := rc.SetWriteDeadline(deadline); err != nil && !errors.Is(err, http.ErrNotSupported) {
				return err
			}
			if _, err := w.Write(buf[:n]); err != nil {
				return err
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}
