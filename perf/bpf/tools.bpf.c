// SPDX-License-Identifier: MIT OR Apache-2.0
//
// The load tools' XDP programs, so that the tools are never the limit of what they
// measure:
//
//   perf_gen        the live-frames generator: stamps and transmits copies of one frame
//   perf_sink       counts one UDP port's frames, passes one in `sample_every` on
//   perf_xdp_relay  the in-kernel reference relay: rewrite and XDP_TX, nothing else
//   perf_probe      XDP_DROP, to ask whether the kernel allows live frames at all
//
// Each program is configured by read-only globals (`const volatile`) that user space
// sets at load time (perf/src/xdp/programs.rs); the loader freezes them before the
// program loads (BPF_MAP_FREEZE on a BPF_F_RDONLY_PROG map), so the verifier knows
// their values and prunes what they switch off.
//
// Byte order: ports and addresses in globals are as on the wire, so they compare with
// and store into a frame unchanged. Checksum arithmetic works on 16-bit words as the
// CPU loads them; a ones' complement sum is the same in either byte order once stored
// back the same way.

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define ETH_LEN 14
#define IPV4_LEN 20
#define IPV6_LEN 40
#define UDP_LEN 8
#define PAYLOAD_V4 (ETH_LEN + IPV4_LEN + UDP_LEN)
#define PAYLOAD_V6 (ETH_LEN + IPV6_LEN + UDP_LEN)
#define BUNDLE_MAGIC 0xF2 // a relay's bundle: the next byte counts its datagrams
#define TEMPLATE_MAX 128

static __always_inline __u16 load16(const void *at)
{
	return *(const __u16 *)at;
}

static __always_inline void store16(void *at, __u16 value)
{
	*(__u16 *)at = value;
}

// Folds a ones' complement sum `folds` times and complements it (RFC 1071).
static __always_inline __u16 checksum_fold(__u64 sum, int folds)
{
	for (int i = 0; i < folds; i++)
		sum = (sum & 0xffff) + (sum >> 16);
	return (__u16)~sum;
}

// ---------------------------------------------------------------------------------------
// perf_probe

SEC("xdp")
int perf_probe(struct xdp_md *ctx)
{
	return XDP_DROP;
}

// ---------------------------------------------------------------------------------------
// perf_sink

const volatile __be16 sink_port = 0; // the port counted
const volatile __u8 sink_by_source = 0; // 1: the source port (a VIP's); 0: the destination
const volatile __u32 sample_every = 1; // one datagram in this many goes on to the kernel

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64); // datagrams counted
	__uint(max_entries, 1);
} perf_sink_counts SEC(".maps");

// A UDP frame over IPv4 (no options) or IPv6 (no extension headers) to or from
// `sink_port` is counted: as the number of datagrams it carries when it is a relay's
// bundle, as one otherwise. When the count passes a multiple of `sample_every` the frame
// goes on to the kernel (for the latency socket, which reads every datagram of a
// bundle); otherwise it is dropped. Everything else passes untouched.
SEC("xdp")
int perf_sink(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 port_offset = sink_by_source ? 0 : 2;
	__u32 payload_at;
	__u16 port;

	if (data + PAYLOAD_V4 > data_end)
		return XDP_PASS; // shorter than any IPv4 UDP frame
	__u16 ethertype = load16(data + 12);
	if (ethertype == bpf_htons(ETH_P_IP)) {
		if (*(__u8 *)(data + ETH_LEN) != 0x45 || *(__u8 *)(data + ETH_LEN + 9) != IPPROTO_UDP)
			return XDP_PASS;
		port = load16(data + ETH_LEN + IPV4_LEN + port_offset);
		payload_at = PAYLOAD_V4;
	} else if (ethertype == bpf_htons(ETH_P_IPV6)) {
		if (data + PAYLOAD_V6 > data_end || *(__u8 *)(data + ETH_LEN + 6) != IPPROTO_UDP)
			return XDP_PASS;
		port = load16(data + ETH_LEN + IPV6_LEN + port_offset);
		payload_at = PAYLOAD_V6;
	} else {
		return XDP_PASS;
	}
	if (port != sink_port)
		return XDP_PASS;

	__u64 datagrams = 1;
	__u8 *payload = data + payload_at;
	if ((void *)(payload + 2) <= data_end && payload[0] == BUNDLE_MAGIC)
		datagrams = payload[1];
	__u32 zero = 0;
	__u64 *count = bpf_map_lookup_elem(&perf_sink_counts, &zero);
	if (!count)
		return XDP_PASS;
	__u64 before = *count, after = before + datagrams;
	*count = after;
	// One datagram in `sample_every`, a bundle of many included, so a run of bundles
	// never floods the latency socket.
	__u64 every = sample_every ? sample_every : 1;
	return before / every != after / every ? XDP_PASS : XDP_DROP;
}

