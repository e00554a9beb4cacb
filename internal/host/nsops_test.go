package host

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
)

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("this test needs root and CI=true forbids skipping it")
	}
	t.Skip("needs root (network namespaces)")
}

// A command started in a namespace sees that namespace's devices in /sys
// and /proc/net, as under `ip netns exec`, while this process keeps the
// host's.
func TestStartRunsInTheNamespaceWithItsOwnSysfs(t *testing.T) {
	requireRoot(t)
	ns, err := NewNetns(fmt.Sprintf("skbt-nsops-%d", os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Delete()
	const dev = "skbtnsveth0"
	err = ns.Do(func() error {
		return netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: dev, MTU: 1234}, PeerName: dev + "p"})
	})
	if err != nil {
		t.Fatalf("adding a veth pair in the namespace: %v", err)
	}

	mtu, err := ns.Run("cat", "/sys/class/net/"+dev+"/mtu")
	if err != nil || strings.TrimSpace(mtu) != "1234" {
		t.Fatalf("the namespace's sysfs: mtu %q, %v", mtu, err)
	}
	out, err := ns.Output(exec.Command("cat", "/proc/net/dev"))
	if err != nil || !strings.Contains(string(out), dev) {
		t.Fatalf("the namespace's /proc/net/dev lacks %s: %q, %v", dev, out, err)
	}
	if _, err := os.Stat("/sys/class/net/" + dev); err == nil {
		t.Errorf("%s shows in this process's /sys: the namespace's mount leaked out", dev)
	}
	if _, err := os.Stat("/sys/class/net/lo"); err != nil {
		t.Errorf("this process lost its /sys: %v", err)
	}

	// A failing command names itself, the namespace and what it printed.
	_, err = ns.Output(exec.Command("sh", "-c", "echo broken >&2; exit 3"))
	if err == nil || !strings.Contains(err.Error(), ns.Name) || !strings.Contains(err.Error(), "broken") {
		t.Errorf("a failed command's error: %v", err)
	}
	if _, err := ns.Run("skbtrace-no-such-program"); err == nil {
		t.Error("a missing program ran")
	}

	// A background command is waited for, and ended, from another goroutine.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sleep", "30")
	if err := ns.Start(cmd); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	cmd.Process.Kill()
	if err := <-done; err == nil {
		t.Error("a killed command exited cleanly")
	}
}
