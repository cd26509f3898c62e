// The demo page's client: WHIP-style signaling (POST an SDP offer, DELETE to end), the
// microphone as the only track, the "events" data channel pinged every 50 ms, and what
// a person (or a test) wants to see: the setup timeline (POST → ICE → DTLS → first
// echoed audio), round-trip times, audio levels and the path the session took.
//
// `?auto=SECONDS&report=URL` runs one session without a click for SECONDS, ends it with
// DELETE, and POSTs the result (JSON, the fields of `result` below) to URL: how the
// browser tests drive a real Chromium through this very page. `&end=none` leaves the
// session running (no DELETE, no close) for a test that then closes the browser.
// `&token=JWT` sends a session token (as the app's server would hand one to its page)
// as `Authorization: Bearer` on the POST and the DELETE; a real page gets it from its
// own server, never from its URL, which ends up in logs.
"use strict";

const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.search);
const PING_EVERY_MS = 50;
const AUTH = params.has("token") ? { Authorization: `Bearer ${params.get("token")}` } : {};
let session = null;

function log(line) {
  $("log").textContent += line + "\n";
}

function percentile(sorted, q) {
  return sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] : null;
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

// Milliseconds since the POST, rounded, for the timeline.
function since(t0) {
  return Math.round(performance.now() - t0);
}

function showTimeline(r) {
  const step = (ms) => (ms === undefined ? "…" : `${ms} ms`);
  $("timeline").textContent =
    `answer ${step(r.answer_ms)} · ICE ${step(r.ice_connected_ms)} · ` +
    `DTLS ${step(r.dtls_connected_ms)} · first echo ${step(r.first_echo_ms)}`;
}

async function start() {
  const result = { pings: 0, pongs: 0 };
  const stream = await navigator.mediaDevices.getUserMedia({ audio: true });
  const pc = new RTCPeerConnection();
  stream.getTracks().forEach((t) => pc.addTrack(t, stream));
  const events = pc.createDataChannel("events");
  const sentAt = new Map();
  const rtts = [];
  let t0 = performance.now();
  events.onmessage = (e) => {
    const m = JSON.parse(e.data);
    if (m.type === "pong" && sentAt.has(m.id)) {
      rtts.push(performance.now() - sentAt.get(m.id));
      sentAt.delete(m.id);
      result.pongs += 1;
      drawRtts(rtts);
    } else {
      $("event").textContent = e.data;
    }
  };
  let pingId = 0;
  const pinger = { timer: null };
  events.onopen = () => {
    result.channel_open_ms = since(t0);
    const timer = setInterval(() => {
      if (events.readyState !== "open") return clearInterval(timer);
      sentAt.set(++pingId, performance.now());
      result.pings += 1;
      events.send(JSON.stringify({ type: "ping", id: pingId }));
    }, PING_EVERY_MS);
    pinger.timer = timer;
  };
  pc.ontrack = (e) => {
    $("remote").srcObject = e.streams[0] || new MediaStream([e.track]);
    timeFirstFrame(e.receiver, (at) => {
      result.first_echo_ms = Math.round(at - t0);
      showTimeline(result);
    });
  };
  pc.oniceconnectionstatechange = () => {
    const s = pc.iceConnectionState;
    if ((s === "connected" || s === "completed") && result.ice_connected_ms === undefined) {
      result.ice_connected_ms = since(t0);
      showTimeline(result);
    }
  };
  pc.onconnectionstatechange = () => {
    $("state").textContent = pc.connectionState;
    if (pc.connectionState === "connected" && result.dtls_connected_ms === undefined) {
      result.dtls_connected_ms = since(t0);
      showTimeline(result);
    }
  };

  await pc.setLocalDescription(await pc.createOffer());
  await waitForIceGathering(pc);
  t0 = performance.now();
  const response = await fetch("/v1/sessions", {
    method: "POST",
    headers: { "Content-Type": "application/sdp", ...AUTH },
    body: pc.localDescription.sdp,
  });
  if (response.status !== 201) {
    throw new Error(`signaling failed: ${response.status} ${await response.text()}`);
  }
  const location = response.headers.get("Location");
  await pc.setRemoteDescription({ type: "answer", sdp: await response.text() });
  result.answer_ms = since(t0);
  showTimeline(result);
  const stats = setInterval(() => showStats(pc, result, t0), 20);
  session = { pc, stream, location, stats, result, rtts, pinger };
  $("talk").textContent = "Hang up";
  log(`session ${location}`);
}

// Calls `onFirst(ms on the page's clock)` with the time the receiver delivered its first
// audio frame: the time getSynchronizationSources() records (wall-clock ms), read by a
// 2 ms poll that ends there. getStats() would be up to 50 ms late: Chromium serves a
// cached report.
function timeFirstFrame(receiver, onFirst) {
  const poll = setInterval(() => {
    const sources = receiver.getSynchronizationSources();
    if (sources.length === 0) return;
    clearInterval(poll);
    const at = sources[0].timestamp;
    // Chromium gives wall-clock ms, the spec (and Firefox) the page's own clock.
    onFirst(at > performance.timeOrigin ? at - performance.timeOrigin : at);
  }, 2);
}

