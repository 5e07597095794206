//! The chunked transfer coding (RFC 9112 7.1): a scanner that validates a
//! chunked body as it streams past, finds where it ends, and tells the
//! payload bytes from the framing, so a body can be relayed verbatim or
//! decoded without ever being buffered whole.

/// Largest chunk-size line (hex digits) accepted: 16 digits fill a u64.
const MAX_SIZE_DIGITS: u8 = 16;
/// Largest trailer section accepted, in bytes.
const MAX_TRAILER_BYTES: usize = 16 * 1024;

/// A `tchar` of RFC 9110 5.6.2: the characters of a field name.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Size,
    Ext,
    SizeLf,
    Data,
    DataCr,
    DataLf,
    TrailerStart,
    TrailerName,
    TrailerLine,
    TrailerLf,
    FinalLf,
    Done,
}

/// Validates a chunked body as it streams past and finds where it ends.
#[derive(Debug, Clone)]
pub struct ChunkedScanner {
    state: State,
    size: u64,
    digits: u8,
    trailer_bytes: usize,
    data_bytes: u64,
    /// The trailer section's field lines, each ending in `\n`, when asked for
    /// ([`collecting_trailers`](Self::collecting_trailers)); bounded like the section.
    trailers: Option<Vec<u8>>,
}

impl Default for ChunkedScanner {
    fn default() -> Self {
        Self::new()
    }
}

impl ChunkedScanner {
    /// A scanner at the start of a chunked body.
    pub fn new() -> Self {
        ChunkedScanner { state: State::Size, size: 0, digits: 0, trailer_bytes: 0, data_bytes: 0, trailers: None }
    }

    /// A scanner that also keeps the trailer section's fields, for a relay
    /// that must pass them on in another form (HTTP/2 trailers).
    pub fn collecting_trailers() -> Self {
        ChunkedScanner { trailers: Some(Vec::new()), ..Self::new() }
    }

    /// The trailer fields seen so far, as (name, value) with the value's
    /// surrounding whitespace trimmed; none unless collecting.
    pub fn trailers(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        let lines = self.trailers.as_deref().unwrap_or_default();
        lines.split(|&b| b == b'\n').filter(|l| !l.is_empty()).filter_map(|line| {
            let colon = line.iter().position(|&b| b == b':')?;
            Some((&line[..colon], crate::parse::trim(&line[colon + 1..])))
        })
    }

    /// Whether the terminating chunk and trailer section have been seen.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Payload bytes seen so far (chunk data only, framing excluded).
    pub fn data_bytes(&self) -> u64 {
        self.data_bytes
    }

