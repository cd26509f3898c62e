// SPDX-License-Identifier: MIT OR Apache-2.0
//
// relay-afxdp's XDP programs: steering to AF_XDP sockets, and the optional in-kernel
// fast path for established flows.
//
// relay_steer sends to the AF_XDP socket of the receiving queue only the IPv4 and IPv6
// UDP datagrams whose destination address and port are one of the relay's (a VIP or an
// internal address, in relay_dests). Everything else (ARP, ICMP, TCP, UDP to other
// addresses or ports, IPv4 fragments, IPv6 with extension headers, truncated frames) is
// passed to the kernel untouched. A queue without a socket falls back to XDP_PASS.
//
// relay_steer_fast does the same, but first gives a matched datagram to the fast path,
// which sends an established flow's datagrams itself (XDP_TX) and hands everything else
// to the redirect untouched. User space decides every flow; the fast path only carries
// what user space wrote into fast_flows. The decision table, the entry layout and the
// checksum arithmetic are described in src/fast_path.rs, which builds the entries.
//
// Byte order: addresses and ports stay as on the wire. Checksum arithmetic works on
// 16-bit words as the CPU loads them, as user space's partial sums do; a ones'
// complement sum is the same in either byte order once stored back the same way.

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define ETH_LEN 14
#define IPV4_LEN 20
#define IPV6_LEN 40
#define UDP_LEN 8
#define FRAME_V4_LEN 16 // a frame header naming two IPv4 addresses
#define FRAME_V6_LEN 40 // a frame header naming two IPv6 addresses
#define FRAME_MAGIC 0xF1
#define FRAME_VERIFIED_PATH 0x08
#define HEADERS_MAX (ETH_LEN + IPV6_LEN + UDP_LEN + FRAME_V6_LEN)

#define KIND_VIP 1
#define KIND_INTERNAL 2

// ---------------------------------------------------------------------------------------
// Steering maps

// A destination the relay owns: its address (IPv4 as IPv4-mapped IPv6) and port, as on
// the wire.
struct dest_key {
	__u8 addr[16];
	__be16 port;
	__u16 zero;
} __attribute__((aligned(4))); // 20 bytes: the variable on the stack is 8-aligned

enum steer_stat {
	STEER_PASSED = 0,
	STEER_STEERED = 1,
	STEER_STATS = 2, // how many
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct dest_key);
	__type(value, __u8); // KIND_VIP or KIND_INTERNAL
	__uint(max_entries, 1); // set by the loader: one per destination
} relay_dests SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__type(key, __u32); // the receiving queue
	__type(value, __u32); // its AF_XDP socket
	__uint(max_entries, 1); // set by the loader: one per queue
} relay_xsks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32); // enum steer_stat
	__type(value, __u64);
	__uint(max_entries, STEER_STATS);
} relay_stats SEC(".maps");

// ---------------------------------------------------------------------------------------
// Fast-path maps

// One direction of a flow as it arrives: its addresses (IPv4 mapped) and ports as on the
// wire, and for a return (direction 1) the frame header the transceiver put in front.
struct flow_key {
	__u8 src[16];
	__u8 dst[16];
	__be16 src_port;
	__be16 dst_port;
	__u8 direction; // 0: client to VIP; 1: transceiver to internal address
	__u8 zero[3];
	__u8 frame[FRAME_V6_LEN]; // zero-padded; all zero for a forward key
} __attribute__((aligned(8)));

// How to send one direction, written by user space; the counters are the program's.
struct flow_entry {
	__u64 packets;
	__u64 bytes;
	__u64 last_seen_ns; // bpf_ktime_get_ns
	__u16 in_len; // headers the datagram arrives with (a return's frame header included)
	__u16 out_len; // headers it leaves with: 42, 58, 82 (IPv4) or 62, 78, 102 (IPv6)
	__u8 out_v6;
	__u8 zero;
	__u16 ip_sum; // IPv4: the header's sum without its total length, not complemented
	__u32 udp_sum_delta; // IPv6: what the UDP checksum gains besides the lengths
	__u32 zero2;
	__u8 next_hop[16]; // key of fast_next_hops
	__u8 headers[HEADERS_MAX]; // lengths, checksums and destination MAC left zero
	__u8 zero3[2];
};

