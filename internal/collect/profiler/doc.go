// Package profiler samples the CPUs with the profiler's BPF program
// (perf events on cpu-clock or cycles) while a workload runs, counts the
// window's packets, and symbolizes the stacks (kernel from kallsyms, user
// from each process's ELF symbols) into a profile.Profile.
package profiler
