#!/usr/bin/env python3
"""Writes the committed seed corpus for the fuzz targets (run from common/fuzz/).

Seeds: the RFC 5769 sample messages, a Binding Request carrying a routing hint made with
the fuzz target's key, IPv4 and IPv6 frames and bundles of them, and a few flow-table
operation strings.
"""
import base64, hashlib, hmac, os, struct, zlib

def hexb(s): return bytes.fromhex("".join(s.split()))

RFC5769 = {
    "rfc5769_2_1_request": """00010058 2112a442 b7e7a701 bc34d686 fa87dfae 80220010 5354554e 20746573
        7420636c 69656e74 00240004 6e0001ff 80290008 932ff9b1 51263b36 00060009 6576746a
        3a683676 59202020 00080014 9aeaa70c bfd8cb56 781ef2b5 b2d3f249 c1b571a2 80280004 e57a3bcf""",
    "rfc5769_2_2_ipv4_response": """0101003c 2112a442 b7e7a701 bc34d686 fa87dfae 8022000b 74657374
        20766563 746f7220 00200008 0001a147 e112a643 00080014 2b91f599 fd9e90c3 8c7489f9
        2af9ba53 f06be7d7 80280004 c07d4c96""",
    "rfc5769_2_3_ipv6_response": """01010048 2112a442 b7e7a701 bc34d686 fa87dfae 8022000b 74657374
        20766563 746f7220 00200014 0002a147 0113a9fa a5d3f179 bc25f4b5 bed2b9d9 00080014
        a382954e 4be67bf1 1784c97c 8292c275 bfe3ed41 80280004 c8fb0b4c""",
}

def hmac256(key, data): return hmac.new(key, data, hashlib.sha256).digest()

def hint(secret, key_id, ip4, port, cluster=1, rnd=b"\x01\x02\x03\x04\x05\x06"):
    body = bytes([0x10, key_id]) + struct.pack(">H", cluster) + bytes(ip4) + struct.pack(">H", port) + rnd
    mac = hmac256(hmac256(secret, b"ufrag-relay/v1/hint-mac"), body)[:8]
    return base64.b64encode(body + mac)

def password(secret, ufrag):
    return base64.b64encode(hmac256(hmac256(secret, b"ufrag-relay/v1/ice-pwd"), ufrag)[:18])

def attr(kind, value):
    pad = (-len(value)) % 4
    return struct.pack(">HH", kind, len(value)) + value + b"\0" * pad

def binding_request(server, client, pwd):
    txid = b"fuzzseed0001"
    body = attr(0x0006, server + b":" + client) + attr(0x0024, b"\x6e\x00\x01\xff")
    head = lambda n: struct.pack(">HHI", 0x0001, n, 0x2112A442) + txid
    mi = hmac.new(pwd, head(len(body) + 24) + body, hashlib.sha1).digest()
    body += attr(0x0008, mi)
    crc = zlib.crc32(head(len(body) + 8) + body) ^ 0x5354554E
    body += attr(0x8028, struct.pack(">I", crc))
    return head(len(body)) + body

def write(target, name, data):
    os.makedirs(f"corpus/{target}", exist_ok=True)
    with open(f"corpus/{target}/{name}", "wb") as f: f.write(data)

secret = bytes([0x42] * 32)
ufrag = hint(secret, 1, [10, 0, 0, 2], 40000)
for name, text in RFC5769.items(): write("stun_view", name, hexb(text))
write("stun_view", "hint_binding_request", binding_request(ufrag, b"cli0", password(secret, ufrag)))
write("routing_hint", "v4_key1", ufrag)
write("routing_hint", "v4_key2", hint(bytes([0x24] * 32), 2, [192, 0, 2, 9], 3478, cluster=7))
frame_v4 = bytes([0xF1, 0, 0, 0, 0xC3, 0x50, 0x0D, 0x96, 198, 51, 100, 7, 203, 0, 113, 10, 0x17, 0xFE])
frame_v6 = bytes([0xF1, 3, 0, 0, 0, 1, 0, 2]) + bytes(range(32)) + b"\x80\x00"
write("frame_header", "v4", frame_v4)
write("frame_header", "v6", frame_v6)
def bundle(*frames): return bytes([0xF2, len(frames), 0, 0]) + b"".join(len(f).to_bytes(2, "big") + f for f in frames)
write("bundle", "one", bundle(frame_v4))
write("bundle", "v4_and_v6", bundle(frame_v4, frame_v6, frame_v4))
write("bundle", "bad_frame_inside", bundle(frame_v4, bytes([0xF7]) + frame_v4[1:]))
write("flow_table", "insert_lookup_expire", bytes([0, 1, 0, 2, 1, 1, 3, 200, 4, 0, 1, 2]))
write("flow_table", "fill_and_remove", bytes(b for i in range(12) for b in (0, i)) + bytes([2, 3, 1, 3]))

def rfc4571(message): return len(message).to_bytes(2, "big") + message
# rfc4571_split: limit/4, chunk count, chunk sizes, then the stream.
write("rfc4571_split", "three_messages", bytes([50, 3, 1, 7, 200]) + rfc4571(b"\x00\x01hello") + rfc4571(b"") + rfc4571(b"\x80" * 30) + b"\x00")
write("rfc4571_split", "too_large", bytes([2, 1, 0]) + rfc4571(b"a") + b"\x00\x20")
write("rfc4571_split", "byte_by_byte", bytes([255, 0, 0]) + rfc4571(bytes(range(100))) + rfc4571(bytes(range(50))))
write("rfc4571_split", "partial_tail", bytes([10, 2, 4, 9]) + rfc4571(b"abcd") + b"\x00\x05ab")
