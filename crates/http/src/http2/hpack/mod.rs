//! HPACK, HTTP/2's header compression (RFC 7541), written for the proxy's
//! head model: the [`Decoder`] writes each field's name and value onto one
//! buffer and records their ranges ([`Field`]), as the HTTP/1.1 parser does;
//! the [`Encoder`] writes a response head straight into the frame being
//! built.
//!
//! The decoder is strict about every MUST of the RFC (integer overflow,
//! indexes out of range, size updates only at the start of a block and
//! within the limit we advertised, Huffman padding and EOS) and bounded: a
//! block's fields beyond the header list limit are decoded (the dynamic
//! table must stay in step with the peer's) but not kept, so a small block of
//! references to a large entry cannot blow up memory.
//!
//! The encoder never adds to its dynamic table (a response's changing
//! values would only evict each other): static-table names and indexed
//! `:status` codes, literals without indexing (never indexed for
//! credentials), Huffman-coded only when asked for. It still announces a
//! smaller table when the peer lowers `SETTINGS_HEADER_TABLE_SIZE`.

mod huffman;
mod huffman_table;
mod table;
#[cfg(test)]
mod tests;

use crate::parse::Field;

pub use huffman::{decode as huffman_decode, encode as huffman_encode, encoded_len as huffman_len};
use table::Dynamic;

/// The dynamic table size both sides start with (RFC 9113 6.5.2).
pub const DEFAULT_TABLE_SIZE: usize = 4096;

/// A decoding failure: a COMPRESSION_ERROR of the whole connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// The block ends inside a representation.
    Truncated,
    /// An integer beyond what the decoder accepts.
    IntegerOverflow,
    /// Index 0, or beyond both tables.
    BadIndex,
    /// A dynamic table size update after a field, or above the limit.
    BadSizeUpdate,
    /// Invalid Huffman code (padding, EOS).
    Huffman,
    /// The header list grew past four times its limit: decoding stopped; an
    /// HPACK bomb, not a request.
    ListTooLarge,
}

/// Decodes an HPACK integer with an `n`-bit prefix from `src` at `*at`.
fn read_int(src: &[u8], at: &mut usize, n: u32) -> Result<usize, Error> {
    let first = *src.get(*at).ok_or(Error::Truncated)?;
    *at += 1;
    let max = (1usize << n) - 1;
    let mut value = usize::from(first) & max;
    if value < max {
        return Ok(value);
    }
    let mut shift = 0u32;
    loop {
        let b = *src.get(*at).ok_or(Error::Truncated)?;
        *at += 1;
        if shift > 21 {
            // More than 2^28 plus the prefix: no field or table is that large.
            return Err(Error::IntegerOverflow);
        }
        value += usize::from(b & 0x7f) << shift;
        shift += 7;
        if b & 0x80 == 0 {
            return Ok(value);
        }
    }
}

