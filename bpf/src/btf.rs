//! Reading a compiled BPF object's BTF just far enough to check a struct's layout: the
//! `.BTF` section of a little-endian ELF64 object, its `struct` types and their members'
//! names and byte offsets. The Rust side of a map writes and reads C structs by offset;
//! its tests hold those offsets against what clang actually laid out.

use std::fmt;

/// A problem with the object or its BTF.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BtfError(String);

impl fmt::Display for BtfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BtfError {}

fn error(what: impl Into<String>) -> BtfError {
    BtfError(what.into())
}

fn u16_at(bytes: &[u8], at: usize) -> Result<u16, BtfError> {
    bytes
        .get(at..at + 2)
        .map(|b| u16::from_le_bytes([b[0], b[1]]))
        .ok_or_else(|| error(format!("truncated at {at}")))
}

fn u32_at(bytes: &[u8], at: usize) -> Result<u32, BtfError> {
    bytes
        .get(at..at + 4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .ok_or_else(|| error(format!("truncated at {at}")))
}

fn u64_at(bytes: &[u8], at: usize) -> Result<u64, BtfError> {
    Ok(u64::from(u32_at(bytes, at)?) | (u64::from(u32_at(bytes, at + 4)?) << 32))
}

fn usize_at(bytes: &[u8], at: usize) -> Result<usize, BtfError> {
    usize::try_from(u64_at(bytes, at)?).map_err(|_| error("an offset beyond memory"))
}

/// The contents of the ELF section `name`.
fn section<'a>(elf: &'a [u8], name: &str) -> Result<&'a [u8], BtfError> {
    if elf.get(..6) != Some(&[0x7f, b'E', b'L', b'F', 2, 1][..]) {
        return Err(error("not a little-endian ELF64 object"));
    }
    let (table, entry_size) = (usize_at(elf, 0x28)?, usize::from(u16_at(elf, 0x3a)?));
    let (count, names_index) = (
        usize::from(u16_at(elf, 0x3c)?),
        usize::from(u16_at(elf, 0x3e)?),
    );
    let header = |i: usize| table + i * entry_size;
    let names_at = usize_at(elf, header(names_index) + 0x18)?;
    for i in 0..count {
        let name_at = names_at + u32_at(elf, header(i))? as usize;
        let this = elf
            .get(name_at..)
            .and_then(|rest| rest.split(|&b| b == 0).next())
            .ok_or_else(|| error("a section name out of bounds"))?;
        if this == name.as_bytes() {
            let (at, len) = (
                usize_at(elf, header(i) + 0x18)?,
                usize_at(elf, header(i) + 0x20)?,
            );
            return elf
                .get(at..at + len)
                .ok_or_else(|| error(format!("section {name} out of bounds")));
        }
    }
    Err(error(format!("no {name} section (compiled without -g?)")))
}

/// The members of `struct name` in `object`'s BTF, as (name, byte offset), in order.
pub fn struct_members(object: &[u8], name: &str) -> Result<Vec<(String, usize)>, BtfError> {
    let btf = section(object, ".BTF")?;
    if u16_at(btf, 0)? != 0xeb9f {
        return Err(error("bad BTF magic"));
    }
    let header_len = u32_at(btf, 4)? as usize;
    let (types_at, types_len) = (
        header_len + u32_at(btf, 8)? as usize,
        u32_at(btf, 12)? as usize,
    );
    let strings_at = header_len + u32_at(btf, 16)? as usize;
    let string = |off: u32| -> Result<String, BtfError> {
        let at = strings_at + off as usize;
        let bytes = btf
            .get(at..)
            .and_then(|rest| rest.split(|&b| b == 0).next())
            .ok_or_else(|| error("a BTF string out of bounds"))?;
        Ok(String::from_utf8_lossy(bytes).into_owned())
    };
    let mut at = types_at;
    while at < types_at + types_len {
        let (name_off, info) = (u32_at(btf, at)?, u32_at(btf, at + 4)?);
        let (kind, vlen, bitfields) = ((info >> 24) & 0x1f, (info & 0xffff) as usize, info >> 31);
        at += 12;
        // Each kind's trailing data (include/uapi/linux/btf.h).
        let trailing = match kind {
            1 => 4,             // INT
            3 => 12,            // ARRAY
            4 | 5 => 12 * vlen, // STRUCT, UNION
            6 => 8 * vlen,      // ENUM
            13 => 8 * vlen,     // FUNC_PROTO
            14 => 4,            // VAR
            15 => 12 * vlen,    // DATASEC
            17 => 4,            // DECL_TAG
            19 => 12 * vlen,    // ENUM64
            _ => 0,
        };
        if kind == 4 && string(name_off)? == name {
            return (0..vlen)
                .map(|m| {
                    let member = at + 12 * m;
                    let offset = u32_at(btf, member + 8)?;
                    // With the bitfield flag, the low 24 bits are the bit offset.
                    let bits = if bitfields == 1 {
                        offset & 0xff_ffff
                    } else {
                        offset
                    };
                    Ok((string(u32_at(btf, member)?)?, bits as usize / 8))
                })
                .collect();
        }
        at += trailing;
    }
    Err(error(format!("no struct {name} in the BTF")))
}
