// Package browser opens skbtrace's pages in headless Chromium, for the tests
// that check what a reader sees and for the screenshots in docs/: offline
// when asked (in a network namespace of its own), with the page's console
// messages captured.
package browser

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// ErrMissing says Chromium is not installed.
var ErrMissing = errors.New("chromium is not installed")

// Options say what to do with the page.
type Options struct {
	// Offline runs Chromium in a new network namespace with no devices up:
	// a page that needs the network fails to load what it asks for (root only).
	Offline bool
	// Screenshot, if set, is where a PNG of the window goes.
	Screenshot string
	// Width and Height of the window (default 1200x800).
	Width, Height int
}

// Result is the page as Chromium left it.
type Result struct {
	// DOM once the page's scripts ran (empty with a screenshot).
	DOM string
	// Console holds the page's console messages and uncaught errors.
	Console []string
	// Stderr is all Chromium said.
	Stderr string
}

// Open loads url (a file:// URL) and returns the DOM, or takes a screenshot.
func Open(ctx context.Context, url string, o Options) (*Result, error) {
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		return nil, ErrMissing
	}
	dir, err := os.MkdirTemp("", "skbtrace-browser-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if o.Width == 0 {
		o.Width, o.Height = 1200, 800
	}
	// As root Chromium refuses to start without --no-sandbox.
	// Without the background-networking flags Chromium reaches for Google's
	// hosts at every start.
	args := []string{"--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-quic",
		"--user-data-dir=" + filepath.Join(dir, "profile"), fmt.Sprintf("--window-size=%d,%d", o.Width, o.Height),
		"--enable-logging=stderr", "--v=0", "--virtual-time-budget=5000"}
	if o.Screenshot != "" {
		args = append(args, "--screenshot="+o.Screenshot)
	} else {
		args = append(args, "--dump-dom")
	}
	args = append(args, url)
	name := chromium
	if o.Offline {
		args = append([]string{"--net", chromium}, args...)
		name = "unshare"
	}
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// Chromium's helper processes share its process group; a timeout kills
	// them all, and Wait does not hang on pipes they still hold.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("running %s: %v\n%s", name, err, stderr.Bytes())
	}
	r := &Result{DOM: stdout.String(), Stderr: stderr.String()}
	for _, line := range strings.Split(r.Stderr, "\n") {
		// Chromium's own pages log to the console too ("Slow network is
		// detected", from chrome://resources, offline): they are not the page's.
		if strings.Contains(line, "source: chrome://") {
			continue
		}
		if strings.Contains(line, ":CONSOLE") || strings.Contains(line, "Uncaught") {
			r.Console = append(r.Console, line)
		}
	}
	return r, nil
}