struct mac {
	__u8 addr[ETH_ALEN];
	__u8 zero[2];
} __attribute__((aligned(8)));

enum fast_stat {
	FAST_FORWARD_PACKETS = 0,
	FAST_FORWARD_BYTES = 1,
	FAST_RETURN_PACKETS = 2,
	FAST_RETURN_BYTES = 3,
	FAST_STUN = 4,
	FAST_MISS = 5,
	FAST_UNFIT = 6,
	FAST_NO_MAC = 7,
	FAST_STATS = 8, // how many
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH); // per CPU: the counters need no atomics
	__type(key, struct flow_key);
	__type(value, struct flow_entry);
	__uint(max_entries, 2); // set by the loader: two per flow
} fast_flows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u8[16]); // a next hop's address, IPv4 mapped
	__type(value, struct mac);
	__uint(max_entries, 4096);
} fast_next_hops SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32); // enum fast_stat
	__type(value, __u64);
	__uint(max_entries, FAST_STATS);
} fast_stats SEC(".maps");

// ---------------------------------------------------------------------------------------
// Helpers

static __always_inline void steer_count(__u32 stat)
{
	__u64 *counter = bpf_map_lookup_elem(&relay_stats, &stat);
	if (counter)
		__sync_fetch_and_add(counter, 1);
}

static __always_inline void fast_count(__u32 stat, __u64 by)
{
	__u64 *counter = bpf_map_lookup_elem(&fast_stats, &stat);
	if (counter)
		*counter += by;
}

static __always_inline __u16 load16(const void *at)
{
	return *(const __u16 *)at;
}

static __always_inline void store16(void *at, __u16 value)
{
	*(__u16 *)at = value;
}

// Copies `len` bytes (a constant, even) in the widest words that fit, 8 bytes at a time
// then the tail: what __builtin_memcpy does byte by byte when it cannot prove the
// packet's alignment. XDP allows unaligned packet access where the CPU does (x86,
// arm64); the verifier always wants stack accesses aligned, so the keys this writes
// into are 8-aligned on the stack, and map values are 8-aligned by the kernel.
static __always_inline void copy_words(void *dst, const void *src, const int len)
{
	int off = 0;
#pragma unroll
	for (; off + 8 <= len; off += 8)
		*(__u64 *)(dst + off) = *(const __u64 *)(src + off);
	if (off + 4 <= len) {
		*(__u32 *)(dst + off) = *(const __u32 *)(src + off);
		off += 4;
	}
	if (off + 2 <= len)
		*(__u16 *)(dst + off) = *(const __u16 *)(src + off);
}

// Keys are built on the stack and then hashed by the map a 32-bit word at a time. A word
// put together from narrower stores (a zeroed word, then two bytes over it) cannot be
// forwarded from the store buffer to the hash's load and stalls it, which costs more
// than the rest of the key; so every word of a key is written by one store of its own.

// The 32-bit word of IPv4-mapped IPv6 addresses' bytes 8..12: 00 00 ff ff.
#define IPV4_MAPPED_WORD bpf_htonl(0x0000ffff)

// The 32-bit word whose bytes are the two bytes of `first`, as a 16-bit load from a
// frame left them in the register, and then two zeros.
static __always_inline __u32 word_then_zeros(__u16 first)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	return first;
#else
	return (__u32)first << 16;
#endif
}

static __always_inline void store32(void *at, __u32 value)
{
	*(__u32 *)at = value;
}

// Folds a ones' complement sum to 16 bits (`folds` times: enough for what it holds) and
// complements it (RFC 1071).
static __always_inline __u16 checksum_fold(__u64 sum, int folds)
{
	for (int i = 0; i < folds; i++)
		sum = (sum & 0xffff) + (sum >> 16);
	return (__u16)~sum;
}