    /// Counts one byte of the trailer section against its limit (and keeps
    /// it when collecting).
    fn count_trailer(&mut self, b: u8, next: State) -> Result<State, &'static str> {
        self.trailer_bytes += 1;
        if self.trailer_bytes > MAX_TRAILER_BYTES {
            return Err("trailer section too large");
        }
        if let Some(kept) = self.trailers.as_mut() {
            kept.push(b);
        }
        Ok(next)
    }

    /// Scans `input`, returning how many of its bytes belong to the body.
    /// Fewer than `input.len()` only once the body is done.
    pub fn scan(&mut self, input: &[u8]) -> Result<usize, &'static str> {
        self.scan_with(input, |_| {})
    }

    /// Like [`scan`](Self::scan), and reports each run of payload bytes
    /// (chunk data, framing excluded) as a range of `input`.
    pub fn scan_with(
        &mut self,
        input: &[u8],
        mut on_data: impl FnMut(std::ops::Range<usize>),
    ) -> Result<usize, &'static str> {
        let mut i = 0;
        while i < input.len() && self.state != State::Done {
            if self.state == State::Data {
                let take = (input.len() - i).min(usize::try_from(self.size).unwrap_or(usize::MAX));
                on_data(i..i + take);
                i += take;
                self.size -= take as u64;
                self.data_bytes += take as u64;
                if self.size == 0 {
                    self.state = State::DataCr;
                }
                continue;
            }
            let b = input[i];
            i += 1;
            self.state = match (self.state, b) {
                (State::Size, b';') if self.digits > 0 => State::Ext,
                (State::Size, b'\r') if self.digits > 0 => State::SizeLf,
                (State::Size, _) => {
                    let digit = (b as char).to_digit(16).ok_or("invalid chunk size")?;
                    if self.digits == MAX_SIZE_DIGITS {
                        return Err("chunk size too large");
                    }
                    self.digits += 1;
                    self.size = (self.size << 4) | u64::from(digit);
                    State::Size
                }
                (State::Ext, b'\r') => State::SizeLf,
                (State::Ext, b'\n') => return Err("bare LF in chunk extension"),
                (State::Ext, b) if b == b'\t' || (b >= 0x20 && b != 0x7f) => State::Ext,
                (State::Ext, _) => return Err("invalid chunk extension"),
                (State::SizeLf, b'\n') => {
                    self.digits = 0;
                    if self.size == 0 {
                        State::TrailerStart
                    } else {
                        State::Data
                    }
                }
                (State::SizeLf, _) => return Err("invalid chunk size line"),
                (State::DataCr, b'\r') => State::DataLf,
                (State::DataLf, b'\n') => State::Size,
                (State::DataCr | State::DataLf, _) => return Err("missing CRLF after chunk"),
                (State::TrailerStart, b'\r') => State::FinalLf,
                (State::TrailerLine, b'\r') => State::TrailerLf,
                // A trailer line is a field line (RFC 9112 7.1.2, RFC 9110 5.1):
                // a token, a colon, then a value without control characters.
                // Whitespace before the name (obs-fold) or in it is refused.
                (State::TrailerStart | State::TrailerName, b) if is_tchar(b) => {
                    self.count_trailer(b, State::TrailerName)?
                }
                (State::TrailerName, b':') => self.count_trailer(b, State::TrailerLine)?,
                (State::TrailerLine, b) if b == b'\t' || (b >= 0x20 && b != 0x7f) => {
                    self.count_trailer(b, State::TrailerLine)?
                }
                (State::TrailerStart | State::TrailerName | State::TrailerLine, _) => return Err("invalid trailer"),
                (State::TrailerLf, b'\n') => self.count_trailer(b, State::TrailerStart)?,
                (State::TrailerLf, _) => return Err("invalid trailer line"),
                (State::FinalLf, b'\n') => State::Done,
                (State::FinalLf, _) => return Err("invalid end of chunked body"),
                // Data is consumed above and Done ends the loop.
                (State::Data | State::Done, _) => return Err("chunk scanner out of step"),
            };
        }
        Ok(i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan_all(input: &[u8]) -> Result<(usize, bool), &'static str> {
        let mut s = ChunkedScanner::new();
        let n = s.scan(input)?;
        Ok((n, s.is_done()))
    }

    #[test]
    fn valid_chunked_bodies_end_exactly() {
        let table: &[&[u8]] = &[
            b"0\r\n\r\n",
            b"5\r\nhello\r\n0\r\n\r\n",
            b"5;ext=1\r\nhello\r\n0\r\n\r\n",
            b"A\r\n0123456789\r\n0\r\nTrailer: x\r\n\r\n",
            b"00000003\r\nabc\r\n0\r\n\r\n",
            b"0\r\ngrpc-status: 0\r\ngrpc-message: a b\tc\r\nx-empty:\r\n\r\n",
        ];
        for body in table {
            let mut with_next = body.to_vec();
            with_next.extend_from_slice(b"GET / HTTP/1.1\r\n");
            assert_eq!(scan_all(&with_next), Ok((body.len(), true)), "{:?}", String::from_utf8_lossy(body));
            // Byte by byte gives the same end.
            let mut s = ChunkedScanner::new();
            let mut consumed = 0;
            for b in with_next.iter() {
                consumed += s.scan(std::slice::from_ref(b)).expect("valid");
                if s.is_done() {
                    break;
                }
            }
            assert_eq!(consumed, body.len());
        }
    }

    #[test]
    fn invalid_chunked_bodies_are_refused() {
        let table: &[&[u8]] = &[
            b"\r\n",
            b"x\r\n",
            b"-1\r\n",
            b" 5\r\nhello\r\n",
            b"5 \r\nhello\r\n",
            b"5\nhello\r\n",
            b"5\r\nhelloXX",
            b"5\r\nhello\n0\r\n\r\n",
            b"11111111111111111\r\n",
            b"0\r\nbad\x00trailer\r\n\r\n",
            // Trailer lines are field lines: a token, a colon, a value.
            b"0\r\nno-colon\r\n\r\n",
            b"0\r\n: no-name\r\n\r\n",
            b"0\r\n folded: x\r\n\r\n",
            b"0\r\nx: 1\r\n\tfolded\r\n\r\n",
            b"0\r\nbad name: x\r\n\r\n",
            b"0\r\nbad(name): x\r\n\r\n",
            b"0\r\nx: a\x7fb\r\n\r\n",
            b"0\r\n\rX",
            b"5;a\nb\r\n",
        ];
        for body in table {
            assert!(scan_all(body).is_err(), "{:?}", String::from_utf8_lossy(body));
        }
    }

    #[test]
    fn collects_trailer_fields_across_reads() {
        let body = b"3\r\nabc\r\n0\r\ngrpc-status: 0\r\ngrpc-message:  a b\t\r\nx-empty:\r\n\r\n";
        let mut s = ChunkedScanner::collecting_trailers();
        for b in body.iter() {
            s.scan(std::slice::from_ref(b)).expect("valid");
        }
        assert!(s.is_done());
        let got: Vec<(&[u8], &[u8])> = s.trailers().collect();
        assert_eq!(got, [(&b"grpc-status"[..], &b"0"[..]), (b"grpc-message", b"a b"), (b"x-empty", b"")]);
        // A plain scanner keeps nothing.
        let mut plain = ChunkedScanner::new();
        plain.scan(body).expect("valid");
        assert_eq!(plain.trailers().count(), 0);
    }

    #[test]
    fn counts_payload_bytes() {
        let mut s = ChunkedScanner::new();
        s.scan(b"5\r\nhello\r\n3\r\nabc\r\n0\r\n\r\n").expect("valid");
        assert_eq!(s.data_bytes(), 8);
    }
}
