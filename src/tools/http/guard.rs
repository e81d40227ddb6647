//! Where an HTTP tool may connect. Loopback, private, link-local, shared (CGNAT), multicast,
//! reserved and cloud-metadata addresses are refused unless the operator allowed them, and the
//! check happens on the addresses a name actually resolved to, inside the connection: the
//! resolver below is the client's only resolver, so the address checked is the address
//! connected to (a name that answers public first and private next cannot slip through).
//! URLs with an IP literal (`http://2130706433/`, `http://[::ffff:7f00:1]/`, as the `url`
//! crate normalises them) are checked before the request and at every redirect.

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;

use reqwest::Url;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// A refusal, carried through reqwest's error chain so the tool can tell it from a network
/// failure.
#[derive(Debug)]
pub struct Refused(pub String);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refused {}

/// The entries of `tools.http_allow` are parsed by the configuration, which checks them as
/// it loads; what they allow is decided here.
use crate::config::HttpAllowed as Allowed;

/// The operator's policy (`tools.http_allow`, `tools.http_allow_private`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Destinations {
    allow_private: bool,
    allow: Vec<Allowed>,
}

impl Destinations {
    /// Parses the allow list: `host`, `host:port`, `[v6]:port`, `10.0.0.0/8`, `fd00::/8`.
    pub fn new(allow_private: bool, allow: &[String]) -> Result<Destinations, String> {
        let allow = allow
            .iter()
            .map(|a| Allowed::parse(a))
            .collect::<Result<_, _>>()?;
        Ok(Destinations {
            allow_private,
            allow,
        })
    }

    fn ip_allowed(&self, ip: IpAddr, port: Option<u16>) -> bool {
        self.allow_private
            || is_public(ip)
            || self.allow.iter().any(|a| match a {
                Allowed::Net(net, bits) => in_net(ip, *net, *bits),
                Allowed::Host(h, p) => {
                    h.parse::<IpAddr>().ok() == Some(ip) && p.is_none_or(|p| Some(p) == port)
                }
            })
    }

    fn host_allowed(&self, host: &str, port: Option<u16>) -> bool {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        self.allow.iter().any(|a| match a {
            Allowed::Host(h, p) => *h == host && p.is_none_or(|p| Some(p) == port),
            Allowed::Net(..) => false,
        })
    }

    /// Checks a URL before it is requested (the first one and every redirect).
    pub fn check_url(&self, url: &Url) -> Result<(), Refused> {
        if !matches!(url.scheme(), "http" | "https") {
            return Err(Refused(format!("`{}` URLs are not allowed", url.scheme())));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(Refused("URLs with credentials are not allowed".into()));
        }
        let port = url.port_or_known_default();
        let ip = match url.host() {
            Some(url::Host::Ipv4(v4)) => IpAddr::V4(v4),
            Some(url::Host::Ipv6(v6)) => IpAddr::V6(v6),
            Some(url::Host::Domain(name)) => return self.check_name_port(name, port),
            None => return Err(Refused("the URL has no host".into())),
        };
        if self.ip_allowed(ip, port) {
            Ok(())
        } else {
            Err(Refused(format!(
                "{ip} is not a public address (allow it with tools.http_allow)"
            )))
        }
    }

    /// A name listed only with ports (`localhost:9000`) is allowed on those ports alone. The
    /// resolver below learns a name without its port, so the port is judged here, before the
    /// request and at every redirect: a listed name on another port is refused outright.
    fn check_name_port(&self, name: &str, port: Option<u16>) -> Result<(), Refused> {
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        let listed: Vec<Option<u16>> = self
            .allow
            .iter()
            .filter_map(|a| match a {
                Allowed::Host(h, p) if *h == name => Some(*p),
                _ => None,
            })
            .collect();
        if listed.is_empty() || listed.iter().any(|p| p.is_none() || *p == port) {
            return Ok(());
        }
        let open: Vec<String> = listed.iter().flatten().map(u16::to_string).collect();
        Err(Refused(format!(
            "`{name}` is allowed on port {} only (tools.http_allow)",
            open.join(", ")
        )))
    }

