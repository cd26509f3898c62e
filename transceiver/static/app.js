// The demo page's client: WHIP-style signaling (POST an SDP offer, DELETE to end), the
// microphone as the only track, the "events" data channel, and live stats from getStats().
"use strict";

const $ = (id) => document.getElementById(id);
let session = null;

function log(line) {
  $("log").textContent += line + "\n";
}

async function waitForIceGathering(pc) {
  if (pc.iceGatheringState === "complete") return;
  await new Promise((resolve) => {
    const done = () => {
      if (pc.iceGatheringState === "complete") {
        pc.removeEventListener("icegatheringstatechange", done);
        resolve();
      }
    };
    pc.addEventListener("icegatheringstatechange", done);
    setTimeout(resolve, 2000); // host candidates are enough; do not wait for STUN servers
  });
}

async function start() {
  const stream = await navigator.mediaDevices.getUserMedia({ audio: true });
  const pc = new RTCPeerConnection();
  stream.getTracks().forEach((t) => pc.addTrack(t, stream));
  const events = pc.createDataChannel("events");
  events.onmessage = (e) => { $("event").textContent = e.data; };
  let pingId = 0;
  events.onopen = () => {
    const timer = setInterval(() => {
      if (events.readyState !== "open") return clearInterval(timer);
      events.send(JSON.stringify({ type: "ping", id: ++pingId }));
    }, 1000);
  };
  pc.ontrack = (e) => { $("remote").srcObject = e.streams[0] || new MediaStream([e.track]); };
  pc.onconnectionstatechange = () => { $("state").textContent = pc.connectionState; };

  await pc.setLocalDescription(await pc.createOffer());
  await waitForIceGathering(pc);
  const response = await fetch("/v1/sessions", {
    method: "POST",
    headers: { "Content-Type": "application/sdp" },
    body: pc.localDescription.sdp,
  });
  if (response.status !== 201) {
    throw new Error(`signaling failed: ${response.status} ${await response.text()}`);
  }
  const location = response.headers.get("Location");
  await pc.setRemoteDescription({ type: "answer", sdp: await response.text() });
  const stats = setInterval(() => showStats(pc), 1000);
  session = { pc, stream, location, stats };
  $("talk").textContent = "Hang up";
  log(`session ${location}`);
}

async function showStats(pc) {
  const report = await pc.getStats();
  let sent = 0;
  let received = 0;
  report.forEach((s) => {
    if (s.type === "candidate-pair" && s.nominated && s.currentRoundTripTime !== undefined) {
      $("rtt").textContent = `${(s.currentRoundTripTime * 1000).toFixed(0)} ms`;
    }
    if (s.type === "inbound-rtp" && s.kind === "audio") {
      received = s.packetsReceived;
      if (s.jitter !== undefined) $("jitter").textContent = `${(s.jitter * 1000).toFixed(1)} ms`;
    }
    if (s.type === "outbound-rtp" && s.kind === "audio") sent = s.packetsSent;
  });
  $("packets").textContent = `${sent} / ${received}`;
}

async function stop() {
  const { pc, stream, location, stats } = session;
  session = null;
  clearInterval(stats);
  stream.getTracks().forEach((t) => t.stop());
  pc.close();
  await fetch(location, { method: "DELETE" });
  $("talk").textContent = "Talk";
  $("state").textContent = "closed";
}

$("talk").onclick = () => {
  (session ? stop() : start()).catch((e) => {
    log(String(e));
    $("state").textContent = "failed";
  });
};
