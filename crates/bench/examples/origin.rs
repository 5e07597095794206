//! Runs the origin simulator, for measuring it on its own:
//! `cargo run --release -p switchyard-bench --example origin -- [ADDR] [NAME] [THREADS]`
//! (defaults `127.0.0.1:19001 origin 1`). Stops on Ctrl-C or SIGTERM.

use std::net::SocketAddr;
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let addr = args.next().unwrap_or_else(|| "127.0.0.1:19001".to_owned());
    let name = args.next().unwrap_or_else(|| "origin".to_owned());
    let threads = args.next().unwrap_or_else(|| "1".to_owned());
    let (Ok(addr), Ok(threads)) = (addr.parse::<SocketAddr>(), threads.parse::<usize>()) else {
        eprintln!("usage: origin [ADDR] [NAME] [THREADS]");
        return ExitCode::from(2);
    };
    eprintln!("origin {name:?} on http://{addr}/ with {threads} thread(s)");
    match switchyard_bench::origin::run(addr, &name, threads, None) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("origin: {error}");
            ExitCode::FAILURE
        }
    }
}
