//! Syslog output against Debian's rsyslogd (a child process with its own
//! configuration, a private Unix socket and a loopback UDP port): access log
//! lines over UDP and the process's events over the Unix socket arrive as
//! well-formed RFC 5424 messages, as rsyslog's own parser reads them.

use crate::common;

use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use common::*;

/// One message as rsyslog parsed it (see the template in [`Rsyslog::start`]).
#[derive(Debug)]
struct Received {
    version: String,
    pri: u16,
    app: String,
    procid: String,
    msgid: String,
    msg: String,
}

/// A running rsyslogd, killed by PID when dropped.
struct Rsyslog {
    child: Child,
    dir: PathBuf,
    udp: SocketAddr,
}

impl Rsyslog {
    fn start() -> Rsyslog {
        let dir = temp_dir("rsyslog");
        let udp = {
            let probe = UdpSocket::bind("127.0.0.1:0").expect("bind");
            probe.local_addr().expect("addr")
        };
        let d = dir.display();
        let config = format!(
            "global(workDirectory=\"{d}\")\n\
             module(load=\"imudp\")\n\
             input(type=\"imudp\" address=\"127.0.0.1\" port=\"{}\")\n\
             module(load=\"imuxsock\" SysSock.Use=\"off\")\n\
             input(type=\"imuxsock\" Socket=\"{d}/log.sock\" UseSpecialParser=\"off\" ParseHostname=\"on\")\n\
             template(name=\"fields\" type=\"string\" \
             string=\"%protocol-version%|%pri%|%app-name%|%procid%|%msgid%|%structured-data%|%msg%\\n\")\n\
             *.* action(type=\"omfile\" file=\"{d}/received.log\" template=\"fields\")\n",
            udp.port()
        );
        std::fs::write(dir.join("rsyslog.conf"), config).expect("write rsyslog.conf");
        let child = Command::new("rsyslogd")
            .args(["-n", "-f"])
            .arg(dir.join("rsyslog.conf"))
            .arg("-i")
            .arg(dir.join("rsyslogd.pid"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("no rsyslogd ({e}): apt-get install -y rsyslog (scripts/test.sh does)"));
        let rsyslog = Rsyslog { child, dir, udp };
        // Ready once a probe over each input comes out.
        let client = UdpSocket::bind("127.0.0.1:0").expect("client");
        let local = std::os::unix::net::UnixDatagram::unbound().expect("unix client");
        wait_for("rsyslogd's inputs", || {
            let _ = client.send_to(b"<14>1 - - probe - probe - udp-ready", rsyslog.udp);
            let _ = local.send_to(b"<14>1 - - probe - probe - unix-ready", rsyslog.socket());
            std::thread::sleep(std::time::Duration::from_millis(100));
            let all = rsyslog.received();
            (all.iter().any(|r| r.msg == "udp-ready") && all.iter().any(|r| r.msg == "unix-ready")).then_some(())
        });
        rsyslog
    }

    fn socket(&self) -> PathBuf {
        self.dir.join("log.sock")
    }

    fn received(&self) -> Vec<Received> {
        let text = std::fs::read_to_string(self.dir.join("received.log")).unwrap_or_default();
        text.lines().filter_map(parse).collect()
    }
}

fn parse(line: &str) -> Option<Received> {
    let mut f = line.splitn(7, '|');
    let version = f.next()?.to_string();
    let pri = f.next()?.parse().ok()?;
    let (app, procid, msgid) = (f.next()?.to_string(), f.next()?.to_string(), f.next()?.to_string());
    let _sd = f.next()?;
    Some(Received { version, pri, app, procid, msgid, msg: f.next()?.trim().to_string() })
}

impl Drop for Rsyslog {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn toml_path(p: &Path) -> String {
    p.display().to_string()
}

#[test]
fn access_lines_and_events_reach_rsyslog_as_rfc5424_messages() {
    let rsyslog = Rsyslog::start();
    let origin = Origin::start("o");
    let listen = proxy_addr();
    let extra = format!(
        "\n[access_log]\nsyslog = \"udp://{}\"\nformat = \"json\"\n\n\
         [event_log]\nsyslog = \"{}\"\nfacility = \"local4\"\n\n\
         [[pool]]\nname = \"dead\"\nservers = [{{ address = \"{}\" }}]\n",
        rsyslog.udp,
        toml_path(&rsyslog.socket()),
        dead_addr()
    );
    let rules = "rules = [ { path_prefix = \"/dead\", pool = \"dead\" } ]";
    let proxy = Proxy::start(&(simple_config(listen, &[origin.addr], rules) + &extra), listen);
    for i in 0..3 {
        assert_eq!(proxy.get(&format!("/page{i}")).status, 200);
    }
    assert_eq!(proxy.get("/dead").status, 502);

    let pid = proxy.pid().to_string();
    let ours = |r: &Received| r.app == "switchyard" && r.procid == pid;
    let access: Vec<Received> = wait_for("four access lines", || {
        let got: Vec<Received> = rsyslog.received().into_iter().filter(|r| ours(r) && r.msgid == "access").collect();
        (got.len() == 4).then_some(got)
    });
    for r in &access {
        // local0 (16) × 8 + informational (6).
        assert_eq!((r.version.as_str(), r.pri), ("1", 134), "{r:?}");
        let line: serde_json::Value = serde_json::from_str(&r.msg).unwrap_or_else(|e| panic!("{e}: {r:?}"));
        assert_eq!(line["service"], "web", "{r:?}");
    }
    assert!(access.iter().any(|r| r.msg.contains("\"uri\":\"/page2\"")), "{access:?}");

    // Events: the start-up at informational, the failed request at warning (local4 = 20).
    let events = wait_for("the failed request's event", || {
        let got: Vec<Received> = rsyslog.received().into_iter().filter(|r| ours(r) && r.msgid == "event").collect();
        got.iter().any(|r| r.pri == 20 * 8 + 4 && r.msg.contains("request failed")).then_some(got)
    });
    assert!(events.iter().all(|r| r.version == "1"), "{events:?}");
    assert!(events.iter().any(|r| r.pri == 20 * 8 + 6), "an informational event: {events:?}");
    let warn = events.iter().find(|r| r.msg.contains("request failed")).expect("found above");
    assert!(warn.msg.contains("connect-failed") || warn.msg.contains("connect failed"), "{warn:?}");
}
