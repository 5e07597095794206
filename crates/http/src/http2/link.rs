//! What both ends of an HTTP/2 connection keep and do alike ([`Link`]): the
//! output buffer, the HPACK encoder, the connection's windows, the peer's
//! settings that shape what we send, and the connection-level frames whose
//! rules do not depend on the end (PING, SETTINGS' common parameters,
//! WINDOW_UPDATE, DATA framing). [`super::server::Server`] and
//! [`super::client::Client`] each hold one and add their end's rules
//! (stream states, which settings apply, who may open streams).

use std::collections::VecDeque;
use std::io::IoSlice;

use bytes::{Buf, Bytes};

use super::frame::{self, code, flag, kind, setting, Head, MAX_WINDOW, MIN_MAX_FRAME_SIZE};
use super::hpack::Encoder;

/// The window both sides start with (RFC 9113 6.9.2).
pub(super) const DEFAULT_WINDOW: i64 = 65_535;
/// The smallest DATA payload queued by reference rather than copied: below
/// it, a copy costs less than a slice of its own in the write.
pub const SPLICE_MIN: usize = 4096;
/// Most CONTINUATION frames after one HEADERS frame.
pub(super) const MAX_CONTINUATIONS: usize = 64;

/// A connection error: GOAWAY with `code` is queued (when we detected it),
/// the connection is done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnError {
    /// The GOAWAY's error code.
    pub code: u32,
    /// What was wrong, for the log (and the GOAWAY's debug data).
    pub reason: &'static str,
}

/// The connection-level state of one end.
pub(super) struct Link {
    /// Frames queued for the peer: headers, control frames, small payloads.
    pub(super) out: Vec<u8>,
    /// Bytes of `out` already written out by the driver.
    out_at: usize,
    /// Large payloads queued by reference, not copied into `out`, in order:
    /// each goes out after the bytes of `out` before its offset.
    spliced: VecDeque<(usize, Bytes)>,
    /// The bytes of `spliced` not yet written.
    spliced_len: usize,
    pub(super) encoder: Encoder,
    /// What the peer may still send on the connection.
    pub(super) recv_window: i64,
    /// What we may still send on the connection.
    pub(super) send_window: i64,
    /// Connection bytes released and not yet given back.
    released: u32,
    /// The peer's `SETTINGS_INITIAL_WINDOW_SIZE`: each stream's send window to start with.
    pub(super) peer_window: i64,
    /// The peer's `SETTINGS_MAX_FRAME_SIZE`.
    pub(super) peer_max_frame: usize,
    /// A send window grew (or a stream ended) since the driver last asked.
    pub(super) window_opened: bool,
    /// Our stream and connection receive windows, as advertised.
    stream_window: u32,
    connection_window: u32,
}

impl Link {
    /// A connection's state before anything was sent: `stream_window` and
    /// `connection_window` are the receive windows this end will advertise.
    pub(super) fn new(stream_window: u32, connection_window: u32) -> Link {
        Link {
            out: Vec::with_capacity(1024),
            out_at: 0,
            spliced: VecDeque::new(),
            spliced_len: 0,
            encoder: Encoder::default(),
            recv_window: DEFAULT_WINDOW,
            send_window: DEFAULT_WINDOW,
            released: 0,
            peer_window: DEFAULT_WINDOW,
            peer_max_frame: MIN_MAX_FRAME_SIZE as usize,
            window_opened: false,
            stream_window,
            connection_window,
        }
    }

    /// Queues our SETTINGS (`settings`) and the growth of the connection's
    /// receive window from its default to the configured one.
    pub(super) fn greet(&mut self, settings: &[(u16, u32)]) {
        frame::write_settings(&mut self.out, settings);
        let extra = i64::from(self.connection_window.min(MAX_WINDOW as u32)) - DEFAULT_WINDOW;
        if extra > 0 {
            frame::write_window_update(&mut self.out, 0, extra as u32);
            self.recv_window += extra;
        }
    }

    // ---- output -------------------------------------------------------

    /// The next run of queued bytes not yet written out: empty only when
    /// nothing is queued (the rest follows once it is [`Link::written`]).
    pub(super) fn output(&self) -> &[u8] {
        match self.spliced.front() {
            Some((at, _)) if self.out_at < *at => &self.out[self.out_at..*at],
            Some((_, payload)) => payload,
            None => &self.out[self.out_at..],
        }
    }

