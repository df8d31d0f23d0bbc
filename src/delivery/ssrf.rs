//! Destination guard: webhook URLs are user-supplied, so without this check a webhook could
//! make Flowline probe the cluster network, its own loopback or the cloud metadata service.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// An IP network. Host bits are cleared on construction, so `10.1.2.3/8` parses (as in Go's
/// `net.ParseCIDR`) and equals `10.0.0.0/8`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cidr {
    network: IpAddr,
    prefix_len: u8,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CidrParseError {
    #[error("{0:?} is not an IP address")]
    InvalidAddress(String),
    #[error("{0:?} is not a prefix length")]
    InvalidPrefix(String),
    #[error("prefix length /{len} is longer than /{max}")]
    PrefixTooLong { len: u32, max: u8 },
}

impl Cidr {
    pub fn new(addr: IpAddr, prefix_len: u8) -> Result<Self, CidrParseError> {
        let max = max_prefix(addr);
        if prefix_len > max {
            return Err(CidrParseError::PrefixTooLong {
                len: prefix_len.into(),
                max,
            });
        }
        let network = match addr {
            IpAddr::V4(a) => IpAddr::V4((u32::from(a) & mask_v4(prefix_len)).into()),
            IpAddr::V6(a) => IpAddr::V6((u128::from(a) & mask_v6(prefix_len)).into()),
        };
        Ok(Self {
            network,
            prefix_len,
        })
    }

    pub fn network(&self) -> IpAddr {
        self.network
    }

    pub fn prefix_len(&self) -> u8 {
        self.prefix_len
    }

    /// Strict per family: an IPv4 network never contains an IPv6 address, not even its
    /// IPv4-mapped form ([`DestinationPolicy::check`] handles that).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.network, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                u32::from(ip) & mask_v4(self.prefix_len) == u32::from(net)
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                u128::from(ip) & mask_v6(self.prefix_len) == u128::from(net)
            }
            _ => false,
        }
    }
}

impl FromStr for Cidr {
    type Err = CidrParseError;

    /// `addr/len`, or a bare address meaning a single host (/32 or /128).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        let (addr_part, len_part) = match s.split_once('/') {
            Some((addr, len)) => (addr, Some(len)),
            None => (s, None),
        };
        let addr: IpAddr = addr_part
            .parse()
            .map_err(|_| CidrParseError::InvalidAddress(addr_part.to_owned()))?;
        let max = max_prefix(addr);
        let Some(len_part) = len_part else {
            return Self::new(addr, max);
        };
        // `u32::from_str` would accept "+8"; only plain digits are a prefix length.
        if len_part.is_empty() || !len_part.bytes().all(|b| b.is_ascii_digit()) {
            return Err(CidrParseError::InvalidPrefix(len_part.to_owned()));
        }
        let len = len_part.parse::<u32>().unwrap_or(u32::MAX);
        match u8::try_from(len) {
            Ok(len) if len <= max => Self::new(addr, len),
            _ => Err(CidrParseError::PrefixTooLong { len, max }),
        }
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix_len)
    }
}

fn max_prefix(addr: IpAddr) -> u8 {
    match addr {
        IpAddr::V4(_) => 32,
        IpAddr::V6(_) => 128,
    }
}

fn mask_v4(len: u8) -> u32 {
    u32::MAX
        .checked_shl(32u32.saturating_sub(len.into()))
        .unwrap_or(0)
}

fn mask_v6(len: u8) -> u128 {
    u128::MAX
        .checked_shl(128u32.saturating_sub(len.into()))
        .unwrap_or(0)
}

