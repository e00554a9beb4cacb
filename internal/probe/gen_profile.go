package probe

//go:generate go tool bpf2go -cc clang -strip llvm-strip -cflags "-O2 -g -Wall -Werror" -target bpfel,bpfeb -type profile_key -type profile_traffic Profile ../../bpf/profile.bpf.c -- -I../../bpf/include
