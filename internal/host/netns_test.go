package host

import "testing"

func TestDeviceExists(t *testing.T) {
	if !DeviceExists("lo") {
		t.Error("lo was not found")
	}
	if DeviceExists("skbtrace-none") {
		t.Error("a device that cannot exist was found")
	}
}
