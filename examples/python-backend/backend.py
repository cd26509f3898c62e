#!/usr/bin/env python3
"""A model backend in Python: the shape of your own, in about 200 lines.

It serves the transceiver's model protocol (docs/model-protocol.md) over a WebSocket,
chooses PCM16 audio in its hello, and for each session:

- speaks: on `session.started` it sends `--speak` seconds of a tone at once (as a
  text-to-speech engine does, faster than real time; the transceiver plays it out at
  real time), then an `audio.mark` named `said`;
- listens: it reads the user's audio as PCM and keeps its level;
- is interrupted: with `--clear-after S` it sends `audio.clear` S seconds after it spoke
  (barge-in), and with `--barge-in-level L` when the user's audio is louder than L
  (0 to 1) while it speaks; either way the transceiver drops the speech not yet played
  and answers `audio.cleared`;
- answers each `ping` on the `events` channel with a `pong`, and prints every
  `session.stats`.

Everything it does is printed as one JSON object per line on stdout.

    python3 backend.py --listen 127.0.0.1:9000 --audio pcm16/24000 --speak 3
    transceiver … --model ws://127.0.0.1:9000/
"""

import argparse
import array
import asyncio
import hmac
import json
import math
import struct
import sys
from http import HTTPStatus

from websockets.asyncio.server import serve
from websockets.exceptions import ConnectionClosed

PROTOCOL = "ufrag-model.v1"
# kind (0x01), session id, RTP sequence number, RTP timestamp: big endian, 15 bytes.
AUDIO_HEADER = struct.Struct(">BQHI")
AUDIO_KIND = 0x01
RATES = {"pcm16/16000": 16000, "pcm16/24000": 24000, "pcm16/48000": 48000}
# How much speech goes in one message: any length will do; the transceiver cuts 20 ms
# frames itself. 100 ms is not a whole number of anything the client sends.
CHUNK_SECONDS = 0.1


def say(line):
    print(json.dumps(line), flush=True)


def tone(rate, seconds, hz, level=0.3):
    """`seconds` of a sine at `hz`, as little-endian 16-bit samples."""
    samples = array.array(
        "h",
        (int(level * 32767 * math.sin(2 * math.pi * hz * i / rate)) for i in range(int(rate * seconds))),
    )
    if sys.byteorder == "big":
        samples.byteswap()
    return samples.tobytes()


