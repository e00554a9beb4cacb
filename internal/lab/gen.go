package lab

// The XDP program of the gro-blocked scenario; the objects are committed like
// internal/probe's, and `make check-generate` checks both.
//go:generate go tool bpf2go -cc clang -strip llvm-strip -cflags "-O2 -g -Wall -Werror" -target bpfel,bpfeb OuterIPID ../../bpf/lab/outer_ipid.bpf.c -- -I../../bpf/include

// The receive-checksum counter of the nic-rx-csum-off scenario.
//go:generate go tool bpf2go -cc clang -strip llvm-strip -cflags "-O2 -g -Wall -Werror" -target bpfel,bpfeb -type rx_csum_key -type rx_csum_counts RxCsum ../../bpf/lab/rx_csum.bpf.c -- -I../../bpf/include

// The XDP program of the xdp-drop-veth variant and its noise-xdp-pass-veth control.
//go:generate go tool bpf2go -cc clang -strip llvm-strip -cflags "-O2 -g -Wall -Werror" -target bpfel,bpfeb XDPDrop ../../bpf/lab/xdp_drop.bpf.c -- -I../../bpf/include

// The tc BPF classifier of the tc-bpf-drop variant and its noise-tc-bpf-pass control.
//go:generate go tool bpf2go -cc clang -strip llvm-strip -cflags "-O2 -g -Wall -Werror" -target bpfel,bpfeb TCDrop ../../bpf/lab/tc_drop.bpf.c -- -I../../bpf/include
