"""An aiortc client (an independent WebRTC stack, from PyPI) for the browser tests: one
session through the transceiver's WHIP endpoint with Opus audio and the `events` data
channel pinged every 50 ms, in the bundle policy asked for. Prints one JSON object:
the setup timeline, pongs and RTTs, echoed audio frames, and the DELETE status.

    python aiortc_echo.py URL SECONDS max-bundle|balanced
"""
import asyncio, json, sys, time, urllib.error, urllib.request

from aiortc import RTCBundlePolicy, RTCConfiguration, RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import AudioStreamTrack

URL, SECONDS, POLICY = sys.argv[1], float(sys.argv[2]), sys.argv[3]


async def main():
    policy = {"max-bundle": RTCBundlePolicy.MAX_BUNDLE, "balanced": RTCBundlePolicy.BALANCED}[POLICY]
    pc = RTCPeerConnection(RTCConfiguration(bundlePolicy=policy))
    pc.addTrack(AudioStreamTrack())
    channel = pc.createDataChannel("events")
    out = {"policy": POLICY, "pings": 0, "pongs": 0, "audio_received": 0}
    rtts, sent_at = [], {}
    opened = asyncio.Event()
    channel.on("open", opened.set)
    t0 = time.monotonic()
    ms = lambda: round(1000 * (time.monotonic() - t0))

    @channel.on("message")
    def on_message(msg):
        m = json.loads(msg)
        if m.get("type") == "pong" and m.get("id") in sent_at:
            rtts.append((time.monotonic() - sent_at.pop(m["id"])) * 1000)

    @pc.on("iceconnectionstatechange")
    def on_ice():
        if pc.iceConnectionState == "completed" and "ice_connected_ms" not in out:
            out["ice_connected_ms"] = ms()

    @pc.on("connectionstatechange")
    def on_state():
        if pc.connectionState == "connected" and "dtls_connected_ms" not in out:
            out["dtls_connected_ms"] = ms()

    @pc.on("track")
    def on_track(track):
        async def pull():
            while True:
                try:
                    await track.recv()
                except Exception:
                    return
                out["audio_received"] += 1
        asyncio.ensure_future(pull())

    await pc.setLocalDescription(await pc.createOffer())
    t0 = time.monotonic()
    req = urllib.request.Request(URL, data=pc.localDescription.sdp.encode(),
                                 headers={"Content-Type": "application/sdp"}, method="POST")
    with urllib.request.urlopen(req, timeout=5) as response:
        location = response.headers["Location"]
        answer = response.read().decode()
    await pc.setRemoteDescription(RTCSessionDescription(sdp=answer, type="answer"))
    try:
        await asyncio.wait_for(opened.wait(), 10)
    except asyncio.TimeoutError:
        out["error"] = f"events channel never opened (ICE {pc.iceConnectionState})"
    else:
        out["channel_open_ms"] = ms()
        for i in range(int(SECONDS / 0.05)):
            sent_at[i] = time.monotonic()
            out["pings"] += 1
            channel.send(json.dumps({"type": "ping", "id": i}))
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)
    rtts.sort()
    out["pongs"] = len(rtts)
    out["rtt_p50_ms"] = rtts[len(rtts) // 2] if rtts else None
    out["rtt_p99_ms"] = rtts[min(len(rtts) - 1, int(0.99 * len(rtts)))] if rtts else None
    # DELETE before closing: a closed peer ends the session by itself (DELETE then 404s).
    base = URL.split("/v1/")[0]
    delete = urllib.request.Request(base + location, method="DELETE")
    try:
        with urllib.request.urlopen(delete, timeout=5) as response:
            out["delete_status"] = response.status
    except urllib.error.HTTPError as e:
        out["delete_status"] = e.code
    await pc.close()
    print(json.dumps(out))


asyncio.run(main())
