//! The address a request comes from, for the per-client rate limit of requests
//! without a valid key. `X-Forwarded-For` is believed only as far as it was written
//! by proxies the operator trusts (`--trusted-proxy`): anyone else can put anything
//! in it.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use axum::http::HeaderMap;

use ipnet::IpNet;

/// The proxies whose `X-Forwarded-For` entries are believed.
#[derive(Debug, Clone, Default)]
pub struct TrustedProxies(Vec<IpNet>);

impl TrustedProxies {
    pub fn new(networks: Vec<IpNet>) -> Self {
        TrustedProxies(networks)
    }

    fn trusts(&self, ip: IpAddr) -> bool {
        self.0.iter().any(|net| net.contains(&ip))
    }

    /// The client of a request that reached us from `peer`. When `peer` is a trusted
    /// proxy, the right-most `X-Forwarded-For` address that is not itself a trusted
    /// proxy (each trusted proxy appends the address it was called from, so that is
    /// the last hop no trusted party vouches beyond). Otherwise `peer`, whatever the
    /// header says. An entry that is not an address ends the walk at the last trusted
    /// hop: a trusted proxy would not have written it.
    pub fn client(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        let mut client = peer.to_canonical();
        if !self.trusts(client) {
            return client;
        }
        // Several X-Forwarded-For headers form one list, in order.
        let entries = headers
            .get_all("x-forwarded-for")
            .iter()
            .flat_map(|v| v.to_str().unwrap_or("").split(','));
        for entry in entries.rev() {
            let Some(hop) = parse_hop(entry) else {
                break;
            };
            client = hop;
            if !self.trusts(hop) {
                break;
            }
        }
        client
    }
}

/// An address as proxies write them: `1.2.3.4`, `2001:db8::1`, and with a port
/// `1.2.3.4:5678` or `[2001:db8::1]:5678`.
fn parse_hop(entry: &str) -> Option<IpAddr> {
    let entry = entry.trim();
    entry
        .parse::<IpAddr>()
        .or_else(|_| entry.parse::<SocketAddr>().map(|s| s.ip()))
        .ok()
        .map(|ip| ip.to_canonical())
}

/// What a client address is counted as: an IPv4 address itself, an IPv6 address by
/// its /64 (one subscriber's network: a single host can take any address in it).
pub fn budget_key(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & !0u128 << 64)),
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proxies(cidrs: &[&str]) -> TrustedProxies {
        TrustedProxies::new(
            cidrs
                .iter()
                .map(|c| flowline_egress::parse_cidr(c).unwrap())
                .collect(),
        )
    }

    fn xff(values: &[&str]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for v in values {
            headers.append("x-forwarded-for", v.parse().unwrap());
        }
        headers
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn without_trusted_proxies_the_header_is_ignored() {
        let none = TrustedProxies::default();
        assert_eq!(
            none.client(ip("203.0.113.9"), &xff(&["198.51.100.1"])),
            ip("203.0.113.9")
        );
    }

    #[test]
    fn a_spoofed_header_from_an_untrusted_peer_is_ignored() {
        let trusted = proxies(&["10.0.0.0/8"]);
        let attacker = ip("203.0.113.9");
        for header in [
            &["1.1.1.1"][..],
            &["10.0.0.5"],
            &["1.1.1.1, 2.2.2.2"],
            &["garbage"],
        ] {
            assert_eq!(
                trusted.client(attacker, &xff(header)),
                attacker,
                "{header:?}"
            );
        }
    }

    #[test]
    fn behind_trusted_proxies_the_rightmost_untrusted_address_is_the_client() {
        let trusted = proxies(&["10.0.0.0/8", "192.168.1.1"]);
        let proxy = ip("10.1.2.3");
        // The client prepended a fake entry; the proxies appended the real hops.
        let headers = xff(&["6.6.6.6, 198.51.100.7", "192.168.1.1 , 10.9.9.9"]);
        assert_eq!(trusted.client(proxy, &headers), ip("198.51.100.7"));
        assert_eq!(
            trusted.client(proxy, &xff(&["198.51.100.7:4711"])),
            ip("198.51.100.7"),
            "with a port"
        );
        assert_eq!(
            trusted.client(proxy, &xff(&["[2001:db8::7]:4711"])),
            ip("2001:db8::7")
        );
        assert_eq!(
            trusted.client(proxy, &xff(&["::ffff:198.51.100.7"])),
            ip("198.51.100.7"),
            "IPv4-mapped addresses are IPv4 addresses"
        );
    }

    #[test]
    fn the_walk_stops_at_the_last_trusted_hop() {
        let trusted = proxies(&["10.0.0.0/8"]);
        let proxy = ip("10.1.2.3");
        assert_eq!(trusted.client(proxy, &HeaderMap::new()), proxy, "no header");
        assert_eq!(
            trusted.client(proxy, &xff(&["10.0.0.1, 10.0.0.2"])),
            ip("10.0.0.1"),
            "every hop trusted: the first one"
        );
        assert_eq!(
            trusted.client(proxy, &xff(&["198.51.100.7, not-an-ip, 10.0.0.2"])),
            ip("10.0.0.2"),
            "an entry that is no address is not skipped over"
        );
    }

    #[test]
    fn a_trusted_peer_seen_as_ipv4_mapped_ipv6_is_still_trusted() {
        let trusted = proxies(&["10.0.0.0/8"]);
        assert_eq!(
            trusted.client(ip("::ffff:10.1.2.3"), &xff(&["198.51.100.7"])),
            ip("198.51.100.7")
        );
    }

    #[test]
    fn ipv6_clients_are_counted_by_their_64() {
        assert_eq!(
            budget_key(ip("2001:db8:1:2:aaaa:bbbb:cccc:dddd")),
            ip("2001:db8:1:2::")
        );
        assert_eq!(
            budget_key(ip("2001:db8:1:2::1")),
            budget_key(ip("2001:db8:1:2:ffff::9"))
        );
        assert_ne!(
            budget_key(ip("2001:db8:1:2::1")),
            budget_key(ip("2001:db8:1:3::1"))
        );
        assert_eq!(budget_key(ip("198.51.100.7")), ip("198.51.100.7"));
        assert_eq!(budget_key(ip("::ffff:198.51.100.7")), ip("198.51.100.7"));
    }
}
