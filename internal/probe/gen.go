package probe

// The objects are committed so that building and testing the user-space
// parts needs no clang; `make check-generate` fails when they are stale.
//go:generate go tool bpf2go -cc clang -strip llvm-strip -cflags "-O2 -g -Wall -Werror" -target bpfel,bpfeb -type event_header -type tcp_conn_event -type tcp_sendlim_event -type sendlim_run -type sock_addrs -type event_type -type event_family -type sendlim_reason -type event_context Skbtrace ../../bpf/skbtrace.bpf.c -- -I../../bpf/include
