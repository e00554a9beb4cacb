package e2e

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestLivePrintsEachEventAsItHappens: `live -e tcp_conn -d 25` and
// `record -o - | parse -i -` through a real pipe print a connection's
// tcp_conn line within 1.5 s of the connect, not when the 25 s end: parse
// held its output in a MiB buffer until the trace ended.
func TestLivePrintsEachEventAsItHappens(t *testing.T) {
	requireFamilies(t, "tcp_conn")
	for _, mode := range []string{"live", "record | parse"} {
		t.Run(strings.ReplaceAll(mode, " ", ""), func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					c.Close()
				}
			}()
			port := ln.Addr().(*net.TCPAddr).Port
			flags := []string{"-e", "tcp_conn", "-d", "25", "--filter-port", fmt.Sprint(port)}

			var tracer *exec.Cmd // the process that attaches and says so
			var procs []*exec.Cmd
			var out io.Reader
			var pipeEnd *os.File // the writing end of record's pipe, the tracer's alone once it runs
			if mode == "live" {
				tracer = exec.Command(binary, append([]string{"live"}, flags...)...)
				stdout, err := tracer.StdoutPipe()
				if err != nil {
					t.Fatal(err)
				}
				out, procs = stdout, []*exec.Cmd{tracer}
			} else {
				tracer = exec.Command(binary, append([]string{"record", "-o", "-"}, flags...)...)
				parse := exec.Command(binary, "parse", "-i", "-")
				pr, pw, err := os.Pipe()
				if err != nil {
					t.Fatal(err)
				}
				tracer.Stdout, parse.Stdin = pw, pr
				stdout, err := parse.StdoutPipe()
				if err != nil {
					t.Fatal(err)
				}
				parse.Stderr = io.Discard
				if err := parse.Start(); err != nil {
					t.Fatal(err)
				}
				pr.Close()
				pipeEnd = pw
				out, procs = stdout, []*exec.Cmd{tracer, parse}
			}
			stderr, err := tracer.StderrPipe()
			if err != nil {
				t.Fatal(err)
			}
			err = tracer.Start()
			if pipeEnd != nil {
				pipeEnd.Close()
			}
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				for _, p := range procs {
					if p.Process != nil && p.ProcessState == nil {
						p.Process.Kill()
						p.Wait()
					}
				}
			})
			errs := &syncBuffer{}
			ready := make(chan struct{})
			go collectLinesSignal(stderr, errs, "skbtrace: recording", ready)
			select {
			case <-ready:
			case <-time.After(3 * time.Minute):
				t.Fatalf("%s did not attach within 3 minutes: %s", mode, errs)
			}
			type line struct {
				text string
				at   time.Time
			}
			lines := make(chan line, 64)
			go func() {
				sc := bufio.NewScanner(out)
				for sc.Scan() {
					lines <- line{sc.Text(), time.Now()}
				}
				close(lines)
			}()

			time.Sleep(time.Second)
			connected := time.Now()
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			c.Close()
			var got []string
			deadline := time.After(10 * time.Second)
		wait:
			for {
				select {
				case l, ok := <-lines:
					if !ok {
						t.Fatalf("%s ended before printing the connection: %s", mode, errs)
					}
					got = append(got, l.text)
					if strings.Contains(l.text, "action=tcp_conn") && strings.Contains(l.text, fmt.Sprintf(":%d", port)) {
						d := l.at.Sub(connected)
						if d > 1500*time.Millisecond {
							t.Fatalf("%s printed the connection %v after it was made, want within 1.5 s: %s", mode, d.Round(time.Millisecond), l.text)
						}
						t.Logf("%s printed the connection %v after it was made", mode, d.Round(time.Millisecond))
						break wait
					}
				case <-deadline:
					t.Fatalf("%s printed no tcp_conn line of port %d within 10 s of the connect (of a 25 s recording); printed: %q; stderr: %s", mode, port, got, errs)
				}
			}
			tracer.Process.Signal(syscall.SIGINT)
			for _, p := range procs {
				if err := p.Wait(); err != nil {
					t.Errorf("%s: %v after SIGINT: %s", p.Args[1], err, errs)
				}
			}
		})
	}
}

// TestRecordAndLivePassTheCommandStatusThrough: record and live exit with
// the status of the command they wrap, as time(1) does, and say so; a
// command that cannot start is a clear error, not a recording.
func TestRecordAndLivePassTheCommandStatusThrough(t *testing.T) {
	requireFamilies(t, "tcp_conn")
	dir := t.TempDir()
	for _, cmd := range []string{"record", "live"} {
		for _, c := range []struct {
			name    string
			command []string
			code    int
			says    string
		}{
			{"exit 3", []string{"sh", "-c", "exit 3"}, 3, "sh exited with status 3"},
			{"killed", []string{"sh", "-c", "kill -TERM $$"}, 128 + 15, "sh was ended by signal 15 (exit status 143)"},
			{"missing", []string{"/nonexistent/h1-no-such-command"}, 1, "cannot run /nonexistent/h1-no-such-command: no such file or directory"},
			{"success", []string{"true"}, 0, ""},
		} {
			t.Run(cmd+"/"+c.name, func(t *testing.T) {
				args := []string{cmd, "-e", "tcp_conn", "-d", "60"}
				if cmd == "record" {
					args = append(args, "-o", dir+"/"+c.name+".trace")
				}
				run := exec.Command(binary, append(append(args, "--"), c.command...)...)
				var stderr strings.Builder
				run.Stderr, run.Stdout = &stderr, io.Discard
				err := run.Run()
				code := 0
				var exit *exec.ExitError
				if errors.As(err, &exit) {
					code = exit.ExitCode()
				} else if err != nil {
					t.Fatal(err)
				}
				if code != c.code {
					t.Errorf("%s -- %s exited %d, want %d: %s", cmd, strings.Join(c.command, " "), code, c.code, stderr.String())
				}
				if c.says != "" && !strings.Contains(stderr.String(), "skbtrace: "+c.says) {
					t.Errorf("%s -- %s does not say %q: %s", cmd, strings.Join(c.command, " "), c.says, stderr.String())
				}
				if n := strings.Count(stderr.String(), c.says); c.says != "" && n != 1 {
					t.Errorf("%s says %q %d times, want once: %s", cmd, c.says, n, stderr.String())
				}
			})
		}
	}
}