    /// Fills `dst` with the runs of queued bytes in order, as many as fit;
    /// returns how many slices it filled.
    pub(super) fn output_vectored<'a>(&'a self, dst: &mut [IoSlice<'a>]) -> usize {
        let mut n = 0;
        let mut at = self.out_at;
        let mut push = |slice: &'a [u8], n: &mut usize| {
            if !slice.is_empty() && *n < dst.len() {
                dst[*n] = IoSlice::new(slice);
                *n += 1;
            }
        };
        for (offset, payload) in &self.spliced {
            push(&self.out[at..*offset], &mut n);
            push(payload, &mut n);
            at = *offset;
        }
        push(&self.out[at..], &mut n);
        n
    }

    /// Bytes queued and not yet written out.
    pub(super) fn output_len(&self) -> usize {
        self.out.len() - self.out_at + self.spliced_len
    }

    /// The driver wrote `n` bytes of the output, in order.
    pub(super) fn written(&mut self, mut n: usize) {
        while n > 0 {
            let end = self.spliced.front().map_or(self.out.len(), |(at, _)| *at);
            if self.out_at < end {
                let k = n.min(end - self.out_at);
                self.out_at += k;
                n -= k;
                continue;
            }
            let Some((_, payload)) = self.spliced.front_mut() else { break };
            let k = n.min(payload.len());
            payload.advance(k);
            self.spliced_len -= k;
            n -= k;
            if payload.is_empty() {
                self.spliced.pop_front();
            }
        }
        if self.out_at == self.out.len() && self.spliced.is_empty() {
            self.out.clear();
            self.out_at = 0;
        }
    }

    /// Frames `data` on `stream` in pieces of the peer's largest frame, the
    /// last with END_STREAM when `end_stream`, and takes it off both send
    /// windows (`stream_window` is the stream's). The caller checked that
    /// the windows allow it.
    pub(super) fn write_data(&mut self, stream: u32, data: &[u8], end_stream: bool, stream_window: &mut i64) {
        let mut sent = 0;
        loop {
            let piece = (data.len() - sent).min(self.peer_max_frame);
            let last = sent + piece == data.len();
            frame::write_data(&mut self.out, stream, &data[sent..sent + piece], last && end_stream);
            sent += piece;
            if last {
                break;
            }
        }
        *stream_window -= data.len() as i64;
        self.send_window -= data.len() as i64;
    }

    /// [`Link::write_data`] for a payload the caller shares: one of at least
    /// [`SPLICE_MIN`] bytes is queued by reference, each frame's payload a
    /// slice of `data`, never copied; a smaller one is copied.
    pub(super) fn write_data_shared(&mut self, stream: u32, data: &Bytes, end_stream: bool, stream_window: &mut i64) {
        if data.len() < SPLICE_MIN {
            return self.write_data(stream, data, end_stream, stream_window);
        }
        let mut sent = 0;
        while sent < data.len() {
            let piece = (data.len() - sent).min(self.peer_max_frame);
            let last = sent + piece == data.len();
            frame::write_head(
                &mut self.out,
                piece,
                kind::DATA,
                if last && end_stream { flag::END_STREAM } else { 0 },
                stream,
            );
            self.spliced.push_back((self.out.len(), data.slice(sent..sent + piece)));
            self.spliced_len += piece;
            sent += piece;
        }
        *stream_window -= data.len() as i64;
        self.send_window -= data.len() as i64;
    }

    // ---- flow control of what the peer sends ----------------------------

    /// Connection room back for `n` bytes no stream holds (or that a stream
    /// released), in WINDOW_UPDATEs batched to half the window.
    pub(super) fn give_back(&mut self, n: usize) {
        self.give_back_n(u32::try_from(n).unwrap_or(u32::MAX));
    }

    /// [`Link::give_back`] for a count already made a `u32`.
    pub(super) fn give_back_n(&mut self, n: u32) {
        self.released = self.released.saturating_add(n);
        if self.released >= self.connection_window / 2 {
            frame::write_window_update(&mut self.out, 0, self.released);
            self.recv_window += i64::from(self.released);
            self.released = 0;
        }
    }

    /// The driver released `n` bytes of `stream` (still open for receiving),
    /// whose not yet given back count is `released` and receive window
    /// `recv_window`: a WINDOW_UPDATE once half a window is released.
    pub(super) fn stream_released(&mut self, stream: u32, n: u32, released: &mut u32, recv_window: &mut i64) {
        *released = released.saturating_add(n);
        if *released >= self.stream_window / 2 {
            frame::write_window_update(&mut self.out, stream, *released);
            *recv_window += i64::from(*released);
            *released = 0;
        }
    }

    // ---- connection-level frames ------------------------------------------

    /// A DATA frame's checks that need no stream: not on stream 0, its
    /// padding well formed, its whole payload (padding included) within the
    /// connection's receive window, which it then takes. Returns the data
    /// without the padding.
    pub(super) fn data<'p>(&mut self, head: Head, payload: &'p [u8]) -> Result<&'p [u8], ConnError> {
        if head.stream == 0 {
            return Err(err(code::PROTOCOL_ERROR, "DATA on stream 0"));
        }
        let data = unpad(head, payload)?;
        let len = payload.len() as i64;
        if len > self.recv_window {
            return Err(err(code::FLOW_CONTROL_ERROR, "DATA beyond the connection window"));
        }
        self.recv_window -= len;
        Ok(data)
    }

    /// A PING: answered unless it is an acknowledgement. Returns whether it
    /// was answered (one more control frame for the flood defences).
    pub(super) fn ping(&mut self, head: Head, payload: &[u8]) -> Result<bool, ConnError> {
        if head.stream != 0 {
            return Err(err(code::PROTOCOL_ERROR, "PING on a stream"));
        }
        if payload.len() != 8 {
            return Err(err(code::FRAME_SIZE_ERROR, "PING of the wrong size"));
        }
        if head.has(flag::ACK) {
            return Ok(false);
        }
        frame::write_head(&mut self.out, 8, kind::PING, flag::ACK, 0);
        self.out.extend_from_slice(payload);
        Ok(true)
    }

    /// A SETTINGS frame: the parameters whose meaning is the same for both
    /// ends are applied here (header table size, initial window size, moving
    /// every stream's send window by `shift`, largest frame size); the others
    /// go to `own`, in order. An acknowledgement is checked and otherwise
    /// ignored; a new SETTINGS is acknowledged. Returns whether it was a new
    /// one (not an acknowledgement).
    pub(super) fn settings(
        &mut self,
        head: Head,
        payload: &[u8],
        mut shift: impl FnMut(i64) -> Result<(), ConnError>,
        mut own: impl FnMut(u16, u32) -> Result<(), ConnError>,
    ) -> Result<bool, ConnError> {
        if head.stream != 0 {
            return Err(err(code::PROTOCOL_ERROR, "SETTINGS on a stream"));
        }
        if head.has(flag::ACK) {
            if !payload.is_empty() {
                return Err(err(code::FRAME_SIZE_ERROR, "SETTINGS ACK with a payload"));
            }
            return Ok(false);
        }
        if !payload.len().is_multiple_of(6) {
            return Err(err(code::FRAME_SIZE_ERROR, "SETTINGS of the wrong size"));
        }
        for s in payload.chunks_exact(6) {
            let id = u16::from_be_bytes([s[0], s[1]]);
            let value = u32::from_be_bytes([s[2], s[3], s[4], s[5]]);
            match id {
                setting::HEADER_TABLE_SIZE => self.encoder.peer_table_size(value as usize),
                setting::INITIAL_WINDOW_SIZE => self.peer_initial_window(value, &mut shift)?,
                setting::MAX_FRAME_SIZE => {
                    if !(MIN_MAX_FRAME_SIZE..=frame::MAX_MAX_FRAME_SIZE).contains(&value) {
                        return Err(err(code::PROTOCOL_ERROR, "SETTINGS_MAX_FRAME_SIZE out of range"));
                    }
                    self.peer_max_frame = value as usize;
                }
                _ => own(id, value)?,
            }
        }
        frame::write_head(&mut self.out, 0, kind::SETTINGS, flag::ACK, 0);
        Ok(true)
    }

    /// A new `SETTINGS_INITIAL_WINDOW_SIZE`: every stream's send window
    /// moves by the difference (RFC 9113 6.9.2), through `shift`.
    fn peer_initial_window(
        &mut self,
        value: u32,
        shift: &mut impl FnMut(i64) -> Result<(), ConnError>,
    ) -> Result<(), ConnError> {
        let value = i64::from(value);
        if value > MAX_WINDOW {
            return Err(err(code::FLOW_CONTROL_ERROR, "SETTINGS_INITIAL_WINDOW_SIZE above 2^31-1"));
        }
        let delta = value - self.peer_window;
        self.peer_window = value;
        shift(delta)?;
        if delta > 0 {
            self.window_opened = true;
        }
        Ok(())
    }

    /// A WINDOW_UPDATE: the connection's is applied here; a stream's
    /// increment is returned for the caller, which knows its streams, to
    /// give to [`Link::grow`].
    pub(super) fn window_update(&mut self, head: Head, payload: &[u8]) -> Result<Option<i64>, ConnError> {
        let Ok(b) = <[u8; 4]>::try_from(payload) else {
            return Err(err(code::FRAME_SIZE_ERROR, "WINDOW_UPDATE of the wrong size"));
        };
        let inc = i64::from(u32::from_be_bytes(b) & 0x7fff_ffff);
        if head.stream != 0 {
            return Ok(Some(inc));
        }
        if inc == 0 {
            return Err(err(code::PROTOCOL_ERROR, "WINDOW_UPDATE of 0"));
        }
        self.send_window += inc;
        if self.send_window > MAX_WINDOW {
            return Err(err(code::FLOW_CONTROL_ERROR, "connection window above 2^31-1"));
        }
        self.window_opened = true;
        Ok(None)
    }

    /// A stream's WINDOW_UPDATE of `inc` applied to its send `window`; the
    /// stream error's code when it is 0 or takes the window past 2^31 − 1.
    pub(super) fn grow(&mut self, window: &mut i64, inc: i64) -> Result<(), u32> {
        if inc == 0 {
            return Err(code::PROTOCOL_ERROR);
        }
        *window += inc;
        if *window > MAX_WINDOW {
            return Err(code::FLOW_CONTROL_ERROR);
        }
        self.window_opened = true;
        Ok(())
    }
}

