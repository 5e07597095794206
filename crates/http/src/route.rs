//! Rule evaluation: the route phase.
//!
//! Rules are evaluated in file order against a [`RequestView`]. A matching
//! rule's header edits are collected and evaluation continues; the first
//! matching rule with a terminal action ends it. Matching works on the raw
//! bytes of the request (no percent-decoding), like HAProxy's `path_end` and
//! NGINX's `location` on the normalised-free URI; hosts are compared lower
//! case without their port.

use std::net::IpAddr;

use switchyard_config::{Action, ClientCertState, Condition, HeaderEdits, Rule, StrMatch};

use crate::parse::Field;

/// The parts of a request that rules look at.
#[derive(Debug, Clone, Copy)]
pub struct RequestView<'a> {
    /// Method token.
    pub method: &'a str,
    /// Host, lower case, without port.
    pub host: &'a str,
    /// Path, without the query string.
    pub path: &'a str,
    /// Query string without the `?`, if any.
    pub query: Option<&'a str>,
    /// The buffer `fields` index.
    pub head: &'a [u8],
    /// Header fields of the request.
    pub fields: &'a [Field],
    /// The client's address.
    pub client: IpAddr,
    /// A client certificate was presented and verified (mTLS).
    pub client_cert: bool,
}

impl RequestFacts for RequestView<'_> {
    fn client(&self) -> IpAddr {
        self.client
    }

    fn header_values<'s>(&'s self, name: &'s str) -> impl Iterator<Item = &'s [u8]> + 's {
        let head = self.head;
        self.fields
            .iter()
            .filter(move |f| head[f.name.clone()].eq_ignore_ascii_case(name.as_bytes()))
            .map(move |f| &head[f.value.clone()])
    }
}

impl<'a> RequestView<'a> {
    /// Values of the header `name` (lower case), in order.
    pub fn header_values(&self, name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
        let head = self.head;
        self.fields
            .iter()
            .filter(move |f| head[f.name.clone()].eq_ignore_ascii_case(name.as_bytes()))
            .map(move |f| &head[f.value.clone()])
    }

    /// Values of the query parameter `name`, in order (an absent `=` gives "").
    pub fn query_values(&self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.query.unwrap_or("").split('&').filter_map(move |pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (k == name && !pair.is_empty()).then_some(v)
        })
    }
}

/// The outcome of the route phase.
#[derive(Debug, Default)]
pub struct Decision<'a> {
    /// The terminal action of the first matching rule that has one.
    pub action: Option<&'a Action>,
    /// Header edits of every matching rule up to and including that one.
    pub edits: Vec<&'a HeaderEdits>,
}

/// Evaluates `rules` in order against `req`.
pub fn evaluate<'a>(rules: &'a [Rule], req: &RequestView<'_>) -> Decision<'a> {
    let mut decision = Decision::default();
    for rule in rules {
        if !rule.conditions.iter().all(|c| holds(c, req)) {
            continue;
        }
        if !rule.edits.is_empty() {
            decision.edits.push(&rule.edits);
        }
        if let Some(action) = &rule.action {
            decision.action = Some(action);
            break;
        }
    }
    decision
}

fn holds(condition: &Condition, req: &RequestView<'_>) -> bool {
    match condition {
        Condition::Host(m) => m.matches(req.host),
        Condition::Path(m) => m.matches(req.path),
        Condition::Method(methods) => methods.iter().any(|m| m == req.method),
        Condition::Header { name, matcher } => req.header_values(name).any(|v| match matcher {
            None => true,
            Some(m) => std::str::from_utf8(v).is_ok_and(|v| m.matches(v)),
        }),
        Condition::Query { name, matcher } => {
            req.query_values(name).any(|v| matcher.as_ref().is_none_or(|m: &StrMatch| m.matches(v)))
        }
        Condition::ClientAddr(nets) => nets.iter().any(|n| n.contains(req.client)),
        Condition::ClientCert(state) => req.client_cert == (*state == ClientCertState::Verified),
    }
}

/// Extracts the host name for routing from a `Host` value: lower case, port removed.
/// `scratch` receives the lower-cased copy when the value has upper case letters.
pub fn routing_host<'a>(value: &'a [u8], scratch: &'a mut String) -> &'a str {
    let value = std::str::from_utf8(value).unwrap_or("");
    let host = if value.starts_with('[') {
        // IPv6 literal: keep the brackets, drop a trailing :port.
        value.find(']').map_or(value, |end| &value[..=end])
    } else {
        value.rsplit_once(':').map_or(value, |(h, _)| h)
    };
    if host.bytes().any(|b| b.is_ascii_uppercase()) {
        scratch.clear();
        scratch.push_str(host);
        scratch.make_ascii_lowercase();
        scratch.as_str()
    } else {
        host
    }
}

