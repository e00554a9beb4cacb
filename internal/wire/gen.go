package wire

// wire.go is generated from the loader's object (probe generates it first:
// make generate), so that it needs no clang; `make check-generate` fails when
// it is stale.
//go:generate go run ./genwire -o wire.go ../probe/skbtrace_bpfel.o event_header tcp_conn_event tcp_sendlim_event sendlim_run sock_addrs event_type event_family sendlim_reason event_context context_filter tcp_cong_event tcp_retrans_event tcp_retrans_run tcp_rtt_event tcp_reset_event tcp_rcvbuf_event rcvbuf_state dev_stats dev_slot napi_slot dev_event napi_stats napi_event softirq_stats softirq_event qdisc_key qdisc_stats qdisc_event sock_io_key sock_io_stats sock_io_event qdisc_delay_event tcp_stage_event tcp_stage stage_hist drop_key drop_stats skb_drop_event sk_limit_key sk_limit_stats sk_limit_event seq_reservation sk_limit_kind sock_io_dir reset_dir reset_path histogram_buckets
