"""aiortc client: Opus audio + an `events` data channel pinging every 50 ms, through the relay."""
import asyncio, json, sys, time, urllib.request
from aiortc import RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import AudioStreamTrack

URL = sys.argv[1]
SECONDS = float(sys.argv[2]) if len(sys.argv) > 2 else 5.0

async def main():
    pc = RTCPeerConnection()
    pc.addTrack(AudioStreamTrack())
    channel = pc.createDataChannel("events")
    rtts, sent_at, received_audio = [], {}, [0]
    opened = asyncio.Event()
    channel.on("open", opened.set)

    @channel.on("message")
    def on_message(msg):
        m = json.loads(msg)
        if m.get("type") == "pong" and m.get("id") in sent_at:
            rtts.append((time.monotonic() - sent_at[m["id"]]) * 1000)

    @pc.on("track")
    def on_track(track):
        async def pull():
            while True:
                try:
                    await track.recv()
                except Exception:
                    return
                received_audio[0] += 1
        asyncio.ensure_future(pull())

    await pc.setLocalDescription(await pc.createOffer())
    t0 = time.monotonic()
    req = urllib.request.Request(URL, data=pc.localDescription.sdp.encode(),
                                 headers={"Content-Type": "application/sdp"}, method="POST")
    answer = urllib.request.urlopen(req, timeout=5).read().decode()
    await pc.setRemoteDescription(RTCSessionDescription(sdp=answer, type="answer"))
    await asyncio.wait_for(opened.wait(), 10)
    print(f"data channel open {1000*(time.monotonic()-t0):.0f} ms after the POST")
    n = int(SECONDS / 0.05)
    for i in range(n):
        sent_at[i] = time.monotonic()
        channel.send(json.dumps({"type": "ping", "id": i}))
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.5)
    rtts.sort()
    p = lambda q: rtts[min(len(rtts) - 1, int(q * len(rtts)))] if rtts else float("nan")
    print(f"pongs {len(rtts)}/{n}, RTT p50 {p(0.5):.1f} ms p99 {p(0.99):.1f} ms; "
          f"echoed audio frames received {received_audio[0]} (the client sends 50 per second)")
    await pc.close()
    ok = len(rtts) >= 0.95 * n and received_audio[0] > 0.8 * SECONDS / 0.02
    sys.exit(0 if ok else 1)

asyncio.run(main())