    /// Checks what a name resolved to: every address must be allowed, or the name itself.
    fn check_resolved(&self, name: &str, ips: &[IpAddr]) -> Result<(), Refused> {
        if self.host_allowed(name, None)
            || self
                .allow
                .iter()
                .any(|a| matches!(a, Allowed::Host(h, Some(_)) if h == name))
        {
            return Ok(());
        }
        match ips.iter().find(|ip| !self.ip_allowed(**ip, None)) {
            Some(ip) => Err(Refused(format!(
                "`{name}` resolves to {ip}, which is not a public address"
            ))),
            None if ips.is_empty() => Err(Refused(format!("`{name}` did not resolve"))),
            None => Ok(()),
        }
    }
}

fn in_net(ip: IpAddr, net: IpAddr, bits: u8) -> bool {
    match (ip, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(bits)).unwrap_or(0);
            u32::from(a) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(bits)).unwrap_or(0);
            u128::from(a) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}

/// A globally routable unicast address: not loopback, private, link-local (cloud metadata
/// included), shared, multicast, broadcast, documentation, benchmarking or reserved. IPv6 forms
/// that carry an IPv4 address are judged by that address, since a translator or tunnel on the
/// way delivers them there: IPv4-mapped (`::ffff:0:0/96`), IPv4-translated (`::ffff:0:0:0/96`),
/// IPv4-compatible (`::/96`), NAT64 (`64:ff9b::/96`, and the local-use `64:ff9b:1::/48` at
/// every place RFC 6052 allows), 6to4 (`2002::/16`) and Teredo (`2001::/32`: its server and
/// its client). This is the one judgement of an address: HTTP tools, their redirects and
/// resolved names, and completion webhooks all ask it through [`Destinations`].
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => public_v4(v4),
        IpAddr::V6(v6) => public_v6(v6),
    }
}

fn public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    !(ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_broadcast()
        || ip.is_multicast()
        || ip.is_documentation()
        || a == 0
        || a >= 240
        || (a == 100 && (64..128).contains(&b))
        || (a == 192 && b == 0 && c == 0)
        || (a == 198 && (18..20).contains(&b)))
}

/// The IPv4 address RFC 6052 places after a NAT64 prefix of `prefix_bits` (32 to 96, a
/// multiple of 8): the 32 bits that follow it, skipping bits 64-71, which stay zero.
fn rfc6052_v4(ip: Ipv6Addr, prefix_bits: usize) -> Ipv4Addr {
    let octets = ip.octets();
    let mut carried = (prefix_bits / 8..16).filter(|&i| i != 8).map(|i| octets[i]);
    let mut next = || carried.next().unwrap_or(0);
    Ipv4Addr::new(next(), next(), next(), next())
}

fn public_v6(ip: Ipv6Addr) -> bool {
    let seg = ip.segments();
    let embedded = |hi: usize| Ipv4Addr::from((u32::from(seg[hi]) << 16) | u32::from(seg[hi + 1]));
    if let Some(v4) = ip.to_ipv4_mapped() {
        return public_v4(v4);
    }
    if seg[..4] == [0; 4] && seg[4] == 0xffff && seg[5] == 0 {
        return public_v4(embedded(6)); // IPv4-translated (SIIT)
    }
    if seg[..6] == [0; 6] {
        // `::a.b.c.d` (IPv4-compatible), `::1` and `::` among them.
        return !ip.is_loopback() && !ip.is_unspecified() && public_v4(embedded(6));
    }
    if seg[..2] == [0x64, 0xff9b] {
        return match seg[2] {
            // The well-known prefix is used with 96 bits only.
            0 if seg[3..6] == [0; 3] => public_v4(embedded(6)),
            // The local-use prefix may be any length from 48 bits: every place must be public.
            1 => [48, 56, 64, 96]
                .into_iter()
                .all(|bits| public_v4(rfc6052_v4(ip, bits))),
            _ => false, // the rest of 64:ff9b::/32 is not assigned
        };
    }
    if seg[0] == 0x2002 {
        return public_v4(embedded(1)); // 6to4
    }
    if seg[..2] == [0x2001, 0] {
        // Teredo: the server's address, then the client's with every bit flipped.
        let client = Ipv4Addr::from(!((u32::from(seg[6]) << 16) | u32::from(seg[7])));
        return public_v4(embedded(2)) && public_v4(client);
    }
    !(ip.is_multicast()
        || (seg[0] & 0xfe00) == 0xfc00 // unique local, fd00:ec2::254 (metadata) among them
        || (seg[0] & 0xffc0) == 0xfe80 // link-local
        || (seg[0] & 0xffc0) == 0xfec0 // site-local
        || (seg[0] == 0x2001 && seg[1] == 0x0db8) // documentation
        || (seg[0] == 0x2001 && seg[1] == 0x0002 && seg[2] == 0) // benchmarking
        || (seg[0] == 0x3fff && seg[1] < 0x1000) // documentation (3fff::/20)
        || seg[0] == 0x0100) // discard
}

