//! Free loopback ports for servers a test starts a moment later (a Cog server, a NATS server,
//! a runner's metrics or callback receiver).
//!
//! A port taken by binding port 0 and letting it go is from the kernel's ephemeral range, the
//! range it hands out for every other bind to port 0 and every outgoing connection's own port:
//! with the whole suite running, one of those took such a port in the seconds before its
//! server bound it ("Address already in use"; the runner's Cog uploads test, in CI). These
//! ports are chosen below that range (`net.ipv4.ip_local_port_range`), which the kernel never
//! hands out by itself, at random and free when chosen, and never twice in one test process
//! (two servers a test starts side by side never draw the same port). The runner chooses its
//! own model servers' ports the same way (`runner::models::cog::instance`).

use std::{
    collections::BTreeSet,
    hash::{BuildHasher, RandomState},
    net::{SocketAddr, TcpListener},
    sync::Mutex,
};

/// The lowest port handed out.
const LOWEST: u16 = 10_000;

/// The ports this process has handed out.
static HANDED_OUT: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

/// A loopback port nothing listens on now, below the ephemeral range, not handed out before
/// in this process.
pub fn free_port() -> u16 {
    loop {
        let port = any_free_port();
        if HANDED_OUT.lock().unwrap_or_else(|p| p.into_inner()).insert(port) {
            return port;
        }
    }
}

/// A loopback port nothing listens on now, below the ephemeral range.
fn any_free_port() -> u16 {
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32_768);
    if ephemeral_low > LOWEST {
        for attempt in 0u64..256 {
            let random = RandomState::new().hash_one(attempt);
            let port = LOWEST + (random % u64::from(ephemeral_low - LOWEST)) as u16;
            if TcpListener::bind(("127.0.0.1", port)).is_ok() {
                return port;
            }
        }
    }
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port").port()
}

/// `127.0.0.1:` a [`free_port`].
pub fn free_addr() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], free_port()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_below_the_ephemeral_range_and_never_handed_out_twice() {
        let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").expect("Linux");
        let low: u16 = range.split_whitespace().next().and_then(|p| p.parse().ok()).expect("a port");
        let ports: Vec<u16> = (0..200).map(|_| free_port()).collect();
        assert!(ports.iter().all(|p| (LOWEST..low).contains(p)), "{ports:?} below {low}");
        let distinct: std::collections::BTreeSet<u16> = ports.iter().copied().collect();
        assert_eq!(distinct.len(), ports.len(), "never the same port twice");
    }
}
