package probe

//go:generate go tool bpf2go -cc clang -strip llvm-strip -cflags "-O2 -g -Wall -Werror" -target bpfel,bpfeb -type sock_limits_rec SockLimits ../../bpf/sock_limits.bpf.c -- -I../../bpf/include
