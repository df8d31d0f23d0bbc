//! Which destinations are refused. Pure: no I/O, so every rule is unit-tested.
//!
//! A URL a user chooses could otherwise make Flowline probe its own loopback (etcd, the
//! kube-apiserver, the operator's own ports), the cluster network or the cloud metadata
//! service, and hand the answer back in a run output or a delivery record.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::{IpNet, Ipv4Net, Ipv6Net};

/// How the operator allows a refused destination; every refusal message ends with it.
const ALLOW: &str = "allow it with --allow-cidr";

/// Why an address is not a public destination (IANA special-purpose registries).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Category {
    Loopback,
    LinkLocal,
    Private,
    Cgnat,
    Unspecified,
    Multicast,
    Broadcast,
    Documentation,
    Reserved,
}

impl Category {
    /// Short name, for lists: "private", "link-local".
    pub fn name(self) -> &'static str {
        match self {
            Self::Loopback => "loopback",
            Self::LinkLocal => "link-local",
            Self::Private => "private",
            Self::Cgnat => "CGNAT",
            Self::Unspecified => "unspecified",
            Self::Multicast => "multicast",
            Self::Broadcast => "broadcast",
            Self::Documentation => "documentation",
            Self::Reserved => "reserved",
        }
    }

    /// Completes "<address> is …".
    fn describe(self) -> &'static str {
        match self {
            Self::Loopback => "loopback",
            Self::LinkLocal => "link-local",
            Self::Private => "a private address",
            Self::Cgnat => "in the CGNAT shared address space",
            Self::Unspecified => "unspecified (\"this host\")",
            Self::Multicast => "multicast",
            Self::Broadcast => "the broadcast address",
            Self::Documentation => "reserved for documentation",
            Self::Reserved => "in a reserved, non-global range",
        }
    }
}

/// Why a destination was refused. The message names the rule and the remedy, and never
/// an address found by resolving a name: that would map the internal network for
/// whoever chose the name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// An IP address written in the URL (by the user, or by a server in a redirect).
    #[error("{ip} is {}{}; {ALLOW}", category.describe(), hint(*ip))]
    Address { ip: IpAddr, category: Category },
    /// `localhost` or a `*.localhost` name: loopback by definition, never looked up.
    #[error("{host} is a loopback name; {ALLOW}")]
    LoopbackName { host: String },
    /// Every address the name resolved to is refused.
    #[error(
        "{host} resolves only to refused addresses ({}); {ALLOW}",
        names(categories)
    )]
    Resolved {
        host: String,
        categories: Vec<Category>,
    },
}

fn names(categories: &[Category]) -> String {
    let names: Vec<&str> = categories.iter().map(|c| c.name()).collect();
    names.join(", ")
}

/// The addresses a loopback name stands for (RFC 6761: never sent to DNS).
const LOOPBACK_ADDRESSES: [IpAddr; 2] = [
    IpAddr::V4(Ipv4Addr::LOCALHOST),
    IpAddr::V6(Ipv6Addr::LOCALHOST),
];

/// `localhost`, `*.localhost`, any case, with or without the trailing root dot.
pub fn is_loopback_name(host: &str) -> bool {
    let host = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
    host == "localhost" || host.ends_with(".localhost")
}

/// Refuses non-public destinations unless an operator-listed network contains them.
/// Check every resolved address, then connect to a checked address itself: resolving
/// again would let DNS rebinding swap in an internal address after the check.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DestinationPolicy {
    /// Networks allowed although a rule refuses them (`--allow-cidr`).
    pub allowed: Vec<IpNet>,
}

/// A `--allow-cidr` value that is neither a network nor an address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is neither a network (10.0.0.0/8, fd00::/8) nor an IP address")]
pub struct CidrError(String);

/// `addr/len` (host bits cleared, as Go's `net.ParseCIDR` does) or a bare address meaning
/// that one host.
pub fn parse_cidr(text: &str) -> Result<IpNet, CidrError> {
    let text = text.trim();
    let parsed = if text.contains('/') {
        text.parse::<IpNet>().ok().map(|net| net.trunc())
    } else {
        text.parse::<IpAddr>().ok().map(IpNet::from)
    };
    parsed.ok_or_else(|| CidrError(text.to_owned()))
}

