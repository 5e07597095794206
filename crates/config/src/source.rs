//! A pool's `source`: the address its connections to the servers come from.
//!
//! `"client"` is transparent mode (the client's own address, which needs
//! `IP_TRANSPARENT`, hence CAP_NET_ADMIN or CAP_NET_RAW, and policy routing
//! on the balancer); an IP address is a fixed source. Absent: the kernel
//! picks (source NAT). Checks here are the ones a file alone can fail; the
//! missing capability is a warning, since `check` may run elsewhere than the
//! balancer (the process's own capabilities are read once, see `pem::Files`).

use std::net::IpAddr;

use crate::model::{Server, Source, UpstreamProtocol};
use crate::raw::S;
use crate::validate::Ctx;

/// Parses a pool's `source` and checks it against the pool's servers and
/// protocol. Errors are located at the value.
pub(crate) fn validate_source(
    cx: &mut Ctx<'_, '_>,
    value: &S<String>,
    servers: &[Server],
    protocol: UpstreamProtocol,
) -> Option<Source> {
    let span = value.span();
    let source = match value.get_ref().as_str() {
        "client" => Source::Client,
        text => match text.parse::<IpAddr>() {
            Ok(ip) if ip.is_unspecified() || ip.is_multicast() || ip == IpAddr::from([255, 255, 255, 255]) => {
                cx.r.error_hint(
                    &span,
                    format!("`source` must be one of this node's unicast addresses, not `{ip}`"),
                    "leave `source` out to let the kernel choose the address",
                );
                return None;
            }
            Ok(ip) => Source::Address(ip),
            Err(_) => {
                cx.r.error_hint(
                    &span,
                    format!("`source` must be \"client\" or an IP address, not `{text}`"),
                    "source = \"client\" connects from the client's own address (transparent mode); \
                     source = \"10.0.0.5\" from a fixed address",
                );
                return None;
            }
        },
    };
    if protocol == UpstreamProtocol::Http2 {
        cx.r.error_hint(
            &span,
            "`source` is not supported with protocol = \"h2\"",
            "an HTTP/2 connection carries many clients' requests; use protocol = \"http1\" with `source`",
        );
        return None;
    }
    if let Source::Address(ip) = source {
        if let Some(server) = servers.iter().find(|s| s.addr.is_ipv4() != ip.is_ipv4()) {
            cx.r.error_hint(
                &span,
                format!(
                    "source address {ip} cannot reach server `{}` ({}): another address family",
                    server.name, server.addr
                ),
                "use a source address of the servers' family, or give these servers a pool of their own",
            );
            return None;
        }
    }
    if source == Source::Client && !cx.files.transparent_capable {
        cx.r.warning(
            &span,
            "transparent mode (source = \"client\") needs CAP_NET_ADMIN or CAP_NET_RAW, which this process lacks",
            Some(
                "run switchyard as root or grant the capability (systemd: AmbientCapabilities=CAP_NET_ADMIN); \
                 without it every connection to this pool's servers fails"
                    .to_string(),
            ),
        );
    }
    Some(source)
}

#[cfg(test)]
mod tests {
    use crate::pem::Files;
    use crate::Severity;

    const FILE: &str = "[[service]]\nname = \"web\"\nlisten = \"10.0.0.100:80\"\npool = \"main\"\n\n\
                        [[pool]]\nname = \"main\"\nservers = [ { address = \"10.0.0.11:8080\" } ]\n\
                        source = \"client\"\n";

    fn warnings(capable: bool) -> Vec<String> {
        let files = Files { transparent_capable: capable, ..Files::offline() };
        let (config, diagnostics) = crate::check(FILE, "t.toml", &files);
        assert!(config.is_some(), "a missing capability is no error: {diagnostics}");
        diagnostics.0.iter().filter(|d| d.severity == Severity::Warning).map(|d| d.to_string()).collect()
    }

    #[test]
    fn transparent_mode_without_the_capability_is_a_located_warning() {
        let lacking = warnings(false);
        assert_eq!(lacking.len(), 1, "{lacking:?}");
        assert!(lacking[0].starts_with("t.toml:9:10: warning: transparent mode"), "{}", lacking[0]);
        assert!(lacking[0].contains("CAP_NET_ADMIN"), "{}", lacking[0]);
        assert!(warnings(true).is_empty());
    }
}
