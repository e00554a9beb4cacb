package probe

// The objects are committed so that building and testing the user-space
// parts needs no clang; `make check-generate` fails when they are stale.
// The ABI's types are generated into package wire from these objects.
//go:generate go tool bpf2go -cc clang -strip llvm-strip -cflags "-O2 -g -Wall -Werror" -target bpfel,bpfeb -no-global-types Skbtrace ../../bpf/skbtrace.bpf.c -- -I../../bpf/include
