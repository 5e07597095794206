//! Tests of the access log: golden lines in both formats, the writer thread
//! (flush on shutdown, reopen after rename), and dropping when full.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, UNIX_EPOCH};

use super::*;
use crate::metrics::{Timings, Upstream};

fn record(target: &'static [u8]) -> Record<'static> {
    Record {
        service: "web",
        client: "192.0.2.7:40000".parse().expect("addr"),
        method: b"GET",
        target,
        version: "HTTP/1.1",
        host: Some(b"example.test"),
        status: 200,
        bytes_in: 78,
        bytes_out: 2326,
        body_bytes_out: 2048,
        streamed: (0, 0),
        upstream: Some(Upstream { pool: "main", server: "a", addr: "127.0.0.1:9001".parse().expect("addr") }),
        timings: Timings { head_us: 12, connect_us: None, response_us: Some(850), total_us: 1020 },
        reason: None,
        side: None,
        user_agent: Some(b"curl/8.5"),
        referer: None,
        // 2000-10-10T13:55:36.007Z
        start: UNIX_EPOCH + Duration::from_millis(971_186_136_007),
        cache: None,
        grpc_status: None,
        trace_id: None,
    }
}

fn failed() -> Record<'static> {
    Record {
        client: "[2001:db8::1]:5000".parse::<SocketAddr>().expect("addr"),
        method: b"POST",
        version: "HTTP/1.0",
        host: None,
        status: 502,
        bytes_in: 10,
        bytes_out: 0,
        body_bytes_out: 0,
        upstream: None,
        timings: Timings { head_us: 3, connect_us: Some(40), response_us: None, total_us: 45 },
        reason: Some("server connect failed"),
        side: Some("server"),
        user_agent: Some(b"evil \"agent\"\n\xff"),
        referer: Some(b"http://r.test/"),
        ..record(b"/up?x=\"1\"")
    }
}

fn line(format: LogFormat, r: &Record) -> String {
    let mut out = Vec::new();
    let mut clock = Clock::new();
    match format {
        LogFormat::Json => format::json(&mut out, r, &mut clock),
        LogFormat::Combined => format::combined(&mut out, r, &mut clock),
    }
    String::from_utf8(out).expect("lines are UTF-8")
}

#[test]
fn json_lines_are_golden_and_parse() {
    let ok = line(LogFormat::Json, &record(b"/index.html?a=1&b=2"));
    assert_eq!(
        ok,
        "{\"time\":\"2000-10-10T13:55:36.007Z\",\"service\":\"web\",\"client\":\"192.0.2.7:40000\",\
         \"method\":\"GET\",\"uri\":\"/index.html?a=1&b=2\",\"version\":\"HTTP/1.1\",\"host\":\"example.test\",\
         \"status\":200,\"bytes_in\":78,\"bytes_out\":2326,\"body_bytes_out\":2048,\"pool\":\"main\",\"server\":\"a\",\
         \"server_addr\":\"127.0.0.1:9001\",\"head_us\":12,\"connect_us\":null,\"response_us\":850,\
         \"total_us\":1020,\"reason\":null,\"side\":null,\"user_agent\":\"curl/8.5\",\"referer\":null}\n"
    );
    let bad = line(LogFormat::Json, &failed());
    assert!(bad.ends_with('\n') && bad.matches('\n').count() == 1, "one line: {bad}");
    let v: serde_json::Value = serde_json::from_str(&bad).expect("valid JSON");
    assert_eq!(v["client"], "[2001:db8::1]:5000");
    assert_eq!(v["uri"], "/up?x=\"1\"");
    assert_eq!(v["user_agent"], "evil \"agent\"\n\u{ff}");
    assert_eq!(v["host"], serde_json::Value::Null);
    assert_eq!((v["pool"].is_null(), v["server_addr"].is_null()), (true, true));
    assert_eq!((v["connect_us"].as_u64(), v["response_us"].is_null()), (Some(40), true));
    assert_eq!((v["reason"].as_str(), v["side"].as_str()), (Some("server connect failed"), Some("server")));
    assert_eq!(v["status"], 502);
    assert!(v.get("grpc_status").is_none(), "only gRPC answers have one: {bad}");
    let grpc = line(LogFormat::Json, &Record { grpc_status: Some(14), ..record(b"/pkg.Svc/Call") });
    let v: serde_json::Value = serde_json::from_str(&grpc).expect("valid JSON");
    assert_eq!(v["grpc_status"], 14);
}