/// Why a destination was refused. Each variant carries the address exactly as checked, so
/// an IPv4-mapped or NAT64 form is reported as the caller saw it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("{0} is loopback{hint}; {ALLOW}", hint = hint(*.0))]
    Loopback(IpAddr),
    #[error("{0} is link-local{hint}; {ALLOW}", hint = hint(*.0))]
    LinkLocal(IpAddr),
    #[error("{0} is a private address{hint}; {ALLOW}", hint = hint(*.0))]
    Private(IpAddr),
    #[error("{0} is unspecified (\"this host\"){hint}; {ALLOW}", hint = hint(*.0))]
    Unspecified(IpAddr),
    #[error("{0} is multicast{hint}; {ALLOW}", hint = hint(*.0))]
    Multicast(IpAddr),
    #[error("{0} is the broadcast address{hint}; {ALLOW}", hint = hint(*.0))]
    Broadcast(IpAddr),
    #[error("{0} is reserved for documentation{hint}; {ALLOW}", hint = hint(*.0))]
    Documentation(IpAddr),
    #[error("{0} is in a reserved, non-global range{hint}; {ALLOW}", hint = hint(*.0))]
    Reserved(IpAddr),
}

const ALLOW: &str = "allow it with --allow-cidr";

impl Refusal {
    pub fn address(&self) -> IpAddr {
        match *self {
            Self::Loopback(ip)
            | Self::LinkLocal(ip)
            | Self::Private(ip)
            | Self::Unspecified(ip)
            | Self::Multicast(ip)
            | Self::Broadcast(ip)
            | Self::Documentation(ip)
            | Self::Reserved(ip) => ip,
        }
    }
}

/// Refuses non-public destinations unless an operator-listed CIDR contains them.
/// Check every resolved address, then connect to the checked address itself: resolving
/// again would let DNS rebinding swap in an internal address after the check.
#[derive(Debug, Clone, Default)]
pub struct DestinationPolicy {
    pub allowed: Vec<Cidr>,
}

impl DestinationPolicy {
    /// The allowlist wins over every category, including loopback and unspecified. An
    /// IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) also matches IPv4 entries, because it
    /// reaches the same IPv4 host.
    pub fn check(&self, ip: IpAddr) -> Result<(), Refusal> {
        let canonical = ip.to_canonical();
        if self
            .allowed
            .iter()
            .any(|cidr| cidr.contains(ip) || cidr.contains(canonical))
        {
            return Ok(());
        }
        match classify(ip) {
            Some(refuse) => Err(refuse(ip)),
            None => Ok(()),
        }
    }
}

type Refuse = fn(IpAddr) -> Refusal;

const fn v4(a: u8, b: u8, c: u8, d: u8, prefix_len: u8) -> Cidr {
    Cidr {
        network: IpAddr::V4(Ipv4Addr::new(a, b, c, d)),
        prefix_len,
    }
}

const fn v6(segments: [u16; 8], prefix_len: u8) -> Cidr {
    let [a, b, c, d, e, f, g, h] = segments;
    Cidr {
        network: IpAddr::V6(Ipv6Addr::new(a, b, c, d, e, f, g, h)),
        prefix_len,
    }
}

/// IANA special-purpose registry; first match wins, so broadcast precedes 240/4. 0/8 is
/// "this network": Linux connects 0.x.y.z to the local host.
const V4_RULES: [(Cidr, Refuse); 16] = [
    (v4(0, 0, 0, 0, 8), Refusal::Unspecified),
    (v4(10, 0, 0, 0, 8), Refusal::Private),
    (v4(100, 64, 0, 0, 10), Refusal::Private),
    (v4(127, 0, 0, 0, 8), Refusal::Loopback),
    (v4(169, 254, 0, 0, 16), Refusal::LinkLocal),
    (v4(172, 16, 0, 0, 12), Refusal::Private),
    (v4(192, 0, 0, 0, 24), Refusal::Reserved),
    (v4(192, 0, 2, 0, 24), Refusal::Documentation),
    (v4(192, 88, 99, 0, 24), Refusal::Reserved),
    (v4(192, 168, 0, 0, 16), Refusal::Private),
    (v4(198, 18, 0, 0, 15), Refusal::Reserved),
    (v4(198, 51, 100, 0, 24), Refusal::Documentation),
    (v4(203, 0, 113, 0, 24), Refusal::Documentation),
    (v4(224, 0, 0, 0, 4), Refusal::Multicast),
    (v4(255, 255, 255, 255, 32), Refusal::Broadcast),
    (v4(240, 0, 0, 0, 4), Refusal::Reserved),
];