/// Moves each of `windows` by `delta` (a new initial window size); a
/// connection error when one goes past 2^31 − 1.
pub(super) fn shift_windows<'a>(windows: impl Iterator<Item = &'a mut i64>, delta: i64) -> Result<(), ConnError> {
    for w in windows {
        *w += delta;
        if *w > MAX_WINDOW {
            return Err(err(code::FLOW_CONTROL_ERROR, "a stream window above 2^31-1"));
        }
    }
    Ok(())
}

/// Keeps `stream` among the last `memory` in `list`.
pub(super) fn remember(list: &mut VecDeque<u32>, stream: u32, memory: usize) {
    if list.len() == memory {
        list.pop_front();
    }
    list.push_back(stream);
}

/// A connection error with `code`, for `reason`.
pub(super) fn err(code: u32, reason: &'static str) -> ConnError {
    ConnError { code, reason }
}

/// The payload of a DATA or HEADERS frame without its padding.
pub(super) fn unpad(head: Head, payload: &[u8]) -> Result<&[u8], ConnError> {
    if !head.has(flag::PADDED) {
        return Ok(payload);
    }
    let Some((&pad, rest)) = payload.split_first() else {
        return Err(err(code::FRAME_SIZE_ERROR, "padded frame without a pad length"));
    };
    let keep = rest.len().checked_sub(usize::from(pad)).ok_or(err(code::PROTOCOL_ERROR, "padding too long"))?;
    Ok(&rest[..keep])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(kind: u8, flags: u8, stream: u32, len: usize) -> Head {
        Head { len, kind, flags, stream }
    }

    fn settings(pairs: &[(u16, u32)]) -> Vec<u8> {
        pairs.iter().flat_map(|&(id, v)| id.to_be_bytes().into_iter().chain(v.to_be_bytes())).collect()
    }

    #[test]
    fn settings_apply_the_common_parameters_and_pass_the_rest_on() {
        let mut link = Link::new(65_535, 65_535);
        let mut windows = [100_i64, 200];
        let mut own = Vec::new();
        let payload = settings(&[(setting::INITIAL_WINDOW_SIZE, 65_635), (setting::MAX_FRAME_SIZE, 32_768), (0x99, 7)]);
        let new = link.settings(
            head(kind::SETTINGS, 0, 0, payload.len()),
            &payload,
            |d| shift_windows(windows.iter_mut(), d),
            |id, v| {
                own.push((id, v));
                Ok(())
            },
        );
        assert_eq!(new, Ok(true));
        assert_eq!(windows, [200, 300], "every stream moves by the difference");
        assert_eq!((link.peer_window, link.peer_max_frame), (65_635, 32_768));
        assert!(link.window_opened);
        assert_eq!(own, [(0x99, 7)], "only what the end decides");
        assert_eq!(Head::read(link.output()).map(|h| (h.kind, h.flags)), Some((kind::SETTINGS, flag::ACK)));

        let too_small = settings(&[(setting::MAX_FRAME_SIZE, 100)]);
        let e = link.settings(head(kind::SETTINGS, 0, 0, 6), &too_small, |_| Ok(()), |_, _| Ok(()));
        assert_eq!(e.map_err(|e| e.code), Err(code::PROTOCOL_ERROR));
        let overflow = settings(&[(setting::INITIAL_WINDOW_SIZE, MAX_WINDOW as u32)]);
        let mut big = [MAX_WINDOW - 10];
        let e = link.settings(
            head(kind::SETTINGS, 0, 0, 6),
            &overflow,
            |d| shift_windows(big.iter_mut(), d),
            |_, _| Ok(()),
        );
        assert_eq!(e.map_err(|e| e.code), Err(code::FLOW_CONTROL_ERROR), "a stream window past 2^31-1");
        let ack = link.settings(head(kind::SETTINGS, flag::ACK, 0, 0), &[], |_| Ok(()), |_, _| Ok(()));
        assert_eq!(ack, Ok(false));
    }

    #[test]
    fn pings_are_answered_once_and_window_updates_checked() {
        let mut link = Link::new(65_535, 65_535);
        assert_eq!(link.ping(head(kind::PING, 0, 0, 8), b"12345678"), Ok(true));
        assert_eq!(link.output().len(), 9 + 8);
        assert_eq!(link.ping(head(kind::PING, flag::ACK, 0, 8), b"12345678"), Ok(false));
        assert_eq!(link.ping(head(kind::PING, 0, 1, 8), b"12345678").map_err(|e| e.code), Err(code::PROTOCOL_ERROR));
        assert_eq!(link.ping(head(kind::PING, 0, 0, 4), b"1234").map_err(|e| e.code), Err(code::FRAME_SIZE_ERROR));

        let wu = |n: u32| n.to_be_bytes();
        assert_eq!(link.window_update(head(kind::WINDOW_UPDATE, 0, 3, 4), &wu(5)), Ok(Some(5)), "a stream's: returned");
        assert_eq!(link.window_update(head(kind::WINDOW_UPDATE, 0, 0, 4), &wu(5)), Ok(None));
        assert_eq!(link.send_window, DEFAULT_WINDOW + 5);
        let e = link.window_update(head(kind::WINDOW_UPDATE, 0, 0, 4), &wu(0x7fff_ffff));
        assert_eq!(e.map_err(|e| e.code), Err(code::FLOW_CONTROL_ERROR));
        let mut window = 10;
        assert_eq!(link.grow(&mut window, 0), Err(code::PROTOCOL_ERROR));
        assert_eq!(link.grow(&mut window, MAX_WINDOW), Err(code::FLOW_CONTROL_ERROR));
    }

    #[test]
    fn data_takes_its_padding_from_the_connection_window_and_room_comes_back_by_halves() {
        let mut link = Link::new(1_000, 65_535);
        let padded = [3, b'a', b'b', 0, 0, 0];
        let data = link.data(head(kind::DATA, flag::PADDED, 1, padded.len()), &padded).map(<[u8]>::to_vec);
        assert_eq!(data, Ok(b"ab".to_vec()));
        assert_eq!(link.recv_window, DEFAULT_WINDOW - 6, "padding counts against the window");
        let bad = [9, b'a'];
        assert_eq!(
            link.data(head(kind::DATA, flag::PADDED, 1, 2), &bad).map_err(|e| e.code),
            Err(code::PROTOCOL_ERROR)
        );
        assert_eq!(link.data(head(kind::DATA, 0, 0, 1), b"x").map_err(|e| e.code), Err(code::PROTOCOL_ERROR));

        let (mut released, mut window) = (0, 1_000);
        link.stream_released(1, 400, &mut released, &mut window);
        assert!(link.output().is_empty(), "below half a window: nothing yet");
        link.stream_released(1, 200, &mut released, &mut window);
        assert_eq!((released, window), (0, 1_600));
        assert_eq!(Head::read(link.output()).map(|h| (h.kind, h.stream)), Some((kind::WINDOW_UPDATE, 1)));
    }
}