def level_of(pcm_le):
    """The RMS level of little-endian 16-bit samples, 0 to 1."""
    samples = array.array("h")
    samples.frombytes(pcm_le[: len(pcm_le) // 2 * 2])
    if sys.byteorder == "big":
        samples.byteswap()
    if not samples:
        return 0.0
    return math.sqrt(sum(s * s for s in samples) / len(samples)) / 32768


class Session:
    def __init__(self, sid, rate):
        self.sid = sid
        self.frame_bytes = 2 * rate // 50
        self.speaking = False
        self.said_frames = 0
        self.heard_frames = 0
        self.heard_peak = 0.0
        self.heard_sizes = set()
        self.cleared_frames = None


class Connection:
    def __init__(self, ws, args):
        self.ws = ws
        self.args = args
        self.rate = RATES[args.audio]
        self.sessions = {}

    async def send_json(self, message):
        await self.ws.send(json.dumps(message))

    async def speak(self, session):
        speech = tone(self.rate, self.args.speak, self.args.tone)
        chunk = int(self.rate * CHUNK_SECONDS) * 2
        header = AUDIO_HEADER.pack(AUDIO_KIND, int(session.sid, 16), 0, 0)
        session.speaking = True
        for at in range(0, len(speech), chunk):
            await self.ws.send(header + speech[at : at + chunk])
        session.said_frames = -(-len(speech) // session.frame_bytes)
        await self.send_json({"type": "audio.mark", "session": session.sid, "name": "said"})
        say({"event": "said", "session": session.sid, "frames": session.said_frames})
        if self.args.clear_after is not None:
            await asyncio.sleep(self.args.clear_after)
            await self.clear(session, "clear-after")

    async def clear(self, session, why):
        if session.speaking:
            session.speaking = False
            await self.send_json({"type": "audio.clear", "session": session.sid})
            say({"event": "clear", "session": session.sid, "why": why})

    async def on_audio(self, message):
        if len(message) < AUDIO_HEADER.size:
            return
        _, sid, _, _ = AUDIO_HEADER.unpack_from(message)
        session = self.sessions.get(f"{sid:016x}")
        if session is None:
            return
        level = level_of(message[AUDIO_HEADER.size :])
        session.heard_frames += 1
        session.heard_sizes.add((len(message) - AUDIO_HEADER.size) // 2)
        session.heard_peak = max(session.heard_peak, level)
        barge_in = self.args.barge_in_level
        if barge_in is not None and level > barge_in:
            await self.clear(session, "barge-in")

    async def on_text(self, message):
        kind, sid = message.get("type"), message.get("session")
        if kind == "session.started":
            session = self.sessions.setdefault(sid, Session(sid, self.rate))
            say({"event": "started", "session": sid, "resumed": message.get("resumed"),
                 "subject": message.get("subject"), "codec": message.get("codec"),
                 "transport": message.get("transport")})
            if not message.get("resumed"):
                asyncio.get_running_loop().create_task(self.speak(session))
        elif kind == "session.ended":
            session = self.sessions.pop(sid, None)
            if session is not None:
                say({"event": "ended", "session": sid, "reason": message.get("reason"),
                     "said_frames": session.said_frames, "cleared_frames": session.cleared_frames,
                     "heard_frames": session.heard_frames, "heard_peak": round(session.heard_peak, 4),
                     "heard_sizes": sorted(session.heard_sizes)})
        elif kind == "audio.cleared":
            if sid in self.sessions:
                self.sessions[sid].cleared_frames = message.get("frames")
            say({"event": "cleared", "session": sid, "frames": message.get("frames"),
                 "marks": message.get("marks")})
        elif kind == "audio.mark_played":
            if sid in self.sessions:
                self.sessions[sid].speaking = False
            say({"event": "mark_played", "session": sid, "name": message.get("name")})
        elif kind == "session.stats":
            say({"event": "stats", **{k: v for k, v in message.items() if k != "type"}})
        elif kind == "event":
            try:
                data = json.loads(message.get("data", ""))
            except ValueError:
                return
            if isinstance(data, dict) and data.get("type") == "ping":
                pong = json.dumps({"type": "pong", "id": data.get("id")})
                await self.send_json({"type": "event", "session": sid, "data": pong})


async def serve_connection(ws, args):
    try:
        hello = json.loads(await ws.recv())
    except (ConnectionClosed, ValueError, TypeError):
        return
    offered = hello.get("audio", ["opus"])
    if hello.get("type") != "hello" or hello.get("protocol") != PROTOCOL or args.audio not in offered:
        say({"event": "refused", "hello": hello})
        await ws.close(1002, "wrong protocol or audio format")
        return
    await ws.send(json.dumps({"type": "hello", "protocol": PROTOCOL, "audio": args.audio}))
    say({"event": "hello", "worker": hello.get("worker"), "audio": args.audio})
    connection = Connection(ws, args)
    try:
        async for message in ws:
            if isinstance(message, bytes):
                await connection.on_audio(message)
            else:
                try:
                    parsed = json.loads(message)
                except ValueError:
                    continue
                if isinstance(parsed, dict):
                    await connection.on_text(parsed)
    except ConnectionClosed:
        pass


async def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen", default="127.0.0.1:9000", help="HOST:PORT (port 0: any)")
    parser.add_argument("--audio", default="pcm16/24000", choices=sorted(RATES))
    parser.add_argument("--speak", type=float, default=3.0, help="seconds of tone per session")
    parser.add_argument("--tone", type=float, default=440.0, help="its frequency, Hz")
    parser.add_argument("--clear-after", type=float, help="send audio.clear this many seconds after speaking")
    parser.add_argument("--barge-in-level", type=float, help="send audio.clear when the user is louder than this")
    parser.add_argument("--token-file", help="the bearer token a transceiver must present")
    args = parser.parse_args()
    token = open(args.token_file).read().strip() if args.token_file else None

    def check_token(connection, request):
        if token is None:
            return None
        presented = request.headers.get("Authorization", "")
        if not hmac.compare_digest(presented.encode(), f"Bearer {token}".encode()):
            return connection.respond(HTTPStatus.UNAUTHORIZED, "a bearer token is required\n")
        return None

    host, port = args.listen.rsplit(":", 1)
    async with serve(
        lambda ws: serve_connection(ws, args),
        host.strip("[]"),
        int(port),
        subprotocols=[PROTOCOL],
        process_request=check_token,
        max_size=64 * 1024,
    ) as server:
        bound = server.sockets[0].getsockname()
        say({"event": "listening", "url": f"ws://{bound[0]}:{bound[1]}/"})
        await asyncio.Future()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