// ---------------------------------------------------------------------------------------
// perf_xdp_relay

const volatile __be32 relay_vip_addr = 0;
const volatile __be16 relay_vip_port = 0;
// The new Ethernet addresses: the next hop's MAC (one L2 segment), then the relay's.
const volatile __u8 relay_macs[2 * ETH_ALEN] __attribute__((aligned(4))) = {};
const volatile __be32 relay_to_addr = 0;
const volatile __be16 relay_to_port = 0;

// The reference any relay is measured against: an IPv4 UDP datagram (no options) to the
// VIP gets new Ethernet addresses, the VIP as its source, `relay_to` as its
// destination, TTL 64, a recomputed IPv4 checksum and UDP checksum 0 (none, which IPv4
// allows), and leaves through the interface it came in on. No flow table and no hint
// check: the floor of what forwarding costs.
SEC("xdp")
int perf_xdp_relay(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;

	if (data + PAYLOAD_V4 > data_end)
		return XDP_PASS;
	if (load16(data + 12) != bpf_htons(ETH_P_IP) || *(__u8 *)(data + ETH_LEN) != 0x45 ||
	    *(__u8 *)(data + ETH_LEN + 9) != IPPROTO_UDP)
		return XDP_PASS;
	if (*(__u32 *)(data + ETH_LEN + 16) != relay_vip_addr ||
	    load16(data + ETH_LEN + IPV4_LEN + 2) != relay_vip_port)
		return XDP_PASS;

	for (int word = 0; word < 3; word++)
		*(__u32 *)(data + 4 * word) = *(const volatile __u32 *)&relay_macs[4 * word];
	*(__u8 *)(data + ETH_LEN + 8) = 64; // TTL
	store16(data + ETH_LEN + 10, 0); // the checksum, recomputed below
	*(__u32 *)(data + ETH_LEN + 12) = relay_vip_addr;
	*(__u32 *)(data + ETH_LEN + 16) = relay_to_addr;
	store16(data + ETH_LEN + IPV4_LEN + 2, relay_to_port);
	store16(data + ETH_LEN + IPV4_LEN + 6, 0); // no UDP checksum
	__u64 sum = 0;
	for (int word = 0; word < IPV4_LEN / 2; word++)
		sum += load16(data + ETH_LEN + 2 * word);
	store16(data + ETH_LEN + 10, checksum_fold(sum, 2));
	return XDP_TX;
}

// ---------------------------------------------------------------------------------------
// perf_gen

// The frame's first bytes: every header byte and the datagram's first two.
const volatile __u8 gen_template[TEMPLATE_MAX] = {};
const volatile __u32 gen_template_len = 0; // datagram_at + 2
// Where the stamps go (byte offsets in the frame).
const volatile __u32 gen_port_at = 0; // the flow's port
const volatile __u32 gen_octet_at = 0; // the last octet of the flow's address
const volatile __u32 gen_datagram_at = 0; // bytes 2-3: the count; 4-11: the time
const volatile __u32 gen_udp_checksum_at = 0; // 0: no UDP checksum to keep right
const volatile __u8 gen_in_ip_header = 0; // 1: the address is in the IPv4 header
// The flow plan: flow n % flows, dealt round the addresses: on address
// (n % flows) % addresses, port first_port + (n % flows) / addresses.
const volatile __u32 gen_flows = 1;
const volatile __u16 gen_first_port = 0; // host order
const volatile __u32 gen_addresses = 1;
const volatile __u8 gen_first_octet = 0;
const volatile __u16 gen_ip_checksum = 0; // the template's IPv4 checksum, host order
const volatile __u32 gen_udp_sum_base = 0; // the template's UDP sum without the stamps
const volatile __u64 gen_epoch_ns = 0; // bpf_ktime_get_ns at the run's epoch

