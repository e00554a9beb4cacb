package host

import "time"

// copyRateBuffer is about a socket buffer's worth: the pages a stream's
// copies touch mostly stay in the CPU's caches.
const copyRateBuffer = 4 << 20

// CopyRate is how fast this CPU copies memory, in bytes a second: the
// fastest of eight passes of four copies of copyRateBuffer (about 128 MiB
// in all, 10-30 ms). A stream over a virtual device moves each byte by
// such copies (into the socket, out of it) and the stack's work around
// them, so it scales with this where nothing else holds it; measured in
// the same place as the streams (a VM, an emulated CPU), it slows with
// them.
func CopyRate() float64 {
	src, dst := make([]byte, copyRateBuffer), make([]byte, copyRateBuffer)
	for i := range src {
		src[i] = byte(i)
	}
	var best float64
	for range 8 {
		start := time.Now()
		for range 4 {
			copy(dst, src)
		}
		if s := time.Since(start).Seconds(); s > 0 {
			best = max(best, 4*copyRateBuffer/s)
		}
	}
	return best
}
