//! Which addresses a webhook may reach. By default none that points into the deployment's own
//! network: loopback, private (RFC 1918, IPv6 ULA), link-local (including the cloud metadata
//! address 169.254.169.254), CGNAT (100.64/10), multicast, unspecified and broadcast, and the
//! same inside IPv4-mapped and NAT64 IPv6 addresses. `NOTIFIER_ALLOW_PRIVATE_TARGETS=true`
//! lifts this for local use and tests.
//!
//! The check happens at send time, after DNS resolution, inside the HTTP client's resolver
//! ([`GuardedResolver`]): the client connects only to the addresses that were checked, so a
//! name that resolves differently on a second look-up (DNS rebinding) gains nothing. URLs
//! with an IP literal skip DNS and are checked by [`refused_literal`].

use std::{
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
    sync::Arc,
};

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use url::{Host, Url};

/// Whether `ip` is an address webhooks may not reach by default.
pub fn is_forbidden(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => forbidden_v4(v4),
        IpAddr::V6(v6) => forbidden_v6(v6),
    }
}

fn forbidden_v4(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_multicast()
        || ip.is_unspecified()
        || ip.is_broadcast()
        || a == 0
        || (a == 100 && (64..=127).contains(&b))
        || a >= 240
}

fn forbidden_v6(ip: Ipv6Addr) -> bool {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return forbidden_v4(v4);
    }
    let seg = ip.segments();
    if seg[0] == 0x64 && seg[1] == 0xff9b && seg[2..6] == [0, 0, 0, 0] {
        let [a, b] = seg[6].to_be_bytes();
        let [c, d] = seg[7].to_be_bytes();
        return forbidden_v4(Ipv4Addr::new(a, b, c, d));
    }
    ip.is_loopback()
        || ip.is_unspecified()
        || ip.is_multicast()
        || (seg[0] & 0xfe00) == 0xfc00
        || (seg[0] & 0xffc0) == 0xfe80
}

/// Why a URL's literal address is refused, if it is.
pub fn refused_literal(url: &Url, allow_private: bool) -> Option<String> {
    if allow_private {
        return None;
    }
    let ip = match url.host()? {
        Host::Ipv4(v4) => IpAddr::V4(v4),
        Host::Ipv6(v6) => IpAddr::V6(v6),
        Host::Domain(_) => return None,
    };
    is_forbidden(ip).then(|| format!("{ip} is a private or reserved address"))
}

/// The error of a name that resolves only to forbidden addresses: a refusal, not a failure
/// worth retrying.
#[derive(Debug, thiserror::Error)]
#[error("{0} resolves only to private or reserved addresses")]
pub struct PrivateTarget(pub String);

/// Whether `error` (or any error it wraps) is a [`PrivateTarget`] refusal.
pub fn is_private_target(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut current = Some(error);
    while let Some(e) = current {
        if e.is::<PrivateTarget>() {
            return true;
        }
        current = e.source();
    }
    false
}

/// A DNS resolver that drops forbidden addresses (unless allowed) and fails when none is left.
pub struct GuardedResolver {
    allow_private: bool,
}

impl GuardedResolver {
    /// A resolver for the HTTP client.
    pub fn new(allow_private: bool) -> Arc<Self> {
        Arc::new(Self { allow_private })
    }
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let allow_private = self.allow_private;
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let resolved: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let allowed: Vec<SocketAddr> =
                resolved.into_iter().filter(|a| allow_private || !is_forbidden(a.ip())).collect();
            if allowed.is_empty() {
                return Err(Box::new(PrivateTarget(host)) as Box<dyn std::error::Error + Send + Sync>);
            }
            Ok(Box::new(allowed.into_iter()) as Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("an IP address")
    }

    #[test]
    fn internal_addresses_are_forbidden() {
        for a in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "224.0.0.1",
            "255.255.255.255",
            "::1",
            "fc00::1",
            "fd00:ec2::254",
            "fe80::1",
            "::ffff:127.0.0.1",
            "64:ff9b::a00:1",
            "ff02::1",
            "::",
        ] {
            assert!(is_forbidden(ip(a)), "{a} must be forbidden");
        }
    }

    #[test]
    fn public_addresses_are_allowed() {
        for a in ["8.8.8.8", "1.1.1.1", "100.128.0.1", "2606:4700:4700::1111", "64:ff9b::808:808"] {
            assert!(!is_forbidden(ip(a)), "{a} must be allowed");
        }
    }

    #[test]
    fn literal_addresses_in_urls_are_checked_unless_allowed() {
        let url = Url::parse("http://127.0.0.1:9000/hook").expect("url");
        assert!(refused_literal(&url, false).is_some());
        assert!(refused_literal(&url, true).is_none());
        let named = Url::parse("https://example.com/hook").expect("url");
        assert!(refused_literal(&named, false).is_none());
    }

    #[tokio::test]
    async fn the_resolver_refuses_a_name_that_resolves_to_loopback() {
        let name: Name = "localhost".parse().expect("a name");
        assert!(GuardedResolver::new(false).resolve(name).await.is_err());
        let name: Name = "localhost".parse().expect("a name");
        assert!(GuardedResolver::new(true).resolve(name).await.is_ok());
    }
}