impl DestinationPolicy {
    pub fn allowing(allowed: Vec<IpNet>) -> Self {
        Self { allowed }
    }

    /// Parses a comma-separated list, as `--allow-cidr` and the step pods' environment
    /// carry it; empty means nothing is allowed beyond public addresses.
    pub fn from_list(list: &str) -> Result<Self, CidrError> {
        let allowed = list
            .split(',')
            .filter(|part| !part.trim().is_empty())
            .map(parse_cidr)
            .collect::<Result<_, _>>()?;
        Ok(Self { allowed })
    }

    /// The inverse of [`Self::from_list`].
    pub fn to_list(&self) -> String {
        let parts: Vec<String> = self.allowed.iter().map(IpNet::to_string).collect();
        parts.join(",")
    }

    /// The allow-list wins over every rule, loopback and unspecified included. An
    /// IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) also matches IPv4 entries, because it
    /// reaches the same IPv4 host.
    pub fn check(&self, ip: IpAddr) -> Result<(), Refusal> {
        match self.refused_category(ip) {
            Some(category) => Err(Refusal::Address { ip, category }),
            None => Ok(()),
        }
    }

    fn refused_category(&self, ip: IpAddr) -> Option<Category> {
        let canonical = ip.to_canonical();
        if self
            .allowed
            .iter()
            .any(|net| net.contains(&ip) || net.contains(&canonical))
        {
            return None;
        }
        classify(ip)
    }

    /// Checks the host of a URL before any connection: an IP literal against the rules, a
    /// loopback name as the loopback addresses it stands for. Other names are checked when
    /// they are resolved ([`Self::admit`]).
    pub fn check_host(&self, host: &url::Host<&str>) -> Result<(), Refusal> {
        match *host {
            url::Host::Ipv4(ip) => self.check(IpAddr::V4(ip)),
            url::Host::Ipv6(ip) => self.check(IpAddr::V6(ip)),
            url::Host::Domain(name) if is_loopback_name(name) => {
                self.admit(name, LOOPBACK_ADDRESSES).map(drop)
            }
            url::Host::Domain(_) => Ok(()),
        }
    }

    /// The addresses of `host` a connection may use: those of `found` the policy allows.
    /// Refused when all of them are refused, without naming any.
    pub fn admit(
        &self,
        host: &str,
        found: impl IntoIterator<Item = IpAddr>,
    ) -> Result<Vec<IpAddr>, Refusal> {
        let mut allowed = Vec::new();
        let mut categories = Vec::new();
        for ip in found {
            match self.refused_category(ip) {
                None => allowed.push(ip),
                Some(category) if !categories.contains(&category) => categories.push(category),
                Some(_) => {}
            }
        }
        if !allowed.is_empty() || categories.is_empty() {
            return Ok(allowed);
        }
        let host = host.to_owned();
        Err(if is_loopback_name(&host) {
            Refusal::LoopbackName { host }
        } else {
            Refusal::Resolved { host, categories }
        })
    }

    /// The addresses a loopback name is connected to, instead of asking DNS.
    pub fn loopback_addresses() -> [IpAddr; 2] {
        LOOPBACK_ADDRESSES
    }
}

const fn v4(a: u8, b: u8, c: u8, d: u8, prefix_len: u8) -> Ipv4Net {
    Ipv4Net::new_assert(Ipv4Addr::new(a, b, c, d), prefix_len)
}

const fn v6(segments: [u16; 8], prefix_len: u8) -> Ipv6Net {
    let [a, b, c, d, e, f, g, h] = segments;
    Ipv6Net::new_assert(Ipv6Addr::new(a, b, c, d, e, f, g, h), prefix_len)
}