// ---------------------------------------------------------------------------------------
// The fast path

enum fast_verdict {
	FAST_SENT, // the frame was rewritten: XDP_TX
	FAST_DECLINED, // untouched: to AF_XDP
	FAST_BROKEN, // the head moved and the frame cannot be sent: XDP_ABORTED
};

// Copies an entry's `len` header bytes to the frame's start; a frame shorter than the
// headers is lost (the head has moved): FAST_BROKEN.
#define COPY_HEADERS(len)                                                                \
	case len:                                                                        \
		if (data + len > data_end)                                               \
			return FAST_BROKEN;                                              \
		copy_words(data, entry->headers, len);                                   \
		break;

static __always_inline enum fast_verdict fast_path(struct xdp_md *ctx, __u8 kind)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct flow_key key = {};
	__u32 payload_at;

	// IP and UDP: both lengths must fill the frame exactly (no Ethernet padding, nothing
	// truncated), IPv4 without options. The steering block has checked the protocol and
	// that an IPv4 datagram is no fragment.
	if (data + ETH_LEN + IPV4_LEN + UDP_LEN > data_end)
		return FAST_DECLINED;
	__u64 frame_len = data_end - data;
	if (load16(data + 12) == bpf_htons(ETH_P_IPV6)) {
		if (data + ETH_LEN + IPV6_LEN + UDP_LEN > data_end)
			return FAST_DECLINED;
		__u16 payload_len = bpf_ntohs(load16(data + ETH_LEN + 4));
		if (payload_len != frame_len - ETH_LEN - IPV6_LEN ||
		    bpf_ntohs(load16(data + ETH_LEN + IPV6_LEN + 4)) != payload_len)
			goto unfit;
		copy_words(key.src, data + ETH_LEN + 8, 32); // source, then destination
		copy_words(&key.src_port, data + ETH_LEN + IPV6_LEN, 4); // both ports
		payload_at = ETH_LEN + IPV6_LEN + UDP_LEN;
	} else {
		if (*(__u8 *)(data + ETH_LEN) != 0x45) // IP options
			goto unfit;
		__u16 total_len = bpf_ntohs(load16(data + ETH_LEN + 2));
		if (total_len != frame_len - ETH_LEN ||
		    bpf_ntohs(load16(data + ETH_LEN + IPV4_LEN + 4)) + IPV4_LEN != total_len)
			goto unfit;
		store32(&key.src[8], IPV4_MAPPED_WORD);
		store32(&key.dst[8], IPV4_MAPPED_WORD);
		copy_words(&key.src[12], data + ETH_LEN + 12, 4);
		copy_words(&key.dst[12], data + ETH_LEN + 16, 4);
		copy_words(&key.src_port, data + ETH_LEN + IPV4_LEN, 4); // both ports
		payload_at = ETH_LEN + IPV4_LEN + UDP_LEN;
	}

	// What the payload is (RFC 7983), from its first byte.
	__u8 *payload = data + payload_at;
	if ((void *)(payload + 1) > data_end)
		goto unfit; // an empty datagram
	__u8 first = payload[0];
	if (first < 4)
		goto stun; // consent checks and ICE restarts: user space
	__u32 in_len = payload_at;
	if (kind == KIND_VIP) {
		// From a client, only what user space forwards: DTLS (20..63) and RTP/RTCP
		// (128..191); user space drops the rest, and counts it.
		if (!((first >= 20 && first < 64) || (first >= 128 && first < 192)))
			goto unfit;
	} else {
		// From a transceiver: a version-1 frame header naming two IPv4 or two IPv6
		// addresses, which is part of the key (user space installs return keys with the
		// verified-path bit set, so a frame without it misses).
		if (first != FRAME_MAGIC)
			goto unfit;
		if ((void *)(payload + FRAME_V4_LEN + 1) > data_end)
			goto unfit;
		__u8 families = payload[1] & ~FRAME_VERIFIED_PATH;
		if (families == 0) {
			copy_words(key.frame, payload, FRAME_V4_LEN);
			in_len += FRAME_V4_LEN;
		} else if (families == 3) {
			if ((void *)(payload + FRAME_V6_LEN + 1) > data_end)
				goto unfit;
			copy_words(key.frame, payload, FRAME_V6_LEN);
			in_len += FRAME_V6_LEN;
		} else {
			goto unfit; // mixed families: user space
		}
		store32(&key.direction, bpf_htonl(0x01000000)); // bytes 01 00 00 00
	}

	struct flow_entry *entry = bpf_map_lookup_elem(&fast_flows, &key);
	if (!entry)
		goto miss;
	if (entry->in_len != in_len)
		goto unfit;
	// The next hop's MAC, looked up by address: a neighbour that changes its MAC (a host
	// replaced, a router failover) changes one entry, not every flow's.
	struct mac *next_hop = bpf_map_lookup_elem(&fast_next_hops, entry->next_hop);
	if (!next_hop)
		goto no_mac;
	__u64 dest_mac = *(__u64 *)next_hop;
	// The incoming UDP length and checksum, kept for the IPv6 checksum update.
	if (data + payload_at > data_end)
		goto unfit;
	__u16 udp_len_in = load16(data + payload_at - 4);
	__u16 udp_sum_in = load16(data + payload_at - 2);
	if (entry->out_v6 && udp_sum_in == 0)
		goto unfit; // IPv4 without a checksum, IPv6 out: nothing to update

	// Move the frame's start so the entry's headers end where the kept datagram begins.
	__u16 out_len = entry->out_len;
	if (bpf_xdp_adjust_head(ctx, (int)in_len - (int)out_len))
		goto unfit; // nothing moved
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	switch (out_len) {
		COPY_HEADERS(42)
		COPY_HEADERS(58)
		COPY_HEADERS(82)
		COPY_HEADERS(62)
		COPY_HEADERS(78)
		COPY_HEADERS(102)
	default:
		// User space writes no other length; the head has moved, so this frame is lost.
		return FAST_BROKEN;
	}
	copy_words(data, &dest_mac, ETH_ALEN);

	frame_len = data_end - data;
	if (entry->out_v6) {
		// Payload and UDP length; the checksum is the incoming one plus the entry's
		// delta, plus the new length twice (pseudo-header and header), minus the old
		// one twice (RFC 1624: subtracting is adding the complement).
		if (data + ETH_LEN + IPV6_LEN + UDP_LEN > data_end)
			return FAST_BROKEN;
		__u16 len = bpf_htons((__u16)(frame_len - ETH_LEN - IPV6_LEN));
		store16(data + ETH_LEN + 4, len);
		store16(data + ETH_LEN + IPV6_LEN + 4, len);
		__u64 sum = (__u64)(__u16)~udp_sum_in + entry->udp_sum_delta + len + len +
			    2 * (__u64)(__u16)~udp_len_in;
		__u16 udp_sum = checksum_fold(sum, 3);
		// A computed 0 is sent as all ones (RFC 8200 section 8.1).
		store16(data + ETH_LEN + IPV6_LEN + 6, udp_sum ? udp_sum : 0xffff);
	} else {
		// Total length, the header checksum from the entry's partial sum, UDP length,
		// and no UDP checksum (IPv4 allows it).
		if (data + ETH_LEN + IPV4_LEN + UDP_LEN > data_end)
			return FAST_BROKEN;
		__u16 total_len = bpf_htons((__u16)(frame_len - ETH_LEN));
		store16(data + ETH_LEN + 2, total_len);
		store16(data + ETH_LEN + 10, checksum_fold((__u64)entry->ip_sum + total_len, 2));
		store16(data + ETH_LEN + IPV4_LEN + 4,
			bpf_htons((__u16)(frame_len - ETH_LEN - IPV4_LEN)));
		store16(data + ETH_LEN + IPV4_LEN + 6, 0);
	}

	// Count on the flow (this CPU's copy: no atomics) and in fast_stats.
	entry->packets += 1;
	entry->bytes += frame_len;
	entry->last_seen_ns = bpf_ktime_get_ns();
	if (key.direction) {
		fast_count(FAST_RETURN_PACKETS, 1);
		fast_count(FAST_RETURN_BYTES, frame_len);
	} else {
		fast_count(FAST_FORWARD_PACKETS, 1);
		fast_count(FAST_FORWARD_BYTES, frame_len);
	}
	return FAST_SENT;

