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
	u, err := url.Parse(strings.TrimRight(base, "/") + "/v1/evidence")
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", nil, fmt.Errorf("peer %q: not an http(s) URL", base)
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
