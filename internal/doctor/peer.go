package doctor

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
)

// Peer is a remote end whose agent's evidence joined this report.
type Peer struct {
	URL    string   `json:"url"`
	Host   string   `json:"host,omitempty"`
	Kernel string   `json:"kernel,omitempty"`
	CPUs   []CPUUse `json:"cpus,omitempty"`
	// Flows counts the local flows whose other end the peer saw.
	Flows int `json:"flows"`
}

// peerResponse is the agent's /v1/evidence body.
type peerResponse struct {
	Host     string    `json:"host"`
	Evidence *Evidence `json:"evidence"`
}

// maxPeerEvidence bounds what a peer may send.
const maxPeerEvidence = 64 << 20

// FetchPeer asks an agent (base URL, e.g. http://10.0.0.2:9464) for its
// evidence since a time. client may be nil.
func FetchPeer(ctx context.Context, client *http.Client, base, token string, since time.Time) (host string, ev *Evidence, err error) {
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

// JoinPeer adds the remote ends of this evidence's flows from a peer's:
// those flows, the namespaces that hold them (named "label/name" so they
// cannot be mistaken for local ones) with their devices and settings, and
// the peer's drops. The rules then judge receiver-side causes (window,
// buffer, GRO, drops) from the receiver's own data. CPUs stay the peer's
// (Peers), since a remote CPU cannot saturate a local one.
func (e *Evidence) JoinPeer(url, label string, host string, p *Evidence) *Peer {
	peer := &Peer{URL: url, Host: host, Kernel: p.Kernel, CPUs: p.CPUs}
	rename := func(ns string) string { return label + "/" + ns }
	held := map[string]bool{}
	local := len(e.Flows)
	for i := range p.Flows {
		f := p.Flows[i]
		for j := range local {
			l := &e.Flows[j]
			if unmapped(f.Local) == unmapped(l.Peer) && unmapped(f.Peer) == unmapped(l.Local) {
				held[f.Netns] = true
				f.Netns = rename(f.Netns)
				e.Flows = append(e.Flows, f)
				peer.Flows++
				break
			}
		}
	}
	for _, ns := range p.Namespaces {
		if !held[ns.Name] {
			continue
		}
		ns.Name = rename(ns.Name)
		ids := map[string]int{}
		for name, id := range ns.NetnsIDs {
			ids[rename(name)] = id
		}
		ns.NetnsIDs = ids
		e.Namespaces = append(e.Namespaces, ns)
	}
	if peer.Flows > 0 {
		e.Drops = append(e.Drops, p.Drops...)
		e.LostEvents += p.LostEvents
	}
	e.Peers = append(e.Peers, *peer)
	return peer
}
