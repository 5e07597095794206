//! A pool's `source` (transparent mode and fixed source address): what each
//! value turns into, and every refusal with its position.

#![allow(clippy::unwrap_used)]

use switchyard_config::*;

/// A `tcp` and an `http` service on one pool whose table ends with `extra`
/// (line 11 onwards).
fn file(extra: &str) -> String {
    format!(
        "[[service]]\nname = \"web\"\nlisten = \"10.0.0.100:80\"\npool = \"main\"\n\n\
         [[pool]]\nname = \"main\"\nservers = [ {{ address = \"10.0.0.11:8080\" }} ]\n{extra}"
    )
}

/// Errors as `LINE:COL message`.
fn errors(text: &str) -> Vec<String> {
    parse(text, "t.toml").unwrap_err().errors().map(|d| format!("{}:{} {}", d.line, d.col, d.message)).collect()
}

#[test]
fn each_value_is_read() {
    let pool = |extra: &str| parse(&file(extra), "t.toml").unwrap().pools.remove(0);
    assert_eq!(pool("").source, Source::Balancer, "source NAT stays the default");
    assert_eq!(pool("source = \"client\"\n").source, Source::Client);
    assert_eq!(pool("source = \"10.0.0.5\"\n").source, Source::Address("10.0.0.5".parse().unwrap()));
}

#[test]
fn refusals_are_located_with_hints() {
    // Line 9 is the `source` line.
    let text = file("source = \"lb-address\"\n");
    assert_eq!(errors(&text), vec!["9:10 `source` must be \"client\" or an IP address, not `lb-address`"]);
    let hint = parse(&text, "t.toml").unwrap_err().0.remove(0).hint.unwrap();
    assert!(hint.contains("transparent mode"), "{hint}");
    assert_eq!(
        errors(&file("source = \"0.0.0.0\"\n")),
        vec!["9:10 `source` must be one of this node's unicast addresses, not `0.0.0.0`"]
    );
    assert_eq!(
        errors(&file("source = \"fd00::5\"\n")),
        vec![
            "9:10 source address fd00::5 cannot reach server `10.0.0.11:8080` (10.0.0.11:8080): another address family"
        ]
    );
    assert_eq!(
        errors(&file("source = \"client\"\nprotocol = \"h2\"\n")),
        vec!["9:10 `source` is not supported with protocol = \"h2\""]
    );
    assert_eq!(errors(&file("source = 5\n")).len(), 1, "a number is refused too");
}

#[test]
fn a_udp_service_refuses_a_pool_with_a_source() {
    let text = "[[service]]\nname = \"dns\"\nmode = \"udp\"\nlisten = \"10.0.0.100:53\"\npool = \"dns\"\n\n\
                [[pool]]\nname = \"dns\"\nservers = [ { address = \"10.0.0.11:53\" } ]\nsource = \"client\"\n";
    let errors = errors(text);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].starts_with("10:10 pool `dns` is used by udp service `dns`, which does not support `source`"));
}

#[test]
fn a_changed_source_is_a_pool_change() {
    let before = parse(&file(""), "t.toml").unwrap();
    let after = parse(&file("source = \"client\"\n"), "t.toml").unwrap();
    assert!(!diff(&before, &after).is_empty(), "a reload applies the new source");
}
