//! The control-frame flood defence's window. SETTINGS and PING frames (not
//! their acknowledgements) each oblige the server to answer, and frames that
//! carry nothing (DATA without payload or END_STREAM, empty CONTINUATION)
//! cost work for nothing: the codec counts both
//! ([`switchyard_http::http2::server::Counts`]), and beyond
//! `http2.max_control_frames` of them within [`WINDOW`] the connection ends
//! at once: no GOAWAY, since a flooding client may not read one and writing
//! it could wait forever. HTTP/3 counts its control frames in the same window.

use std::time::Duration;

/// The window within which control frames are counted.
pub const WINDOW: Duration = Duration::from_secs(10);