/// Checked after `::`, `::1` and the IPv4-embedding prefixes; anything outside 2000::/3
/// (global unicast) is refused afterwards as reserved.
const V6_RULES: [(Cidr, Refuse); 6] = [
    (v6([0xff00, 0, 0, 0, 0, 0, 0, 0], 8), Refusal::Multicast),
    (v6([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10), Refusal::LinkLocal),
    (v6([0xfc00, 0, 0, 0, 0, 0, 0, 0], 7), Refusal::Private),
    (
        v6([0x2001, 0xdb8, 0, 0, 0, 0, 0, 0], 32),
        Refusal::Documentation,
    ),
    (
        v6([0x3fff, 0, 0, 0, 0, 0, 0, 0], 20),
        Refusal::Documentation,
    ),
    (v6([0x2001, 0, 0, 0, 0, 0, 0, 0], 23), Refusal::Reserved),
];

const GLOBAL_UNICAST: Cidr = v6([0x2000, 0, 0, 0, 0, 0, 0, 0], 3);

fn classify(ip: IpAddr) -> Option<Refuse> {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

fn classify_v4(ip: Ipv4Addr) -> Option<Refuse> {
    let ip = IpAddr::V4(ip);
    V4_RULES
        .iter()
        .find(|(cidr, _)| cidr.contains(ip))
        .map(|&(_, refuse)| refuse)
}

fn classify_v6(ip: Ipv6Addr) -> Option<Refuse> {
    if ip.is_unspecified() {
        return Some(Refusal::Unspecified);
    }
    if ip.is_loopback() {
        return Some(Refusal::Loopback);
    }
    // These forms are routed to (or translated into) the embedded IPv4 host, so they
    // inherit its verdict; a public embedded address is a legitimate destination.
    if let Some(embedded) = embedded_v4(ip) {
        return classify_v4(embedded);
    }
    let addr = IpAddr::V6(ip);
    if let Some(&(_, refuse)) = V6_RULES.iter().find(|(cidr, _)| cidr.contains(addr)) {
        return Some(refuse);
    }
    (!GLOBAL_UNICAST.contains(addr)).then_some(Refusal::Reserved as Refuse)
}

const MAPPED: Cidr = v6([0, 0, 0, 0, 0, 0xffff, 0, 0], 96);
const NAT64: Cidr = v6([0x64, 0xff9b, 0, 0, 0, 0, 0, 0], 96);
const SIX_TO_FOUR: Cidr = v6([0x2002, 0, 0, 0, 0, 0, 0, 0], 16);

/// The IPv4 address carried by an IPv4-mapped, NAT64 (RFC 6052 well-known prefix) or
/// 6to4 address.
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let bits = u128::from(ip);
    let addr = IpAddr::V6(ip);
    let low32 = |shift: u32| Ipv4Addr::from(((bits >> shift) & 0xffff_ffff) as u32);
    if MAPPED.contains(addr) || NAT64.contains(addr) {
        Some(low32(0))
    } else if SIX_TO_FOUR.contains(addr) {
        Some(low32(80))
    } else {
        None
    }
}

const CGNAT: Cidr = v4(100, 64, 0, 0, 10);
const METADATA_V4: Ipv4Addr = Ipv4Addr::new(169, 254, 169, 254);
// AWS IMDS over IPv6; it sits in fc00::/7 and is refused as private.
const METADATA_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254);

