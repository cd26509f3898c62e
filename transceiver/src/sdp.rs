//! SDP text edits str0m's answer needs before it goes out: kept apart from the session
//! state machine, which only hands its answer through.

/// Makes an ICE-lite answer complete in every m-section: each section that is not
/// rejected (port 0) carries every candidate and `a=end-of-candidates`. Clients differ in
/// which m-section of a bundle they read candidates from (aiortc 1.16 reads the last one,
/// and str0m writes them in the first only); servers that interoperate widely repeat
/// them, and an ICE-lite answer has no candidates to trickle later (RFC 8838 §4).
pub fn complete_candidates(sdp: &str) -> String {
    let lines: Vec<&str> = sdp.split("\r\n").filter(|l| !l.is_empty()).collect();
    let mut candidates: Vec<&str> = Vec::new();
    for line in &lines {
        if line.starts_with("a=candidate:") && !candidates.contains(line) {
            candidates.push(line);
        }
    }
    let mut out = String::with_capacity(sdp.len() + 128 * candidates.len());
    let mut in_live_section = false;
    let close_section = |out: &mut String, live: bool| {
        if live {
            for c in &candidates {
                out.push_str(c);
                out.push_str("\r\n");
            }
            out.push_str("a=end-of-candidates\r\n");
        }
    };
    for line in &lines {
        if line.starts_with("m=") {
            close_section(&mut out, in_live_section);
            // `m=<media> <port> <proto> …`: port 0 rejects the section.
            in_live_section = line.split(' ').nth(1) != Some("0");
        }
        if line.starts_with("a=candidate:") || *line == "a=end-of-candidates" {
            continue;
        }
        out.push_str(line);
        out.push_str("\r\n");
    }
    close_section(&mut out, in_live_section);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_live_m_section_carries_the_candidates_and_their_end() {
        let sdp = "v=0\r\no=- 1 2 IN IP4 0.0.0.0\r\ns=-\r\na=group:BUNDLE 0 1\r\n\
                   m=audio 9 UDP/TLS/RTP/SAVPF 111\r\na=mid:0\r\n\
                   a=candidate:1 1 udp 2130706431 203.0.113.1 3478 typ host\r\n\
                   m=application 9 UDP/DTLS/SCTP webrtc-datachannel\r\na=mid:1\r\n\
                   m=video 0 UDP/TLS/RTP/SAVPF 96\r\na=mid:2\r\n";
        let done = complete_candidates(sdp);
        let sections: Vec<&str> = done.split("m=").collect();
        assert!(
            !sections[0].contains("a=candidate"),
            "none at session level"
        );
        for live in &sections[1..3] {
            assert_eq!(live.matches("a=candidate:1 1 udp").count(), 1, "{live}");
            assert!(live.ends_with("a=end-of-candidates\r\n"), "{live}");
        }
        assert!(
            !sections[3].contains("a=candidate"),
            "not in a rejected section"
        );
        assert_eq!(complete_candidates(&done), done, "idempotent");
    }
}