type Lookup = Arc<
    dyn Fn(String) -> Pin<Box<dyn Future<Output = std::io::Result<Vec<IpAddr>>> + Send>>
        + Send
        + Sync,
>;

/// The HTTP tools' resolver: looks a name up, then refuses it unless every address is allowed.
#[derive(Clone)]
pub struct GuardedResolver {
    policy: Arc<Destinations>,
    lookup: Lookup,
}

impl GuardedResolver {
    /// With the system's resolver.
    pub fn new(policy: Arc<Destinations>) -> GuardedResolver {
        let lookup: Lookup = Arc::new(|name: String| {
            Box::pin(async move {
                let addrs = tokio::net::lookup_host((name.as_str(), 0)).await?;
                Ok(addrs.map(|a| a.ip()).collect())
            })
        });
        GuardedResolver { policy, lookup }
    }

    /// With another lookup (tests: names that answer differently each time).
    #[cfg(test)]
    pub fn with_lookup(policy: Arc<Destinations>, lookup: Lookup) -> GuardedResolver {
        GuardedResolver { policy, lookup }
    }

    /// The addresses to connect to, or the refusal.
    pub async fn addresses(
        &self,
        name: &str,
    ) -> Result<Vec<IpAddr>, Box<dyn std::error::Error + Send + Sync>> {
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        let ips = (self.lookup)(name.clone()).await?;
        self.policy.check_resolved(&name, &ips)?;
        Ok(ips)
    }
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let this = self.clone();
        let name = name.as_str().to_owned();
        Box::pin(async move {
            let ips = this.addresses(&name).await?;
            let addrs: Addrs = Box::new(ips.into_iter().map(|ip| SocketAddr::new(ip, 0)));
            Ok(addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> Url {
        Url::parse(s).unwrap()
    }

    /// The attempt corpus: every way of writing an address that is not public.
    #[test]
    fn literal_addresses_that_are_not_public_are_refused_however_written() {
        let strict = Destinations::default();
        for attempt in [
            "http://127.0.0.1/",
            "http://2130706433/",
            "http://0x7f000001/",
            "http://0x7f.0.0.1/",
            "http://0177.0.0.1/",
            "http://127.1/",
            "http://0/",
            "http://0.0.0.0:8080/",
            "http://10.1.2.3/",
            "http://172.16.0.1/",
            "http://192.168.1.1/",
            "http://100.64.0.1/",
            "http://169.254.169.254/latest/meta-data/",
            "http://[::1]/",
            "http://[::]/",
            "http://[::ffff:127.0.0.1]/",
            "http://[::ffff:7f00:1]/",
            "http://[::ffff:a9fe:a9fe]/",
            "http://[::127.0.0.1]/",
            "http://[64:ff9b::a9fe:a9fe]/",
            "http://[2002:7f00:1::]/",
            "http://[fd00:ec2::254]/",
            "http://[fe80::1]/",
            "http://[fc00::1]/",
            "http://224.0.0.1/",
            "http://255.255.255.255/",
            "http://example.com@127.0.0.1/",
            "http://user:pw@example.com/",
            "file:///etc/passwd",
            "ftp://example.com/",
            "gopher://127.0.0.1:25/",
        ] {
            assert!(
                strict.check_url(&url(attempt)).is_err(),
                "{attempt} was let through"
            );
        }
        for fine in [
            "https://example.com/",
            "http://93.184.216.34/",
            "http://[2606:2800:220:1::]/",
            "http://8.8.8.8:53/",
        ] {
            assert!(strict.check_url(&url(fine)).is_ok(), "{fine} was refused");
        }
    }

    /// Every IPv6 spelling that carries an IPv4 address is judged by that address: the same
    /// form is refused carrying loopback, private, link-local or shared addresses and allowed
    /// carrying a public one.
    #[test]
    fn ipv6_forms_are_judged_by_the_ipv4_address_they_carry() {
        #[rustfmt::skip]
        let table: &[(&str, bool)] = &[
            // IPv4-mapped, ::ffff:0:0/96
            ("::ffff:127.0.0.1", false), ("::ffff:7f00:1", false), ("::ffff:10.0.0.1", false),
            ("::ffff:169.254.169.254", false), ("::ffff:8.8.8.8", true),
            // IPv4-translated (SIIT), ::ffff:0:0:0/96
            ("::ffff:0:7f00:1", false), ("::ffff:0:127.0.0.1", false), ("::ffff:0:a00:1", false),
            ("::ffff:0:a9fe:a9fe", false), ("::ffff:0:6440:1", false), ("::ffff:0:0:0", false),
            ("::ffff:0:808:808", true),
            // IPv4-compatible, ::/96
            ("::127.0.0.1", false), ("::7f00:1", false), ("::c0a8:101", false), ("::1", false),
            ("::", false), ("::808:808", true),
            // NAT64, well-known prefix 64:ff9b::/96
            ("64:ff9b::7f00:1", false), ("64:ff9b::127.0.0.1", false), ("64:ff9b::a9fe:a9fe", false),
            ("64:ff9b::c0a8:1", false), ("64:ff9b::808:808", true),
            ("64:ff9b:0:0:1::808:808", false), // not a /96 address: unassigned
            // NAT64, local-use 64:ff9b:1::/48: every RFC 6052 place must hold a public address
            ("64:ff9b:1::7f00:1", false), ("64:ff9b:1:7f00:0:100::", false),
            ("64:ff9b:1:7f00:1:808:808:808", false), ("64:ff9b:1:808:8:808:808:808", true),
            // 6to4, 2002::/16
            ("2002:7f00:1::", false), ("2002:a00:1::1", false), ("2002:a9fe:a9fe::", false),
            ("2002:808:808::1", true),
            // Teredo, 2001::/32: the server, then the client with its bits flipped
            ("2001:0:7f00:1::f7f7:f7f7", false), // server 127.0.0.1
            ("2001:0:808:808::80ff:fffe", false), // client 127.0.0.1
            ("2001:0:808:808::f5ff:fffe", false), // client 10.0.0.1
            ("2001:0:808:808::f7f7:f7f7", true),  // both 8.8.8.8
            // Not carrying IPv4: judged as IPv6
            ("fe80::1", false), ("fd00:ec2::254", false), ("2001:db8::1", false),
            ("2001:2::1", false), ("3fff::1", false), ("ff02::1", false),
            ("2606:2800:220:1::", true), ("2a00:1450:4001::1", true),
        ];
        let wrong: Vec<String> = table
            .iter()
            .filter(|(ip, public)| is_public(ip.parse().unwrap()) != *public)
            .map(|(ip, public)| {
                format!(
                    "{ip} should be judged {}",
                    if *public { "public" } else { "not public" }
                )
            })
            .collect();
        assert!(wrong.is_empty(), "{wrong:#?}");
        // The same judgement reaches URLs, however the url crate writes them back.
        let strict = Destinations::default();
        for refused in [
            "http://[::ffff:0:7f00:1]:8080/",
            "http://[64:ff9b:1::7f00:1]/",
            "http://[2001:0:808:808::80ff:fffe]/",
        ] {
            assert!(
                strict.check_url(&url(refused)).is_err(),
                "{refused} was let through"
            );
        }
    }

    #[test]
    fn allowances_are_as_narrow_as_written() {
        let one_port = Destinations::new(false, &["127.0.0.1:8080".into()]).unwrap();
        assert!(one_port.check_url(&url("http://127.0.0.1:8080/x")).is_ok());
        assert!(one_port.check_url(&url("http://127.0.0.1:8081/x")).is_err());
        assert!(
            one_port.check_url(&url("http://2130706433:8080/")).is_ok(),
            "the same address"
        );
        let named = Destinations::new(false, &["localhost:9000".into()]).unwrap();
        assert!(named.check_url(&url("http://localhost:9000/x")).is_ok());
        assert!(named.check_url(&url("http://LOCALHOST.:9000/x")).is_ok());
        for other in [
            "http://localhost:9001/",
            "http://localhost/",
            "https://localhost/",
            "http://localhost.:9001/",
        ] {
            assert!(named.check_url(&url(other)).is_err(), "{other}");
        }
        let two = Destinations::new(false, &["db.lan:1".into(), "db.lan:2".into()]).unwrap();
        assert!(two.check_url(&url("http://db.lan:2/")).is_ok());
        assert!(two.check_url(&url("http://db.lan:3/")).is_err());
        let all_ports = Destinations::new(false, &["db.lan".into(), "db.lan:1".into()]).unwrap();
        assert!(all_ports.check_url(&url("http://db.lan:3/")).is_ok());
        let net = Destinations::new(false, &["10.0.0.0/8".into()]).unwrap();
        assert!(net.check_url(&url("http://10.9.9.9/")).is_ok());
        assert!(
            net.check_url(&url("http://11.0.0.1/")).is_ok(),
            "public anyway"
        );
        assert!(net.check_url(&url("http://192.168.0.1/")).is_err());
        let any = Destinations::new(true, &[]).unwrap();
        assert!(any.check_url(&url("http://[::1]/")).is_ok());
        assert!(
            any.check_url(&url("http://u@example.com/")).is_err(),
            "credentials stay refused"
        );
        for bad in ["10.0.0.0/33", "host:port", "a b", ""] {
            assert!(Destinations::new(false, &[bad.into()]).is_err(), "{bad}");
        }
    }

    #[tokio::test]
    async fn a_name_is_judged_by_what_it_resolves_to_each_time() {
        // A rebinding name: public on the first lookup, loopback on the next.
        let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = calls.clone();
        let lookup: Lookup = Arc::new(move |_name| {
            let n = counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Box::pin(async move {
                Ok(vec![if n == 0 {
                    "93.184.216.34".parse().unwrap()
                } else {
                    "127.0.0.1".parse().unwrap()
                }])
            })
        });
        let resolver = GuardedResolver::with_lookup(Arc::new(Destinations::default()), lookup);
        assert!(resolver.addresses("rebind.example.").await.is_ok());
        let err = resolver.addresses("rebind.example").await.unwrap_err();
        assert!(err.to_string().contains("127.0.0.1"), "{err}");
        // One private address among public ones refuses the name.
        let mixed: Lookup = Arc::new(|_| {
            Box::pin(async {
                Ok(vec![
                    "8.8.8.8".parse().unwrap(),
                    "10.0.0.1".parse().unwrap(),
                ])
            })
        });
        let resolver = GuardedResolver::with_lookup(Arc::new(Destinations::default()), mixed);
        assert!(resolver.addresses("mixed.example").await.is_err());
    }

    #[tokio::test]
    async fn localhost_names_resolve_to_loopback_and_are_refused() {
        let resolver = GuardedResolver::new(Arc::new(Destinations::default()));
        for name in ["localhost", "localhost.", "LOCALHOST"] {
            assert!(resolver.addresses(name).await.is_err(), "{name}");
        }
        let allowed = GuardedResolver::new(Arc::new(
            Destinations::new(false, &["localhost".into()]).unwrap(),
        ));
        assert!(allowed.addresses("localhost").await.is_ok());
    }
}