/// Extra context for the refusal message, e.g. " (cloud metadata)".
fn hint(ip: IpAddr) -> String {
    let mut notes = Vec::new();
    let v4 = match ip {
        IpAddr::V4(v4) => Some(v4),
        IpAddr::V6(v6) => embedded_v4(v6).inspect(|v4| notes.push(format!("embeds IPv4 {v4}"))),
    };
    if v4 == Some(METADATA_V4) || ip == IpAddr::V6(METADATA_V6) {
        notes.push("cloud metadata".to_owned());
    }
    if v4.is_some_and(|v4| CGNAT.contains(IpAddr::V4(v4))) {
        notes.push("CGNAT shared address space".to_owned());
    }
    if notes.is_empty() {
        String::new()
    } else {
        format!(" ({})", notes.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn cidr(s: &str) -> Cidr {
        s.parse().unwrap()
    }

    fn refusal(addr: &str) -> Result<(), Refusal> {
        DestinationPolicy::default().check(ip(addr))
    }

    #[track_caller]
    fn assert_refused(cases: &[&str], expected: Refuse) {
        for &addr in cases {
            assert_eq!(refusal(addr), Err(expected(ip(addr))), "{addr}");
        }
    }

    #[test]
    fn loopback_is_refused() {
        assert_refused(&["127.0.0.1", "127.255.255.254", "::1"], Refusal::Loopback);
    }

    #[test]
    fn link_local_is_refused() {
        let cases = ["169.254.0.1", "169.254.169.254", "fe80::1", "febf:ffff::1"];
        assert_refused(&cases, Refusal::LinkLocal);
    }

    #[test]
    fn private_is_refused() {
        let cases = [
            "10.0.0.1",
            "10.255.255.255",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "100.64.0.1",
            "100.127.255.255",
            "fc00::1",
            "fd12:3456::1",
            "fd00:ec2::254",
        ];
        assert_refused(&cases, Refusal::Private);
    }

    #[test]
    fn unspecified_is_refused() {
        assert_refused(&["0.0.0.0", "0.1.2.3", "::"], Refusal::Unspecified);
    }

    #[test]
    fn multicast_is_refused() {
        let cases = ["224.0.0.1", "239.255.255.250", "ff02::1", "ff0e::1"];
        assert_refused(&cases, Refusal::Multicast);
    }

    #[test]
    fn broadcast_is_refused() {
        assert_refused(&["255.255.255.255"], Refusal::Broadcast);
    }

    #[test]
    fn documentation_is_refused() {
        let cases = [
            "192.0.2.1",
            "198.51.100.7",
            "203.0.113.255",
            "2001:db8::1",
            "3fff:fff::1",
        ];
        assert_refused(&cases, Refusal::Documentation);
    }

    #[test]
    fn reserved_is_refused() {
        let cases = [
            "240.0.0.1",
            "255.255.255.254",
            "192.0.0.8",
            "198.18.0.1",
            "198.19.255.255",
            "192.88.99.1",
            "2001::1",
            "2001:1ff::1",
            "100::1",
            "::2",
            "::8.8.8.8",
            "fec0::1",
            "5f00::1",
            "64:ff9b:1::1",
            "4000::1",
        ];
        assert_refused(&cases, Refusal::Reserved);
    }

    #[test]
    fn ipv4_mapped_forms_inherit_the_ipv4_verdict() {
        assert_refused(&["::ffff:127.0.0.1"], Refusal::Loopback);
        assert_refused(&["::ffff:169.254.169.254"], Refusal::LinkLocal);
        assert_refused(&["::ffff:10.0.0.1", "::ffff:100.64.0.1"], Refusal::Private);
        assert_refused(&["::ffff:0.0.0.0"], Refusal::Unspecified);
        assert_refused(&["::ffff:224.0.0.1"], Refusal::Multicast);
        assert_refused(&["::ffff:255.255.255.255"], Refusal::Broadcast);
        assert_refused(&["::ffff:192.0.2.1"], Refusal::Documentation);
        assert_refused(&["::ffff:240.0.0.1"], Refusal::Reserved);
        assert_eq!(refusal("::ffff:8.8.8.8"), Ok(()));
    }

    #[test]
    fn nat64_and_6to4_forms_inherit_the_ipv4_verdict() {
        assert_refused(&["64:ff9b::7f00:1", "2002:7f00:1::1"], Refusal::Loopback);
        assert_refused(
            &["64:ff9b::a9fe:a9fe", "2002:a9fe:a9fe::"],
            Refusal::LinkLocal,
        );
        assert_refused(&["2002:c0a8:101::1"], Refusal::Private);
        assert_eq!(refusal("64:ff9b::808:808"), Ok(()));
        assert_eq!(refusal("2002:808:808::1"), Ok(()));
    }

    #[test]
    fn public_addresses_are_allowed() {
        let cases = [
            "8.8.8.8",
            "1.1.1.1",
            "9.255.255.255",
            "11.0.0.0",
            "100.63.255.255",
            "100.128.0.0",
            "172.15.255.255",
            "172.32.0.0",
            "169.253.255.255",
            "192.167.255.255",
            "198.20.0.0",
            "223.255.255.255",
            "2606:4700::1111",
            "2001:4860:4860::8888",
            "2001:200::1",
            "2a00:1450::1",
        ];
        for addr in cases {
            assert_eq!(refusal(addr), Ok(()), "{addr}");
        }
    }

    #[test]
    fn allowlist_overrides_every_category() {
        let policy = DestinationPolicy {
            allowed: vec![
                cidr("10.0.0.0/8"),
                cidr("127.0.0.1"),
                cidr("fd00::/8"),
                cidr("169.254.169.254/32"),
            ],
        };
        for addr in ["10.1.2.3", "127.0.0.1", "fd00::5", "169.254.169.254"] {
            assert_eq!(policy.check(ip(addr)), Ok(()), "{addr}");
        }
        assert_eq!(
            policy.check(ip("127.0.0.2")),
            Err(Refusal::Loopback(ip("127.0.0.2")))
        );
        assert_eq!(
            policy.check(ip("fc00::1")),
            Err(Refusal::Private(ip("fc00::1")))
        );
        let everything = DestinationPolicy {
            allowed: vec![cidr("0.0.0.0/0"), cidr("::/0")],
        };
        for addr in ["0.0.0.0", "255.255.255.255", "::1", "ff02::1"] {
            assert_eq!(everything.check(ip(addr)), Ok(()), "{addr}");
        }
    }

    #[test]
    fn ipv4_allowlist_entries_cover_mapped_forms_only() {
        let policy = DestinationPolicy {
            allowed: vec![cidr("10.0.0.0/8")],
        };
        assert_eq!(policy.check(ip("::ffff:10.0.0.1")), Ok(()));
        let nat64 = ip("64:ff9b::a00:1");
        assert_eq!(policy.check(nat64), Err(Refusal::Private(nat64)));
    }

    #[test]
    fn messages_name_the_address_and_the_reason() {
        let msg = |addr: &str| refusal(addr).unwrap_err().to_string();
        assert_eq!(
            msg("169.254.169.254"),
            "169.254.169.254 is link-local (cloud metadata); allow it with --allow-cidr"
        );
        assert_eq!(
            msg("::ffff:127.0.0.1"),
            "::ffff:127.0.0.1 is loopback (embeds IPv4 127.0.0.1); allow it with --allow-cidr"
        );
        assert_eq!(
            msg("100.64.1.1"),
            "100.64.1.1 is a private address (CGNAT shared address space); \
             allow it with --allow-cidr"
        );
        assert_eq!(
            msg("fd00:ec2::254"),
            "fd00:ec2::254 is a private address (cloud metadata); allow it with --allow-cidr"
        );
        assert_eq!(
            msg("10.0.0.1"),
            "10.0.0.1 is a private address; allow it with --allow-cidr"
        );
        assert_eq!(refusal("::1").unwrap_err().address(), ip("::1"));
    }

    #[test]
    fn rule_tables_hold_canonical_networks() {
        let rules = V4_RULES.iter().chain(V6_RULES.iter()).map(|(c, _)| *c);
        let extra = [GLOBAL_UNICAST, MAPPED, NAT64, SIX_TO_FOUR, CGNAT];
        for c in rules.chain(extra) {
            assert_eq!(Cidr::new(c.network(), c.prefix_len()), Ok(c), "{c}");
        }
    }

    #[test]
    fn parses_networks_and_hosts() {
        assert_eq!(cidr("10.0.0.0/8").to_string(), "10.0.0.0/8");
        assert_eq!(cidr("127.0.0.1").to_string(), "127.0.0.1/32");
        assert_eq!(cidr("::1").to_string(), "::1/128");
        assert_eq!(cidr("::1/128").prefix_len(), 128);
        assert_eq!(cidr(" fd00::/8 ").to_string(), "fd00::/8");
        assert_eq!(cidr("0.0.0.0/0").prefix_len(), 0);
    }

    #[test]
    fn host_bits_are_cleared() {
        assert_eq!(cidr("10.1.2.3/8"), cidr("10.0.0.0/8"));
        assert_eq!(cidr("172.31.9.9/12").to_string(), "172.16.0.0/12");
        assert_eq!(
            cidr("2001:db8:ffff::1/36").to_string(),
            "2001:db8:f000::/36"
        );
    }

    #[test]
    fn rejects_bad_prefix_lengths() {
        let too_long = |s: &str| s.parse::<Cidr>().unwrap_err();
        assert_eq!(
            too_long("10.0.0.0/33"),
            CidrParseError::PrefixTooLong { len: 33, max: 32 }
        );
        assert_eq!(
            too_long("::/129"),
            CidrParseError::PrefixTooLong { len: 129, max: 128 }
        );
        assert_eq!(
            too_long("::/99999999999"),
            CidrParseError::PrefixTooLong {
                len: u32::MAX,
                max: 128
            }
        );
        assert_eq!(
            too_long("10.0.0.0/256"),
            CidrParseError::PrefixTooLong { len: 256, max: 32 }
        );
        for bad in [
            "10.0.0.0/",
            "10.0.0.0/-1",
            "10.0.0.0/+8",
            "10.0.0.0/8/8",
            "10.0.0.0/ 8",
        ] {
            assert!(
                matches!(bad.parse::<Cidr>(), Err(CidrParseError::InvalidPrefix(_))),
                "{bad}"
            );
        }
        assert_eq!(
            Cidr::new(ip("10.0.0.0"), 40),
            Err(CidrParseError::PrefixTooLong { len: 40, max: 32 })
        );
    }

    #[test]
    fn rejects_garbage_addresses() {
        let cases = [
            "",
            "/8",
            "example.com/8",
            "10.0.0/8",
            "10.0.0.256/8",
            "010.0.0.1",
            "fe80::1%eth0/64",
            "[::1]/128",
            "::g/64",
        ];
        for bad in cases {
            assert!(
                matches!(bad.parse::<Cidr>(), Err(CidrParseError::InvalidAddress(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn contains_zero_prefix_matches_whole_family_only() {
        let all4 = cidr("0.0.0.0/0");
        let all6 = cidr("::/0");
        for addr in ["0.0.0.0", "8.8.8.8", "255.255.255.255"] {
            assert!(
                all4.contains(ip(addr)) && !all6.contains(ip(addr)),
                "{addr}"
            );
        }
        for addr in [
            "::",
            "2606:4700::1111",
            "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
        ] {
            assert!(
                all6.contains(ip(addr)) && !all4.contains(ip(addr)),
                "{addr}"
            );
        }
        assert!(!all4.contains(ip("::ffff:8.8.8.8")));
    }

    #[test]
    fn contains_full_prefix_matches_one_address() {
        let host4 = cidr("192.0.2.7/32");
        assert!(host4.contains(ip("192.0.2.7")));
        assert!(!host4.contains(ip("192.0.2.6")) && !host4.contains(ip("192.0.2.8")));
        let host6 = cidr("2001:db8::7/128");
        assert!(host6.contains(ip("2001:db8::7")));
        assert!(!host6.contains(ip("2001:db8::6")) && !host6.contains(ip("2001:db8::8")));
    }

    #[test]
    fn contains_non_byte_aligned_prefixes() {
        let net = cidr("172.16.0.0/12");
        assert!(net.contains(ip("172.16.0.0")) && net.contains(ip("172.31.255.255")));
        assert!(!net.contains(ip("172.15.255.255")) && !net.contains(ip("172.32.0.0")));
        let net = cidr("100.64.0.0/10");
        assert!(net.contains(ip("100.127.255.255")) && !net.contains(ip("100.128.0.0")));
        let net = cidr("10.0.0.0/31");
        assert!(net.contains(ip("10.0.0.1")) && !net.contains(ip("10.0.0.2")));
        let net = cidr("fc00::/7");
        assert!(net.contains(ip("fdff::1")) && !net.contains(ip("fe00::")));
        let net = cidr("2001:db8::/65");
        assert!(net.contains(ip("2001:db8::7fff:ffff:ffff:ffff")));
        assert!(!net.contains(ip("2001:db8::8000:0:0:0")));
        let net = cidr("::/127");
        assert!(net.contains(ip("::1")) && !net.contains(ip("::2")));
    }
}
