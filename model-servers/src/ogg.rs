//! Reading the Opus packets out of an Ogg Opus file (RFC 7845): just enough of Ogg
//! (RFC 3533) to take a committed recording apart into the packets WebRTC sends.

/// Why a file is not an Ogg Opus stream this reader takes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OggError(pub String);

impl std::fmt::Display for OggError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for OggError {}

/// The length of an Ogg page header before its segment table.
const PAGE_HEADER_LEN: usize = 27;

/// Every packet of the file's one logical stream, in order.
pub fn packets(file: &[u8]) -> Result<Vec<Vec<u8>>, OggError> {
    let bad = |why: &str| OggError(why.to_string());
    let mut packets = Vec::new();
    let mut partial: Vec<u8> = Vec::new();
    let mut at = 0;
    while at < file.len() {
        let header = file
            .get(at..at + PAGE_HEADER_LEN)
            .ok_or_else(|| bad("a page header is cut short"))?;
        if &header[..4] != b"OggS" || header[4] != 0 {
            return Err(bad("not an Ogg page (capture pattern or version)"));
        }
        let segments = usize::from(header[26]);
        let table = file
            .get(at + PAGE_HEADER_LEN..at + PAGE_HEADER_LEN + segments)
            .ok_or_else(|| bad("a segment table is cut short"))?;
        let mut data = at + PAGE_HEADER_LEN + segments;
        for &lacing in table {
            let len = usize::from(lacing);
            let segment = file
                .get(data..data + len)
                .ok_or_else(|| bad("a segment is cut short"))?;
            partial.extend_from_slice(segment);
            data += len;
            // A lacing value below 255 ends the packet.
            if lacing < 255 {
                packets.push(std::mem::take(&mut partial));
            }
        }
        at = data;
    }
    Ok(packets)
}

/// The audio packets of an Ogg Opus file: every packet after `OpusHead` and `OpusTags`.
pub fn opus_packets(file: &[u8]) -> Result<Vec<Vec<u8>>, OggError> {
    let all = packets(file)?;
    let (head, rest) = all
        .split_first()
        .ok_or_else(|| OggError("no packets".into()))?;
    if !head.starts_with(b"OpusHead") {
        return Err(OggError("the first packet is not OpusHead".into()));
    }
    match rest.split_first() {
        Some((tags, audio)) if tags.starts_with(b"OpusTags") => Ok(audio.to_vec()),
        _ => Err(OggError("the second packet is not OpusTags".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One page holding `packets` (each shorter than 255 bytes, or spanning segments).
    fn page(packets: &[&[u8]]) -> Vec<u8> {
        let mut table = vec![];
        let mut data = vec![];
        for p in packets {
            let mut left = p.len();
            loop {
                let lacing = left.min(255);
                table.push(lacing as u8);
                left -= lacing;
                if lacing < 255 {
                    break;
                }
            }
            data.extend_from_slice(p);
        }
        let mut out = b"OggS".to_vec();
        out.push(0);
        out.extend_from_slice(&[0; 21]);
        out.push(table.len() as u8);
        out.extend(table);
        out.extend(data);
        out
    }

    #[test]
    fn packets_are_reassembled_across_segments_and_pages() {
        let long = vec![7u8; 300];
        let mut file = page(&[b"OpusHead....", b"OpusTags...."]);
        file.extend(page(&[&[1, 2, 3], &long]));
        file.extend(page(&[&[]]));
        assert_eq!(
            opus_packets(&file).unwrap(),
            vec![vec![1, 2, 3], long, vec![]]
        );
    }

    #[test]
    fn what_is_not_ogg_opus_is_refused() {
        assert!(packets(b"RIFF....").is_err());
        assert!(opus_packets(&page(&[b"Vorbis"])).is_err());
        let mut cut = page(&[b"OpusHead", b"OpusTags", &[1; 10]]);
        cut.truncate(cut.len() - 1);
        assert!(packets(&cut).is_err());
    }

    #[test]
    fn the_committed_phrase_is_about_four_seconds_of_20_ms_packets() {
        let phrase = opus_packets(include_bytes!("../voice/phrase.opus")).unwrap();
        assert!((150..250).contains(&phrase.len()), "{}", phrase.len());
        // The TOC byte (RFC 6716 §3.1): a configuration of 20 ms frames (SILK 1, 5, 9;
        // hybrid 13, 15; CELT 19, 23, 27, 31), mono, one frame per packet.
        for p in &phrase {
            let config = p[0] >> 3;
            assert!(
                [1, 5, 9, 13, 15, 19, 23, 27, 31].contains(&config),
                "{:#x}",
                p[0]
            );
            assert_eq!(p[0] & 0x04, 0, "mono");
            assert_eq!(p[0] & 0x03, 0, "one frame");
        }
    }
}