// The pacing state, written by user space before a run and read after it.
struct gen_state {
	__u64 next_ns; // when the next frame is due
	__u64 interval_ns; // between frames
	__u64 sent; // frames sent so far
	__u64 total; // frames to send
	__u64 burst_ns; // how far behind the schedule may fall: the largest burst
	__u64 first_ns; // when the first frame was due (set by the first run)
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct gen_state);
	__uint(max_entries, 1);
} perf_gen_state SEC(".maps");

// Paced in the kernel: a frame that is not yet due, or beyond the total, is dropped back
// to the page pool; a due one advances the schedule (never letting it fall more than a
// burst behind, so a stall does not turn into a flood), is counted, gets the template's
// headers written in full (live-frame pages come back recycled, not reset: a frame that
// was NATed or routed on the way returns with that path's addresses in it), the flow's
// port and address, the count and the time since the epoch (ns, big endian), and
// leaves with XDP_TX. The IPv4 checksum grows by the address's increase (RFC 1624); a
// UDP checksum (IPv6) is the template's without the stamped words plus each frame's.
SEC("xdp")
int perf_gen(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 datagram_at = gen_datagram_at;

	if (datagram_at > TEMPLATE_MAX - 2 || data + datagram_at + 12 > data_end)
		return XDP_ABORTED;
	__u32 zero = 0;
	struct gen_state *state = bpf_map_lookup_elem(&perf_gen_state, &zero);
	if (!state)
		return XDP_ABORTED;
	__u64 now = bpf_ktime_get_ns();
	__u64 next = state->next_ns;
	if (next == 0) { // the first run starts the schedule
		next = now;
		state->first_ns = now;
	}
	if (now < next)
		return XDP_DROP; // not due yet
	__u64 sent = state->sent;
	if (sent >= state->total)
		return XDP_DROP; // all sent
	next += state->interval_ns;
	if (next < now - state->burst_ns)
		next = now - state->burst_ns;
	state->next_ns = next;
	state->sent = ++sent;

	// The headers, a word at a time (the last word runs into the datagram's stamps,
	// which are written below).
#pragma unroll
	for (int i = 0; i < TEMPLATE_MAX / 8; i++) {
		if (i * 8 >= gen_template_len)
			break;
		*(__u64 *)(data + i * 8) = *(const volatile __u64 *)&gen_template[i * 8];
	}

	__u32 flow = sent % gen_flows;
	__u32 port = flow / gen_addresses + gen_first_port;
	__u64 udp_sum = gen_udp_sum_base + port;
	__u32 port_at = gen_port_at;
	if (port_at > datagram_at)
		return XDP_ABORTED;
	store16(data + port_at, bpf_htons((__u16)port));
	if (gen_addresses > 1) {
		__u32 index = flow % gen_addresses; // the address's increase
		__u32 octet_at = gen_octet_at;
		if (octet_at > datagram_at)
			return XDP_ABORTED;
		*(__u8 *)(data + octet_at) = gen_first_octet + index;
		udp_sum += index; // the octet is the low byte of its word
		if (gen_in_ip_header) {
			// Below 0x1_0000 + 0xff once folded, so once is enough.
			__u64 sum = index + (__u16)~gen_ip_checksum;
			store16(data + ETH_LEN + 10, bpf_htons(checksum_fold(sum, 1)));
		}
	}
	store16(data + datagram_at + 2, bpf_htons((__u16)sent));
	udp_sum += sent & 0xffff;
	__u64 since = now - gen_epoch_ns;
	__u32 udp_checksum_at = gen_udp_checksum_at;
	if (udp_checksum_at) {
		if (udp_checksum_at > datagram_at)
			return XDP_ABORTED;
		for (int shift = 48; shift >= 0; shift -= 16)
			udp_sum += (since >> shift) & 0xffff;
		__u16 checksum = checksum_fold(udp_sum, 3);
		// 0 would mean "no checksum": a computed 0 is sent as all ones.
		store16(data + udp_checksum_at, bpf_htons(checksum ? checksum : 0xffff));
	}
	*(__u64 *)(data + datagram_at + 4) = bpf_cpu_to_be64(since);
	return XDP_TX;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