stun:
	fast_count(FAST_STUN, 1);
	return FAST_DECLINED;
miss:
	fast_count(FAST_MISS, 1);
	return FAST_DECLINED;
unfit:
	fast_count(FAST_UNFIT, 1);
	return FAST_DECLINED;
no_mac:
	fast_count(FAST_NO_MAC, 1);
	return FAST_DECLINED;
}

// ---------------------------------------------------------------------------------------
// Steering

// The relay's destination kind for this frame (KIND_VIP or KIND_INTERNAL), or 0 when the
// frame is not an unfragmented UDP datagram to one of the relay's addresses.
static __always_inline __u8 destination_kind(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	// 8-aligned (the type is 20 bytes, 4-aligned): copy_words stores 8-byte words into it.
	struct dest_key key __attribute__((aligned(8))) = {};

	if (data + ETH_LEN > data_end)
		return 0;
	__u16 ethertype = load16(data + 12);
	if (ethertype == bpf_htons(ETH_P_IP)) {
		if (data + ETH_LEN + IPV4_LEN > data_end)
			return 0;
		if (*(__u8 *)(data + ETH_LEN + 9) != IPPROTO_UDP)
			return 0;
		if (load16(data + ETH_LEN + 6) & bpf_htons(0x3fff))
			return 0; // MF or an offset: a fragment, the kernel's to reassemble
		__u32 ihl = (*(__u8 *)(data + ETH_LEN) & 0x0f) * 4;
		if (ihl < IPV4_LEN)
			return 0;
		void *udp = data + ETH_LEN + ihl;
		if (udp + UDP_LEN > data_end)
			return 0;
		store32(&key.addr[8], IPV4_MAPPED_WORD);
		copy_words(&key.addr[12], data + ETH_LEN + 16, 4);
		store32(&key.port, word_then_zeros(load16(udp + 2)));
	} else if (ethertype == bpf_htons(ETH_P_IPV6)) {
		if (data + ETH_LEN + IPV6_LEN + UDP_LEN > data_end)
			return 0;
		if (*(__u8 *)(data + ETH_LEN + 6) != IPPROTO_UDP)
			return 0; // extension headers included: the kernel's
		copy_words(key.addr, data + ETH_LEN + 24, 16);
		store32(&key.port, word_then_zeros(load16(data + ETH_LEN + IPV6_LEN + 2)));
	} else {
		return 0;
	}
	__u8 *kind = bpf_map_lookup_elem(&relay_dests, &key);
	return kind ? *kind : 0;
}

static __always_inline int steer(struct xdp_md *ctx, int with_fast_path)
{
	__u8 kind = destination_kind(ctx);
	if (!kind) {
		steer_count(STEER_PASSED);
		return XDP_PASS;
	}
	if (with_fast_path) {
		switch (fast_path(ctx, kind)) {
		case FAST_SENT:
			return XDP_TX;
		case FAST_BROKEN:
			return XDP_ABORTED;
		case FAST_DECLINED:
			break;
		}
	}
	steer_count(STEER_STEERED);
	return bpf_redirect_map(&relay_xsks, ctx->rx_queue_index, XDP_PASS);
}

SEC("xdp")
int relay_steer(struct xdp_md *ctx)
{
	return steer(ctx, 0);
}

SEC("xdp")
int relay_steer_fast(struct xdp_md *ctx)
{
	return steer(ctx, 1);
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