// Reads getStats(): packets, levels, the selected path, and the first echoed packet.
async function readStats(pc) {
  const report = await pc.getStats();
  const out = { sent: 0, received: 0, micLevel: 0, echoLevel: 0, energyIn: 0, secondsIn: 0, path: null };
  const byId = new Map();
  report.forEach((s) => byId.set(s.id, s));
  report.forEach((s) => {
    if (s.type === "inbound-rtp" && s.kind === "audio") {
      out.received = s.packetsReceived;
      out.echoLevel = s.audioLevel || 0;
      // What the page played of the server's audio: the sum of level² × seconds.
      out.energyIn = s.totalAudioEnergy || 0;
      out.secondsIn = s.totalSamplesDuration || 0;
    }
    if (s.type === "outbound-rtp" && s.kind === "audio") out.sent = s.packetsSent;
    if (s.type === "media-source" && s.kind === "audio") out.micLevel = s.audioLevel || 0;
    if (s.type === "transport" && s.selectedCandidatePairId) {
      const pair = byId.get(s.selectedCandidatePairId);
      const remote = pair && byId.get(pair.remoteCandidateId);
      if (remote) out.path = `${remote.address}:${remote.port} over ${remote.protocol.toUpperCase()}`;
    }
  });
  return out;
}

let lastShown = 0;
async function showStats(pc, result, t0) {
  const s = await readStats(pc);
  if (performance.now() - lastShown < 250) return;
  lastShown = performance.now();
  $("packets").textContent = `${s.sent} / ${s.received}`;
  $("path").textContent = s.path ? `relay VIP ${s.path}` : "–";
  $("mic").value = s.micLevel;
  $("echo").value = s.echoLevel;
}

// The last 200 round-trip times as a line, newest on the right.
function drawRtts(rtts) {
  const canvas = $("chart");
  const g = canvas.getContext("2d");
  const recent = rtts.slice(-200);
  const top = Math.max(10, ...recent);
  g.clearRect(0, 0, canvas.width, canvas.height);
  g.beginPath();
  recent.forEach((v, i) => {
    const x = (i / 199) * canvas.width;
    const y = canvas.height - (v / top) * (canvas.height - 2) - 1;
    i ? g.lineTo(x, y) : g.moveTo(x, y);
  });
  g.stroke();
  const sorted = [...rtts].sort((a, b) => a - b);
  $("rtt").textContent =
    `p50 ${percentile(sorted, 0.5).toFixed(1)} ms · p99 ${percentile(sorted, 0.99).toFixed(1)} ms ` +
    `· max ${top.toFixed(1)} ms (scale)`;
}

async function stop() {
  const { pc, stream, location, stats, result, rtts, pinger } = session;
  session = null;
  clearInterval(stats);
  clearInterval(pinger.timer); // the last pongs arrive during the wait below
  const before = await readStats(pc);
  await new Promise((r) => setTimeout(r, 500));
  const after = await readStats(pc);
  const sorted = [...rtts].sort((a, b) => a - b);
  Object.assign(result, {
    rtt_p50_ms: percentile(sorted, 0.5),
    rtt_p99_ms: percentile(sorted, 0.99),
    rtt_max_ms: sorted.length ? sorted[sorted.length - 1] : null,
    audio_sent: after.sent,
    audio_received: before.received,
    audio_received_later: after.received,
    audio_energy_in: before.energyIn,
    audio_seconds_in: before.secondsIn,
    path: after.path,
  });
  if (params.get("end") === "none") return result; // the test closes the browser itself
  // DELETE first: closing the peer connection first would end the session by its DTLS
  // close alert, and DELETE would find nothing (404).
  result.delete_status = (await fetch(location, { method: "DELETE", headers: AUTH })).status;
  stream.getTracks().forEach((t) => t.stop());
  pc.close();
  $("talk").textContent = "Talk";
  $("state").textContent = "closed";
  return result;
}

$("talk").onclick = () => {
  (session ? stop() : start()).catch((e) => {
    log(String(e));
    $("state").textContent = "failed";
  });
};

// Unattended: one session for `auto` seconds, result POSTed to `report`.
if (params.has("auto")) {
  (async () => {
    let result;
    try {
      // A person clicks Talk some time after the page has loaded; starting at load
      // would count Chromium's own start-up (its processes, the fake audio device) as
      // session setup.
      await new Promise((r) => setTimeout(r, 1000));
      await start();
      await new Promise((r) => setTimeout(r, 1000 * Number(params.get("auto"))));
      result = await stop();
    } catch (e) {
      result = { error: String(e) };
    }
    window.ufragResult = result;
    const report = params.get("report");
    if (report) await fetch(report, { method: "POST", mode: "no-cors", body: JSON.stringify(result) });
  })();
}