/// IANA IPv4 special-purpose registry; first match wins, so broadcast precedes 240/4.
/// 0/8 is "this network": Linux connects 0.x.y.z to the local host.
const V4_RULES: [(Ipv4Net, Category); 16] = [
    (v4(0, 0, 0, 0, 8), Category::Unspecified),
    (v4(10, 0, 0, 0, 8), Category::Private),
    (v4(100, 64, 0, 0, 10), Category::Cgnat),
    (v4(127, 0, 0, 0, 8), Category::Loopback),
    (v4(169, 254, 0, 0, 16), Category::LinkLocal),
    (v4(172, 16, 0, 0, 12), Category::Private),
    (v4(192, 0, 0, 0, 24), Category::Reserved),
    (v4(192, 0, 2, 0, 24), Category::Documentation),
    (v4(192, 88, 99, 0, 24), Category::Reserved),
    (v4(192, 168, 0, 0, 16), Category::Private),
    (v4(198, 18, 0, 0, 15), Category::Reserved),
    (v4(198, 51, 100, 0, 24), Category::Documentation),
    (v4(203, 0, 113, 0, 24), Category::Documentation),
    (v4(224, 0, 0, 0, 4), Category::Multicast),
    (v4(255, 255, 255, 255, 32), Category::Broadcast),
    (v4(240, 0, 0, 0, 4), Category::Reserved),
];

/// Checked after `::`, `::1` and the IPv4-embedding prefixes; anything outside 2000::/3
/// (global unicast) is refused afterwards as reserved.
const V6_RULES: [(Ipv6Net, Category); 6] = [
    (v6([0xff00, 0, 0, 0, 0, 0, 0, 0], 8), Category::Multicast),
    (v6([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10), Category::LinkLocal),
    (v6([0xfc00, 0, 0, 0, 0, 0, 0, 0], 7), Category::Private),
    (
        v6([0x2001, 0xdb8, 0, 0, 0, 0, 0, 0], 32),
        Category::Documentation,
    ),
    (
        v6([0x3fff, 0, 0, 0, 0, 0, 0, 0], 20),
        Category::Documentation,
    ),
    (v6([0x2001, 0, 0, 0, 0, 0, 0, 0], 23), Category::Reserved),
];

const GLOBAL_UNICAST: Ipv6Net = v6([0x2000, 0, 0, 0, 0, 0, 0, 0], 3);

fn classify(ip: IpAddr) -> Option<Category> {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

fn classify_v4(ip: Ipv4Addr) -> Option<Category> {
    V4_RULES
        .iter()
        .find(|(net, _)| net.contains(&ip))
        .map(|&(_, category)| category)
}

fn classify_v6(ip: Ipv6Addr) -> Option<Category> {
    if ip.is_unspecified() {
        return Some(Category::Unspecified);
    }
    if ip.is_loopback() {
        return Some(Category::Loopback);
    }
    // These forms are routed to (or translated into) the embedded IPv4 host, so they
    // inherit its verdict; a public embedded address is a legitimate destination.
    if let Some(embedded) = embedded_v4(ip) {
        return classify_v4(embedded);
    }
    if let Some(&(_, category)) = V6_RULES.iter().find(|(net, _)| net.contains(&ip)) {
        return Some(category);
    }
    (!GLOBAL_UNICAST.contains(&ip)).then_some(Category::Reserved)
}

const MAPPED: Ipv6Net = v6([0, 0, 0, 0, 0, 0xffff, 0, 0], 96);
const NAT64: Ipv6Net = v6([0x64, 0xff9b, 0, 0, 0, 0, 0, 0], 96);
const SIX_TO_FOUR: Ipv6Net = v6([0x2002, 0, 0, 0, 0, 0, 0, 0], 16);

/// The IPv4 address carried by an IPv4-mapped, NAT64 (RFC 6052 well-known prefix) or
/// 6to4 address.
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let bits = u128::from(ip);
    let low32 = |shift: u32| Ipv4Addr::from(((bits >> shift) & 0xffff_ffff) as u32);
    if MAPPED.contains(&ip) || NAT64.contains(&ip) {
        Some(low32(0))
    } else if SIX_TO_FOUR.contains(&ip) {
        Some(low32(80))
    } else {
        None
    }
}

const METADATA_V4: Ipv4Addr = Ipv4Addr::new(169, 254, 169, 254);
// AWS IMDS over IPv6; it sits in fc00::/7 and is refused as private.
const METADATA_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254);

