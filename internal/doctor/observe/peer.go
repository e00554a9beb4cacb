package observe

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/skbtrace/skbtrace/internal/doctor"
)

// peerResponse is the agent's /v1/evidence body.
type peerResponse struct {
	Host     string           `json:"host"`
	Evidence *doctor.Evidence `json:"evidence"`
}

// maxPeerEvidence bounds what a peer may send.
const maxPeerEvidence = 64 << 20

// FetchPeer asks an agent (base URL, e.g. http://10.0.0.2:9464) for its
// evidence since a time. client may be nil.
func FetchPeer(ctx context.Context, client *http.Client, base, token string, since time.Time) (host string, ev *doctor.Evidence, err error) {
	if client == nil {
		client = &http.Client{Timeout: 30 * time.Second}
	}
	u, err := peerURL(base, "/v1/evidence")
	if err != nil {
		return "", nil, err
	}
	q := u.Query()
	q.Set("since", strconv.FormatFloat(float64(since.UnixNano())/1e9, 'f', 3, 64))
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return "", nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", nil, fmt.Errorf("asking peer %s: %w", base, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxPeerEvidence+1))
	if err != nil {
		return "", nil, fmt.Errorf("reading peer %s: %w", base, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		json.Unmarshal(body, &e)
		return "", nil, fmt.Errorf("peer %s answered %s: %s", base, resp.Status, e.Error)
	}
	if len(body) > maxPeerEvidence {
		return "", nil, fmt.Errorf("peer %s sent more than %d bytes of evidence", base, maxPeerEvidence)
	}
	var r peerResponse
	if err := json.Unmarshal(body, &r); err != nil || r.Evidence == nil {
		return "", nil, fmt.Errorf("peer %s: not skbtrace agent evidence: %v", base, err)
	}
	return r.Host, r.Evidence, nil
}

// CheckPeerURL says whether base is an agent's URL: http(s)://HOST[:PORT].
func CheckPeerURL(base string) error {
	_, err := peerURL(base, "")
	return err
}

func peerURL(base, path string) (*url.URL, error) {
	u, err := url.Parse(strings.TrimRight(base, "/") + path)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Hostname() == "" {
		return nil, fmt.Errorf("peer %q: not an http(s) URL (http://HOST:PORT, the agent's --listen)", base)
	}
	return u, nil
}

// peerCheckTimeout bounds the check before an observation: a peer that
// does not answer by then would not answer after it either.
const peerCheckTimeout = 3 * time.Second

// CheckPeer asks an agent for its metrics, quickly, before the observation
// starts: it must answer, accept the token and be skbtrace's agent, so
// that an unreachable or refusing peer ends the doctor before it observes
// rather than after. client may be nil.
func CheckPeer(ctx context.Context, client *http.Client, base, token string) error {
	if client == nil {
		client = &http.Client{Timeout: peerCheckTimeout}
	}
	u, err := peerURL(base, "/metrics")
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("peer %s cannot be reached: %w", base, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxPeerEvidence))
	if err != nil {
		return fmt.Errorf("reading peer %s: %w", base, err)
	}
	switch {
	case resp.StatusCode == http.StatusUnauthorized:
		return fmt.Errorf("peer %s refused the token (give the agent's with --peer-token-file or $SKBTRACE_PEER_TOKEN)", base)
	case resp.StatusCode != http.StatusOK:
		var e struct {
			Error string `json:"error"`
		}
		json.Unmarshal(body, &e)
		return fmt.Errorf("peer %s answered %s %s", base, resp.Status, e.Error)
	case !strings.Contains(string(body), "skbtrace_agent_"):
		return fmt.Errorf("peer %s answered, but is no skbtrace agent (its /metrics has no skbtrace_agent_ metric)", base)
	}
	return nil
}
