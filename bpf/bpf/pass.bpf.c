// SPDX-License-Identifier: MIT OR Apache-2.0
//
// XDP_PASS for everything: what a veth's far end needs before the XDP_TX frames or
// AF_XDP transmissions of its near end can arrive (a NIC needs nothing of the kind).

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

SEC("xdp")
int pass_all(struct xdp_md *ctx)
{
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
