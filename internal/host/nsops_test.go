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

	"github.com/skbtrace/skbtrace/internal/testenv"
)

// A command started in a namespace sees that namespace's devices in /sys
// and /proc/net, as under `ip netns exec`, while this process keeps the
// host's.
func TestStartRunsInTheNamespaceWithItsOwnSysfs(t *testing.T) {
	testenv.RequireRoot(t, "network namespaces")
	ns, err := NewNetns(fmt.Sprintf("skbt-nsops-%d", os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := ns.Delete(); err != nil {
			t.Error(err)
		}
	}()
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
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err == nil {
		t.Error("a killed command exited cleanly")
	}
}

// Commands run in a namespace leave nothing that keeps it alive: once it is
// deleted, the kernel destroys it, and a veth pair with one end in it goes
// too (a NIC moved into it returns to the initial namespace the same way).
func TestDeletedNamespaceIsDestroyedAfterCommandsRanInIt(t *testing.T) {
	testenv.RequireRoot(t, "network namespaces")
	ns, err := NewNetns(fmt.Sprintf("skbt-nsgone-%d", os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	// Deleting the namespace is the test; this is for a test that ends before.
	deleted := false
	t.Cleanup(func() {
		if !deleted {
			if err := ns.Delete(); err != nil {
				t.Error(err)
			}
		}
	})
	const outside = "skbtnsgone0"
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: outside}, PeerName: "inside0", PeerNamespace: netlink.NsFd(ns.Handle())}
	if err := netlink.LinkAdd(veth); err != nil {
		t.Fatalf("adding a veth pair into the namespace: %v", err)
	}
	defer func() {
		if l, err := netlink.LinkByName(outside); err == nil {
			netlink.LinkDel(l)
		}
	}()
	if _, err := ns.Run("cat", "/sys/class/net/inside0/mtu"); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sleep", "30")
	if err := ns.Start(cmd); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait() // "signal: killed", as meant
	deleted = true
	if err := ns.Delete(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := netlink.LinkByName(outside); err != nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still exists 10 s after its peer's namespace was deleted: something holds the namespace", outside)
		}
	}
}