/// Extra context for the message of a written address, e.g. " (cloud metadata)".
fn hint(ip: IpAddr) -> String {
    let mut notes = Vec::new();
    let v4 = match ip {
        IpAddr::V4(v4) => Some(v4),
        IpAddr::V6(v6) => embedded_v4(v6).inspect(|v4| notes.push(format!("embeds IPv4 {v4}"))),
    };
    if v4 == Some(METADATA_V4) || ip == IpAddr::V6(METADATA_V6) {
        notes.push("cloud metadata".to_owned());
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

    fn net(s: &str) -> IpNet {
        parse_cidr(s).unwrap()
    }

    fn refusal(addr: &str) -> Result<(), Refusal> {
        DestinationPolicy::default().check(ip(addr))
    }

    #[track_caller]
    fn assert_refused(cases: &[&str], expected: Category) {
        for &addr in cases {
            let want = Refusal::Address {
                ip: ip(addr),
                category: expected,
            };
            assert_eq!(refusal(addr), Err(want), "{addr}");
        }
    }

    #[test]
    fn loopback_is_refused() {
        assert_refused(&["127.0.0.1", "127.255.255.254", "::1"], Category::Loopback);
    }

    #[test]
    fn link_local_and_metadata_are_refused() {
        let cases = ["169.254.0.1", "169.254.169.254", "fe80::1", "febf:ffff::1"];
        assert_refused(&cases, Category::LinkLocal);
    }

    #[test]
    fn private_is_refused() {
        let cases = [
            "10.0.0.1",
            "10.255.255.255",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "fc00::1",
            "fd12:3456::1",
            "fd00:ec2::254",
        ];
        assert_refused(&cases, Category::Private);
    }

    #[test]
    fn cgnat_is_refused() {
        assert_refused(&["100.64.0.1", "100.127.255.255"], Category::Cgnat);
    }

    #[test]
    fn unspecified_is_refused() {
        assert_refused(&["0.0.0.0", "0.1.2.3", "::"], Category::Unspecified);
    }

    #[test]
    fn multicast_is_refused() {
        let cases = ["224.0.0.1", "239.255.255.250", "ff02::1", "ff0e::1"];
        assert_refused(&cases, Category::Multicast);
    }

    #[test]
    fn broadcast_is_refused() {
        assert_refused(&["255.255.255.255"], Category::Broadcast);
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
        assert_refused(&cases, Category::Documentation);
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
        assert_refused(&cases, Category::Reserved);
    }

    #[test]
    fn ipv4_mapped_forms_inherit_the_ipv4_verdict() {
        assert_refused(&["::ffff:127.0.0.1"], Category::Loopback);
        assert_refused(&["::ffff:169.254.169.254"], Category::LinkLocal);
        assert_refused(&["::ffff:10.0.0.1"], Category::Private);
        assert_refused(&["::ffff:100.64.0.1"], Category::Cgnat);
        assert_refused(&["::ffff:0.0.0.0"], Category::Unspecified);
        assert_refused(&["::ffff:224.0.0.1"], Category::Multicast);
        assert_refused(&["::ffff:255.255.255.255"], Category::Broadcast);
        assert_refused(&["::ffff:192.0.2.1"], Category::Documentation);
        assert_refused(&["::ffff:240.0.0.1"], Category::Reserved);
        assert_eq!(refusal("::ffff:8.8.8.8"), Ok(()));
    }

    #[test]
    fn nat64_and_6to4_forms_inherit_the_ipv4_verdict() {
        assert_refused(&["64:ff9b::7f00:1", "2002:7f00:1::1"], Category::Loopback);
        assert_refused(
            &["64:ff9b::a9fe:a9fe", "2002:a9fe:a9fe::"],
            Category::LinkLocal,
        );
        assert_refused(&["2002:c0a8:101::1"], Category::Private);
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
        let policy = DestinationPolicy::allowing(vec![
            net("10.0.0.0/8"),
            net("127.0.0.1"),
            net("fd00::/8"),
            net("169.254.169.254/32"),
        ]);
        for addr in ["10.1.2.3", "127.0.0.1", "fd00::5", "169.254.169.254"] {
            assert_eq!(policy.check(ip(addr)), Ok(()), "{addr}");
        }
        let refused = |addr: &str| policy.check(ip(addr)).unwrap_err();
        assert!(matches!(
            refused("127.0.0.2"),
            Refusal::Address {
                category: Category::Loopback,
                ..
            }
        ));
        assert!(matches!(
            refused("fc00::1"),
            Refusal::Address {
                category: Category::Private,
                ..
            }
        ));
        let everything = DestinationPolicy::allowing(vec![net("0.0.0.0/0"), net("::/0")]);
        for addr in ["0.0.0.0", "255.255.255.255", "::1", "ff02::1"] {
            assert_eq!(everything.check(ip(addr)), Ok(()), "{addr}");
        }
    }

    #[test]
    fn ipv4_allowlist_entries_cover_mapped_forms_only() {
        let policy = DestinationPolicy::allowing(vec![net("10.0.0.0/8")]);
        assert_eq!(policy.check(ip("::ffff:10.0.0.1")), Ok(()));
        assert!(
            policy.check(ip("64:ff9b::a00:1")).is_err(),
            "NAT64 is not mapped"
        );
        assert!(
            !net("0.0.0.0/0").contains(&ip("::ffff:8.8.8.8")),
            "a network never contains the other family"
        );
    }

    #[test]
    fn messages_name_a_written_address_and_the_rule() {
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
            "100.64.1.1 is in the CGNAT shared address space; allow it with --allow-cidr"
        );
        assert_eq!(
            msg("fd00:ec2::254"),
            "fd00:ec2::254 is a private address (cloud metadata); allow it with --allow-cidr"
        );
        assert_eq!(
            msg("10.0.0.1"),
            "10.0.0.1 is a private address; allow it with --allow-cidr"
        );
    }

    #[test]
    fn loopback_names_are_refused_without_a_lookup() {
        let policy = DestinationPolicy::default();
        for name in ["localhost", "LocalHost.", "api.localhost", "a.b.localhost."] {
            let host = url::Host::Domain(name);
            assert_eq!(
                policy.check_host(&host),
                Err(Refusal::LoopbackName { host: name.into() }),
                "{name}"
            );
        }
        assert_eq!(
            policy
                .check_host(&url::Host::Domain("localhost"))
                .unwrap_err()
                .to_string(),
            "localhost is a loopback name; allow it with --allow-cidr"
        );
        for name in ["localhost.example", "notlocalhost", "example.com"] {
            assert_eq!(
                policy.check_host(&url::Host::Domain(name)),
                Ok(()),
                "{name}"
            );
        }
        // Allowed loopback admits the name, but only with the allowed family.
        let v4_only = DestinationPolicy::allowing(vec![net("127.0.0.1")]);
        assert_eq!(v4_only.check_host(&url::Host::Domain("localhost")), Ok(()));
        assert_eq!(
            v4_only.admit("localhost", DestinationPolicy::loopback_addresses()),
            Ok(vec![ip("127.0.0.1")])
        );
    }

    #[test]
    fn written_literals_are_checked_as_addresses() {
        let policy = DestinationPolicy::default();
        let check = |url: &str| policy.check_host(&url::Url::parse(url).unwrap().host().unwrap());
        // The URL parser normalises every spelling of an IPv4 address first.
        for url in [
            "http://127.0.0.1/",
            "http://2130706433/",
            "http://0x7f.1/",
            "http://127.1/",
            "http://[::ffff:127.0.0.1]/",
            "http://[::1]/",
        ] {
            let refused = check(url).unwrap_err();
            assert!(
                matches!(
                    refused,
                    Refusal::Address {
                        category: Category::Loopback,
                        ..
                    }
                ),
                "{url}: {refused}"
            );
        }
        assert_eq!(check("http://93.184.215.14/"), Ok(()));
    }

    #[test]
    fn resolved_addresses_are_filtered_and_never_named() {
        let policy = DestinationPolicy::default();
        let found = [ip("10.0.0.7"), ip("192.168.4.4"), ip("fd00::9")];
        let refused = policy.admit("internal.example", found).unwrap_err();
        assert_eq!(
            refused.to_string(),
            "internal.example resolves only to refused addresses (private); \
             allow it with --allow-cidr"
        );
        let mixed = [ip("127.0.0.1"), ip("169.254.169.254"), ip("10.1.1.1")];
        let text = policy
            .admit("rebind.example", mixed)
            .unwrap_err()
            .to_string();
        assert!(text.contains("(loopback, link-local, private)"), "{text}");
        for secret in ["127.0.0.1", "169.254", "10.1.1.1"] {
            assert!(!text.contains(secret), "{text} names {secret}");
        }
        // Public addresses survive; the refused ones are never handed to the connector.
        let some_public = [ip("10.0.0.1"), ip("8.8.8.8"), ip("::1"), ip("2606:4700::1")];
        assert_eq!(
            policy.admit("mixed.example", some_public),
            Ok(vec![ip("8.8.8.8"), ip("2606:4700::1")])
        );
        assert_eq!(policy.admit("empty.example", []), Ok(vec![]));
        let allowed = DestinationPolicy::allowing(vec![net("10.0.0.0/8")]);
        assert_eq!(
            allowed.admit("internal.example", found),
            Ok(vec![ip("10.0.0.7")])
        );
    }

    #[test]
    fn rule_tables_hold_canonical_networks() {
        let v4 = V4_RULES.iter().map(|(n, _)| IpNet::V4(*n));
        let v6 = V6_RULES.iter().map(|(n, _)| IpNet::V6(*n));
        let extra = [GLOBAL_UNICAST, MAPPED, NAT64, SIX_TO_FOUR].map(IpNet::V6);
        for n in v4.chain(v6).chain(extra) {
            assert_eq!(n.trunc(), n, "{n} has host bits set");
        }
    }

    #[test]
    fn parses_networks_and_hosts() {
        assert_eq!(net("10.0.0.0/8").to_string(), "10.0.0.0/8");
        assert_eq!(net("127.0.0.1").to_string(), "127.0.0.1/32");
        assert_eq!(net("::1").to_string(), "::1/128");
        assert_eq!(net(" fd00::/8 ").to_string(), "fd00::/8");
        assert_eq!(net("0.0.0.0/0").prefix_len(), 0);
        assert_eq!(
            net("10.1.2.3/8"),
            net("10.0.0.0/8"),
            "host bits are cleared"
        );
        assert_eq!(net("2001:db8:ffff::1/36").to_string(), "2001:db8:f000::/36");
    }

    #[test]
    fn rejects_what_is_not_a_network() {
        let cases = [
            "",
            "/8",
            "example.com/8",
            "10.0.0/8",
            "10.0.0.256/8",
            "10.0.0.0/33",
            "::/129",
            "::/99999999999",
            "10.0.0.0/",
            "10.0.0.0/-1",
            "10.0.0.0/+8",
            "10.0.0.0/8/8",
            "10.0.0.0/ 8",
            "fe80::1%eth0/64",
            "[::1]/128",
            "::g/64",
        ];
        for bad in cases {
            let err = parse_cidr(bad).unwrap_err();
            assert!(
                err.to_string().contains("neither a network"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn lists_round_trip_through_the_environment_form() {
        let policy = DestinationPolicy::from_list("10.0.0.0/8, 127.0.0.1,,fd00::/8").unwrap();
        assert_eq!(policy.to_list(), "10.0.0.0/8,127.0.0.1/32,fd00::/8");
        assert_eq!(DestinationPolicy::from_list(&policy.to_list()), Ok(policy));
        assert_eq!(
            DestinationPolicy::from_list(""),
            Ok(DestinationPolicy::default())
        );
        assert!(DestinationPolicy::from_list("10.0.0.0/8,nope").is_err());
    }
}