#[test]
fn trace_id_field_only_with_tracing() {
    let id = [0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36];
    let traced = Record { trace_id: Some(id), ..record(b"/x") };
    let json = line(LogFormat::Json, &traced);
    let v: serde_json::Value = serde_json::from_str(&json).expect("valid JSON");
    assert_eq!(v["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736");
    assert!(line(LogFormat::Combined, &traced).ends_with(" reason=- trace_id=4bf92f3577b34da6a3ce929d0e0e4736\n"));
    assert!(!line(LogFormat::Json, &record(b"/x")).contains("trace_id"));
    assert!(!line(LogFormat::Combined, &record(b"/x")).contains("trace_id"));
}

#[test]
fn combined_lines_are_golden() {
    assert_eq!(
        line(LogFormat::Combined, &record(b"/x")),
        "192.0.2.7 - - [10/Oct/2000:13:55:36 +0000] \"GET /x HTTP/1.1\" 200 2048 \"-\" \"curl/8.5\" \
         service=web server=main/a total_us=1020 reason=-\n"
    );
    assert_eq!(
        line(LogFormat::Combined, &failed()),
        "2001:db8::1 - - [10/Oct/2000:13:55:36 +0000] \"POST /up?x=\\x221\\x22 HTTP/1.0\" 502 0 \
         \"http://r.test/\" \"evil \\x22agent\\x22\\x0A\\xFF\" service=web server=- total_us=45 \
         reason=\"server connect failed\"\n"
    );
    let unparsed = Record { method: b"", target: b"", status: 400, ..record(b"") };
    assert!(line(LogFormat::Combined, &unparsed).contains("] \"-\" 400 "));
    // A request line that did not parse, as received.
    let garbled = Record { method: b"GET", target: b"/a\x01", version: "-", status: 400, ..record(b"") };
    assert!(line(LogFormat::Combined, &garbled).contains("] \"GET /a\\x01\" 400 2048 "));
    let alone = Record { method: b"HELLO", target: b"", version: "-", status: 400, ..record(b"") };
    assert!(line(LogFormat::Combined, &alone).contains("] \"HELLO\" 400 "));
}

/// A fresh folder under the system temp folder, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("sy-access-log-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn file_config(path: &Path, format: LogFormat) -> switchyard_config::AccessLog {
    switchyard_config::AccessLog { target: LogTarget::File(path.to_path_buf()), format }
}

fn lines_of(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path).expect("log file").lines().map(String::from).collect()
}

#[test]
fn shutdown_writes_everything_and_later_lines_are_dropped() {
    let dir = TempDir::new("shutdown");
    let path = dir.0.join("access.log");
    std::fs::write(&path, "existing\n").expect("seed file");
    // An interval longer than the test: only shutdown can write the lines.
    let options = Options { flush_interval: Duration::from_secs(3600), ..Options::default() };
    let log = AccessLog::open_with(&file_config(&path, LogFormat::Json), options).expect("open");
    let writers: Vec<LineWriter> = (0..3).map(|_| log.line_writer()).collect();
    for i in 0..30 {
        writers[i % 3].log(&record(b"/s"));
    }
    log.shutdown();
    let lines = lines_of(&path);
    assert_eq!(lines.len(), 31, "appended to the existing file");
    assert!(lines[1..].iter().all(|l| l.starts_with("{\"time\":\"2000-10-10T13:55:36.007Z\"")));
    assert_eq!((log.written(), log.dropped()), (30, 0));
    writers[0].log(&record(b"/late"));
    assert_eq!(log.dropped(), 1);
    log.shutdown();
}

#[test]
fn reopen_after_rename_writes_to_the_new_file() {
    let dir = TempDir::new("reopen");
    let path = dir.0.join("access.log");
    let rotated = dir.0.join("access.log.1");
    let log = AccessLog::open(&file_config(&path, LogFormat::Combined)).expect("open");
    let w = log.line_writer();
    w.log(&record(b"/before"));
    log.flush();
    std::fs::rename(&path, &rotated).expect("rename");
    log.reopen();
    w.log(&record(b"/after"));
    drop(w);
    log.shutdown();
    let (old, new) = (lines_of(&rotated), lines_of(&path));
    assert_eq!(old.len(), 1);
    assert!(old[0].contains("\"GET /before HTTP/1.1\""), "{old:?}");
    assert_eq!(new.len(), 1);
    assert!(new[0].contains("\"GET /after HTTP/1.1\""), "{new:?}");
}