/// What persistence reads of a request. The pipeline implements it on its request view;
/// the engine's persistence module has a ready-made implementation over a list of headers.
pub trait RequestFacts {
    /// The client's address, as the pipeline decided it (peer or trusted proxy header).
    fn client(&self) -> IpAddr;
    /// Values of the header fields named `name` (lower case), in request order.
    fn header_values<'s>(&'s self, name: &'s str) -> impl Iterator<Item = &'s [u8]> + 's;
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchyard_config::{Cidr, PoolId};

    fn rule(conditions: Vec<Condition>, action: Option<Action>) -> Rule {
        Rule { name: None, conditions, edits: HeaderEdits::default(), action }
    }

    fn view<'a>(head: &'a [u8], fields: &'a [Field], path: &'a str, query: Option<&'a str>) -> RequestView<'a> {
        RequestView {
            method: "GET",
            host: "www.example.com",
            path,
            query,
            head,
            fields,
            client: "10.1.2.3".parse().expect("ip"),
            client_cert: false,
        }
    }

    #[test]
    fn png_rule_chooses_images_pool() {
        let rules = vec![rule(vec![Condition::Path(StrMatch::Suffix(".png".into()))], Some(Action::Pool(PoolId(1))))];
        let d = evaluate(&rules, &view(b"", &[], "/img/logo.png", None));
        assert!(matches!(d.action, Some(Action::Pool(PoolId(1)))));
        let d = evaluate(&rules, &view(b"", &[], "/index.html", None));
        assert!(d.action.is_none());
    }

    #[test]
    fn every_condition_kind() {
        let head = b"X-Tenant: blue\r\nX-Empty: \r\n";
        let fields = [Field { name: 0..8, value: 10..14 }, Field { name: 16..23, value: 25..25 }];
        let req = view(head, &fields, "/api/v1", Some("debug=1&flag&x=y"));
        let yes = |c: Condition| holds(&c, &req);
        assert!(yes(Condition::Host(StrMatch::Suffix(".example.com".into()))));
        assert!(!yes(Condition::Host(StrMatch::Exact("example.com".into()))));
        assert!(yes(Condition::Path(StrMatch::Prefix("/api/".into()))));
        assert!(yes(Condition::Path(StrMatch::Regex(regex::Regex::new("^/api/v[0-9]+$").expect("re")))));
        assert!(yes(Condition::Method(vec!["POST".into(), "GET".into()])));
        assert!(!yes(Condition::Method(vec!["POST".into()])));
        assert!(yes(Condition::Header { name: "x-tenant".into(), matcher: None }));
        assert!(yes(Condition::Header { name: "x-tenant".into(), matcher: Some(StrMatch::Exact("blue".into())) }));
        assert!(!yes(Condition::Header { name: "x-tenant".into(), matcher: Some(StrMatch::Exact("red".into())) }));
        assert!(yes(Condition::Header { name: "x-empty".into(), matcher: None }));
        assert!(!yes(Condition::Header { name: "x-missing".into(), matcher: None }));
        assert!(yes(Condition::Query { name: "debug".into(), matcher: Some(StrMatch::Exact("1".into())) }));
        assert!(yes(Condition::Query { name: "flag".into(), matcher: None }));
        assert!(!yes(Condition::Query { name: "nope".into(), matcher: None }));
        let net = |s: &str, p| Cidr { addr: s.parse().expect("ip"), prefix: p };
        assert!(yes(Condition::ClientAddr(vec![net("10.0.0.0", 8)])));
        assert!(!yes(Condition::ClientAddr(vec![net("192.168.0.0", 16)])));
    }

    #[test]
    fn edits_accumulate_until_a_terminal_action() {
        let mut edit = rule(vec![], None);
        edit.edits.set_request.push(("x-a".into(), "1".into()));
        let stop = rule(vec![], Some(Action::Deny { status: 403 }));
        let mut after = rule(vec![], None);
        after.edits.add_request.push(("x-b".into(), "2".into()));
        let rules = vec![edit, stop, after];
        let d = evaluate(&rules, &view(b"", &[], "/", None));
        assert_eq!(d.edits.len(), 1);
        assert!(matches!(d.action, Some(Action::Deny { status: 403 })));
    }

    #[test]
    fn host_is_lowered_and_port_stripped() {
        let mut s = String::new();
        assert_eq!(routing_host(b"Example.COM:8080", &mut s), "example.com");
        let mut s = String::new();
        assert_eq!(routing_host(b"[::1]:80", &mut s), "[::1]");
        let mut s = String::new();
        assert_eq!(routing_host(b"plain", &mut s), "plain");
    }
}