/// Encodes `value` as an HPACK integer with an `n`-bit prefix whose other
/// bits are `flags`.
#[inline]
fn write_int(out: &mut Vec<u8>, flags: u8, n: u32, mut value: usize) {
    let max = (1usize << n) - 1;
    if value < max {
        out.push(flags | value as u8);
        return;
    }
    out.push(flags | max as u8);
    value -= max;
    while value >= 0x80 {
        out.push((value as u8 & 0x7f) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// Decodes a string literal from `src` at `*at` onto the end of `out`.
fn read_string(src: &[u8], at: &mut usize, out: &mut Vec<u8>) -> Result<(), Error> {
    let huffman = src.get(*at).ok_or(Error::Truncated)? & 0x80 != 0;
    let len = read_int(src, at, 7)?;
    let end = at.checked_add(len).filter(|&e| e <= src.len()).ok_or(Error::Truncated)?;
    let bytes = &src[*at..end];
    *at = end;
    if huffman {
        huffman::decode(bytes, out)
    } else {
        out.extend_from_slice(bytes);
        Ok(())
    }
}

/// What a decoded block came to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Decoded {
    /// The header list size in RFC 9113's accounting (name + value + 32 per
    /// field), over every field, kept or not.
    pub list_size: usize,
    /// Fields were left out for exceeding the list limit.
    pub oversized: bool,
}

/// The decoding side of one connection.
pub struct Decoder {
    table: Dynamic,
    /// The table size we advertised (`SETTINGS_HEADER_TABLE_SIZE`): the most
    /// a size update may ask for.
    limit: usize,
}

impl Default for Decoder {
    fn default() -> Self {
        Decoder::new(DEFAULT_TABLE_SIZE)
    }
}

impl Decoder {
    /// A decoder whose table may grow to `limit` bytes.
    pub fn new(limit: usize) -> Self {
        Decoder { table: Dynamic::new(limit), limit }
    }

    /// The dynamic table's current size limit and use, for tests.
    pub fn table_size(&self) -> (usize, usize) {
        (self.table.max(), self.table.size())
    }

    /// Decodes one complete header block: each field's name and value are
    /// appended to `out`, their ranges pushed onto `fields`. Fields that would
    /// take the list beyond `max_list` bytes are decoded and dropped.
    pub fn decode(
        &mut self,
        block: &[u8],
        max_list: usize,
        out: &mut Vec<u8>,
        fields: &mut Vec<Field>,
    ) -> Result<Decoded, Error> {
        let mut at = 0;
        let mut done = Decoded::default();
        let mut first = true;
        while at < block.len() {
            let b = block[at];
            if b & 0xe0 == 0x20 {
                // Dynamic table size update (6.3): only before the first field.
                let size = read_int(block, &mut at, 5)?;
                if !first || size > self.limit {
                    return Err(Error::BadSizeUpdate);
                }
                self.table.set_max(size);
                continue;
            }
            first = false;
            let start = out.len();
            let (name_end, index) = if b & 0x80 != 0 {
                // Indexed field (6.1).
                let i = read_int(block, &mut at, 7)?;
                let (name, value) = table::get(&self.table, i).ok_or(Error::BadIndex)?;
                if done.oversized {
                    // Already over the limit: counted, not copied.
                    done.list_size = done.list_size.saturating_add(name.len() + value.len() + table::ENTRY_OVERHEAD);
                    if done.list_size > hard_limit(max_list) {
                        return Err(Error::ListTooLarge);
                    }
                    continue;
                }
                out.extend_from_slice(name);
                let name_end = out.len();
                out.extend_from_slice(value);
                (name_end, false)
            } else {
                // Literal (6.2): with incremental indexing (01), without (0000)
                // or never indexed (0001); name indexed or literal.
                let (prefix, index) = if b & 0x40 != 0 { (6, true) } else { (4, false) };
                let i = read_int(block, &mut at, prefix)?;
                if i == 0 {
                    read_string(block, &mut at, out)?;
                } else {
                    let (name, _) = table::get(&self.table, i).ok_or(Error::BadIndex)?;
                    out.extend_from_slice(name);
                }
                let name_end = out.len();
                read_string(block, &mut at, out)?;
                (name_end, index)
            };
            if index {
                let (name, value) = out[start..].split_at(name_end - start);
                self.table.insert(name, value);
            }
            let size = out.len() - start + table::ENTRY_OVERHEAD;
            done.list_size = done.list_size.saturating_add(size);
            if done.list_size > hard_limit(max_list) {
                return Err(Error::ListTooLarge);
            }
            if done.list_size > max_list {
                done.oversized = true;
                out.truncate(start);
            } else {
                fields.push(Field { name: start..name_end, value: name_end..out.len() });
            }
        }
        Ok(done)
    }
}

/// Where decoding gives up on a header list (see [`Error::ListTooLarge`]).
fn hard_limit(max_list: usize) -> usize {
    max_list.saturating_mul(4)
}

/// The encoding side of one connection.
#[derive(Debug, Default)]
pub struct Encoder {
    /// A size update owed at the start of the next block (the peer lowered
    /// its table size below what we may use).
    pending_update: Option<usize>,
    /// Values are Huffman-coded when that makes them shorter.
    pub huffman: bool,
}

impl Encoder {
    /// The peer's `SETTINGS_HEADER_TABLE_SIZE`. This encoder never indexes,
    /// but a decoder that lowered its limit may wait for the update.
    pub fn peer_table_size(&mut self, size: usize) {
        if size < DEFAULT_TABLE_SIZE {
            self.pending_update = Some(size);
        }
    }

    /// Starts a header block in `out` (the owed size update, if any).
    pub fn begin(&mut self, out: &mut Vec<u8>) {
        if let Some(size) = self.pending_update.take() {
            write_int(out, 0x20, 5, size);
        }
    }

    /// Encodes `:status`.
    pub fn status(&mut self, status: u16, out: &mut Vec<u8>) {
        let index = match status {
            200 => 8,
            204 => 9,
            206 => 10,
            304 => 11,
            400 => 12,
            404 => 13,
            500 => 14,
            _ => 0,
        };
        if index != 0 {
            out.push(0x80 | index);
            return;
        }
        // Literal without indexing, name `:status` (static 8).
        out.push(0x08);
        let mut digits = [b'0'; 3];
        let mut s = status.min(999);
        for d in digits.iter_mut().rev() {
            *d = b'0' + (s % 10) as u8;
            s /= 10;
        }
        self.string(&digits, out);
    }

    /// Encodes one field; `name` must be lowercase (HTTP/2 field names are).
    pub fn field(&mut self, name: &[u8], value: &[u8], out: &mut Vec<u8>) {
        // Room for the literal at its longest (two length prefixes, a flags
        // byte): the pushes below then never grow the block.
        out.reserve(name.len() + value.len() + 16);
        let flags = if sensitive(name) { 0x10 } else { 0x00 };
        match table::static_name(name) {
            Some(i) => write_int(out, flags, 4, i),
            None => {
                out.push(flags);
                self.string(name, out);
            }
        }
        self.string(value, out);
    }

    fn string(&self, s: &[u8], out: &mut Vec<u8>) {
        if self.huffman {
            let len = huffman::encoded_len(s);
            if len < s.len() {
                write_int(out, 0x80, 7, len);
                huffman::encode(s, out);
                return;
            }
        }
        write_int(out, 0x00, 7, s.len());
        out.extend_from_slice(s);
    }
}

/// Fields never to be indexed by anyone on the way (RFC 7541 7.1.3).
fn sensitive(name: &[u8]) -> bool {
    name == b"authorization" || name == b"proxy-authorization"
}