#[test]
fn lines_are_written_without_shutdown_within_the_interval() {
    let dir = TempDir::new("interval");
    let path = dir.0.join("access.log");
    let options = Options { flush_interval: Duration::from_millis(10), ..Options::default() };
    let log = AccessLog::open_with(&file_config(&path, LogFormat::Json), options).expect("open");
    let w = log.line_writer();
    w.log(&record(b"/i"));
    // Bounded wait, no timing assertion: the writer gets there on its own.
    for _ in 0..500 {
        if log.written() == 1 {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(lines_of(&path).len(), 1);
}

/// A sink that blocks in its first write until released: a stuck disk.
struct Gate {
    entered: Option<mpsc::Sender<()>>,
    release: mpsc::Receiver<()>,
    out: Arc<Mutex<Vec<u8>>>,
}

impl Write for Gate {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if let Some(entered) = self.entered.take() {
            let _ = entered.send(());
            let _ = self.release.recv_timeout(Duration::from_secs(10));
        }
        lock(&self.out).extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_full_queue_drops_lines_instead_of_blocking() {
    let one = line(LogFormat::Json, &record(b"/q")).len();
    let (entered_tx, entered) = mpsc::channel();
    let (release, release_rx) = mpsc::channel();
    let out = Arc::new(Mutex::new(Vec::new()));
    let gate = Gate { entered: Some(entered_tx), release: release_rx, out: out.clone() };
    // Room for three lines per worker.
    let options = Options { capacity: 3 * one + one / 2, flush_interval: Duration::from_millis(5) };
    let log = AccessLog::start(Sink::Custom(Box::new(gate)), LogFormat::Json, options).expect("start");
    let w = log.line_writer();
    w.log(&record(b"/q"));
    entered.recv_timeout(Duration::from_secs(10)).expect("the writer took the first line");
    // The writer is stuck in its write: these fill the queue, then drop.
    for _ in 0..100 {
        w.log(&record(b"/q"));
    }
    assert_eq!(log.dropped(), 97);
    release.send(()).expect("release the writer");
    log.shutdown();
    assert_eq!((log.written(), log.dropped()), (4, 97));
    assert_eq!(lock(&out).iter().filter(|b| **b == b'\n').count(), 4);
}

#[test]
fn a_dropped_line_writer_hands_over_its_lines() {
    let out = Arc::new(Mutex::new(Vec::new()));
    let (_tx, rx) = mpsc::channel();
    let sink = Gate { entered: None, release: rx, out: out.clone() };
    let options = Options { flush_interval: Duration::from_secs(3600), ..Options::default() };
    let log = AccessLog::start(Sink::Custom(Box::new(sink)), LogFormat::Combined, options).expect("start");
    let w = log.line_writer();
    {
        // A contended hand-over leaves the line in the worker's scratch.
        let _writer_swapping = lock(&w.slot.pending);
        w.log(&record(b"/kept"));
    }
    assert!(lock(&w.slot.pending).buf.is_empty());
    drop(w);
    log.shutdown();
    assert_eq!(log.written(), 1);
    assert!(String::from_utf8_lossy(&lock(&out)).contains("GET /kept "));
}

#[test]
fn formatting_reuses_the_scratch_buffer() {
    let log = AccessLog::start(
        Sink::Custom(Box::new(io::sink())),
        LogFormat::Json,
        Options { flush_interval: Duration::from_secs(3600), ..Options::default() },
    )
    .expect("start");
    let w = log.line_writer();
    w.log(&failed());
    let capacity = w.local.borrow().scratch.capacity();
    for _ in 0..1000 {
        w.log(&failed());
    }
    // A line stays in the scratch buffer when the writer thread holds the
    // pending buffer at that moment (`hand_over`), so the buffer may have
    // grown to hold a few lines, never with the number of lines written.
    let after = w.local.borrow().scratch.capacity();
    assert!(after <= 4 * capacity, "no growth once sized: {capacity} -> {after}");
}
