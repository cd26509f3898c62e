//! Next-hop MAC addresses from the kernel, IPv4 and IPv6: the neighbour table and the
//! main routing table of the relay's interface, read over rtnetlink ([`crate::netlink`]),
//! never hard-coded. The next hop of a destination is the gateway of its longest-prefix
//! route, or the destination itself when on the link.
//!
//! The reading is done off the worker. Each [`Neighbours`] has a refresher thread that
//! re-reads the tables when the kernel announces a change to them (a listener thread
//! subscribed to rtnetlink's neighbour and route groups wakes it), and every
//! [`REFRESH_EVERY`] in case a notification was lost, and publishes a new [`View`] when
//! they changed; the worker adopts the newest view on its tick and on a miss, which costs
//! an atomic load and, when there is a new view, a lock to clone an `Arc`. No syscall and
//! no allocation on the worker thread beyond handing a miss over. A next hop with no MAC
//! yet is counted by the caller and handed to the refresher (a bounded channel; a full one
//! drops the request), which asks the kernel to resolve it (ARP or neighbour discovery) by
//! sending it an empty datagram from an ordinary socket, at most every 200 ms per address;
//! the kernel announces the answer, and the next view carries it.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::netlink::{ChangeSocket, Neighbour, Route, RouteSocket, contains};

/// What wakes the refresher.
#[derive(Clone, Copy, Debug)]
enum Wake {
    /// The worker found no MAC for this next hop.
    Resolve(IpAddr),
    /// The kernel announced a change to its neighbour or route tables.
    TablesChanged,
}

/// How often the refresher re-reads the kernel's tables without being told of a change
/// (a notification lost without the kernel saying so).
pub const REFRESH_EVERY: Duration = Duration::from_secs(1);
/// How often it re-reads them when no notification socket could be opened.
const REFRESH_WITHOUT_NOTIFICATIONS: Duration = Duration::from_millis(50);
/// How often the listener checks whether it should stop.
const LISTENER_WAKES_EVERY: Duration = Duration::from_millis(100);
/// How often one address is asked about at most.
const RESOLVE_WINDOW: Duration = Duration::from_millis(200);
/// Unresolved next hops queued for the refresher; more are dropped (asked again later).
const PENDING: usize = 64;

/// One reading of an interface's tables.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct View {
    macs: HashMap<IpAddr, [u8; 6]>,
    /// This interface's routes, longest prefix first.
    routes: Vec<Route>,
}

impl View {
    fn of(ifindex: u32, neighbours: &[Neighbour], routes: &[Route]) -> Self {
        let mut routes: Vec<Route> = routes
            .iter()
            .filter(|r| r.ifindex == ifindex)
            .copied()
            .collect();
        routes.sort_by_key(|r| std::cmp::Reverse(r.prefix_len));
        View {
            macs: neighbours
                .iter()
                .filter(|n| n.ifindex == ifindex)
                .map(|n| (n.ip, n.mac))
                .collect(),
            routes,
        }
    }

    /// The next hop for `dst`: the gateway of its longest-prefix route, or `dst` itself
    /// for a route on the link; `None` when no route leads out here.
    fn next_hop(&self, dst: IpAddr) -> Option<IpAddr> {
        let dst = dst.to_canonical();
        let route = self
            .routes
            .iter()
            .find(|r| contains(r.dst, r.prefix_len, dst))?;
        Some(route.gateway.unwrap_or(dst))
    }
}

/// What the refresher publishes and the worker reads.
#[derive(Debug)]
struct Published {
    view: Mutex<Arc<View>>,
    /// Bumped after every new view.
    generation: AtomicU64,
    stop: AtomicBool,
}

/// One worker's view of its interface's neighbours; see the module documentation.
#[derive(Debug)]
pub struct Neighbours {
    view: Arc<View>,
    generation: u64,
    /// `None` for a fixed view (tests).
    published: Option<Arc<Published>>,
    unresolved: Option<SyncSender<Wake>>,
    /// The first handle, whose drop stops the refresher; followers only read.
    owner: bool,
}

impl Neighbours {
    /// The neighbours of interface `ifindex`, read now, with a refresher thread that keeps
    /// them current until this is dropped. Fails only if no netlink socket can be opened.
    pub fn new(ifindex: u32) -> std::io::Result<Self> {
        Self::refreshed_every(ifindex, REFRESH_EVERY)
    }

    /// [`Neighbours::new`] with the periodic re-read (the fallback for a lost
    /// notification) every `every` instead of [`REFRESH_EVERY`].
    pub fn refreshed_every(ifindex: u32, every: Duration) -> std::io::Result<Self> {
        let mut netlink = RouteSocket::open()?;
        let first = Arc::new(read(&mut netlink, ifindex).unwrap_or_default());
        let published = Arc::new(Published {
            view: Mutex::new(Arc::clone(&first)),
            generation: AtomicU64::new(0),
            stop: AtomicBool::new(false),
        });
        let (unresolved, requests) = std::sync::mpsc::sync_channel(PENDING);
        let every = match ChangeSocket::open() {
            Ok(changes) => {
                let (published, wake) = (Arc::clone(&published), unresolved.clone());
                std::thread::Builder::new()
                    .name(format!("relay-nbl{ifindex}"))
                    .spawn(move || listen(changes, &published, &wake))?;
                every
            }
            Err(e) => {
                tracing::warn!(error = %e, "no rtnetlink notifications: re-reading neighbours every 50 ms");
                REFRESH_WITHOUT_NOTIFICATIONS
            }
        };
        let refresher = Refresher {
            ifindex,
            netlink,
            published: Arc::clone(&published),
            requests,
            every,
            asked: HashMap::new(),
            resolver_v4: UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).ok(),
            resolver_v6: UdpSocket::bind((Ipv6Addr::UNSPECIFIED, 0)).ok(),
            current: first.clone(),
        };
        std::thread::Builder::new()
            .name(format!("relay-nbr{ifindex}"))
            .spawn(move || refresher.run())?;
        Ok(Neighbours {
            view: first,
            generation: 0,
            published: Some(published),
            unresolved: Some(unresolved),
            owner: true,
        })
    }

    /// A fixed view (for tests): these neighbours and routes, never re-read.
    pub fn fixed(ifindex: u32, neighbours: &[Neighbour], routes: &[Route]) -> Self {
        Neighbours {
            view: Arc::new(View::of(ifindex, neighbours, routes)),
            generation: 0,
            published: None,
            unresolved: None,
            owner: true,
        }
    }

    /// Another handle on the same refresher (for a second reader on the worker's thread,
    /// such as the fast path's writer); the refresher stops when the first handle is
    /// dropped.
    pub fn follower(&self) -> Self {
        Neighbours {
            view: Arc::clone(&self.view),
            generation: self.generation,
            published: self.published.clone(),
            unresolved: self.unresolved.clone(),
            owner: false,
        }
    }

    /// Adopts the refresher's newest view, if there is one: an atomic load, and a lock
    /// to clone an `Arc` when the view changed. No syscall, no allocation.
    pub fn refresh(&mut self) {
        let Some(published) = &self.published else {
            return;
        };
        let generation = published.generation.load(Ordering::Acquire);
        if generation != self.generation {
            let latest = Arc::clone(&published.view.lock().unwrap_or_else(|e| e.into_inner()));
            self.view = latest;
            self.generation = generation;
        }
    }

    /// Which view this handle holds (it changes when it adopts a new one).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Calls `f` with each next hop of the view this handle holds and its MAC.
    pub fn each_mac(&self, mut f: impl FnMut(IpAddr, [u8; 6])) {
        for (ip, mac) in &self.view.macs {
            f(*ip, *mac);
        }
    }

    /// The next hop for `dst`: the gateway of its longest-prefix route on this interface,
    /// or `dst` itself for a route on the link; `None` when no route leads out here.
    pub fn next_hop(&self, dst: IpAddr) -> Option<IpAddr> {
        self.view.next_hop(dst)
    }

    /// The MAC to send to `dst` through, or `None` (and the next hop handed to the
    /// refresher to resolve).
    pub fn mac_for(&mut self, dst: IpAddr) -> Option<[u8; 6]> {
        let hop = self.next_hop(dst)?;
        if let Some(mac) = self.view.macs.get(&hop) {
            return Some(*mac);
        }
        // The refresher may have published the neighbour since the last tick.
        self.refresh();
        if let Some(mac) = self.view.macs.get(&hop) {
            return Some(*mac);
        }
        if let Some(unresolved) = &self.unresolved {
            // A full queue drops the request: the next packet to `hop` asks again.
            let _ = unresolved.try_send(Wake::Resolve(hop));
        }
        None
    }
}

impl Drop for Neighbours {
    fn drop(&mut self) {
        if !self.owner {
            return;
        }
        if let Some(published) = &self.published {
            published.stop.store(true, Ordering::Relaxed);
        }
    }
}

/// Reads the tables once; `None` if either read failed.
fn read(netlink: &mut RouteSocket, ifindex: u32) -> Option<View> {
    let (Ok(neighbours), Ok(routes)) = (netlink.neighbours(), netlink.routes()) else {
        return None;
    };
    Some(View::of(ifindex, &neighbours, &routes))
}

/// The listener thread: wakes the refresher whenever the kernel announces a change, until
/// the worker's [`Neighbours`] is dropped.
fn listen(mut changes: ChangeSocket, published: &Published, wake: &SyncSender<Wake>) {
    while !published.stop.load(Ordering::Relaxed) {
        if changes.wait(LISTENER_WAKES_EVERY) && wake.send(Wake::TablesChanged).is_err() {
            return;
        }
    }
}

/// The refresher thread's state.
struct Refresher {
    ifindex: u32,
    netlink: RouteSocket,
    published: Arc<Published>,
    requests: Receiver<Wake>,
    /// How often the tables are re-read without a notification.
    every: Duration,
    /// When each unresolved next hop was last asked about.
    asked: HashMap<IpAddr, Instant>,
    resolver_v4: Option<UdpSocket>,
    resolver_v6: Option<UdpSocket>,
    current: Arc<View>,
}

impl Refresher {
    /// Until the worker's [`Neighbours`] is dropped: wait for a request, a change or the
    /// next periodic re-read; ask the kernel about new unresolved hops; re-read after a
    /// change or a period, and publish a changed view.
    fn run(mut self) {
        while !self.published.stop.load(Ordering::Relaxed) {
            let now = Instant::now();
            self.asked
                .retain(|_, at| now.duration_since(*at) < RESOLVE_WINDOW);
            let mut reread = match self.requests.recv_timeout(self.every) {
                Ok(wake) => self.handle(wake),
                Err(RecvTimeoutError::Timeout) => true,
                Err(RecvTimeoutError::Disconnected) => return,
            };
            while let Ok(wake) = self.requests.try_recv() {
                reread |= self.handle(wake);
            }
            if !reread {
                continue;
            }
            if let Some(view) = read(&mut self.netlink, self.ifindex)
                && view != *self.current
            {
                self.asked.retain(|hop, _| !view.macs.contains_key(hop));
                self.current = Arc::new(view);
                *self
                    .published
                    .view
                    .lock()
                    .unwrap_or_else(|e| e.into_inner()) = Arc::clone(&self.current);
                self.published.generation.fetch_add(1, Ordering::Release);
            }
        }
    }

    /// Acts on one wake-up; true if the tables should be re-read.
    fn handle(&mut self, wake: Wake) -> bool {
        match wake {
            Wake::Resolve(hop) => {
                self.ask(hop);
                false
            }
            Wake::TablesChanged => true,
        }
    }

    /// Asks the kernel to resolve `hop`, unless it was asked within [`RESOLVE_WINDOW`].
    fn ask(&mut self, hop: IpAddr) {
        let now = Instant::now();
        if self
            .asked
            .get(&hop)
            .is_some_and(|t| now.duration_since(*t) < RESOLVE_WINDOW)
        {
            return;
        }
        self.asked.insert(hop, now);
        ask_kernel_to_resolve(
            (self.resolver_v4.as_ref(), self.resolver_v6.as_ref()),
            self.ifindex,
            hop,
        );
    }
}

/// An empty datagram to the discard port makes the kernel resolve `hop` (link-local
/// IPv6 next hops are scoped to the interface).
fn ask_kernel_to_resolve(
    (v4, v6): (Option<&UdpSocket>, Option<&UdpSocket>),
    ifindex: u32,
    hop: IpAddr,
) {
    let _ = match hop {
        IpAddr::V4(addr) => v4.map(|s| s.send_to(&[], SocketAddr::from((addr, 9)))),
        IpAddr::V6(addr) => {
            let scope = if addr.is_unicast_link_local() {
                ifindex
            } else {
                0
            };
            v6.map(|s| s.send_to(&[], SocketAddrV6::new(addr, 9, 0, scope)))
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAC: [u8; 6] = [2, 0xaa, 0xbb, 0xcc, 0xdd, 1];
    const GW_MAC: [u8; 6] = [2, 0xaa, 0xbb, 0xcc, 0xdd, 0xfe];

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn view() -> Neighbours {
        let route = |dst: &str, prefix_len, gateway: Option<&str>, ifindex| Route {
            dst: ip(dst),
            prefix_len,
            gateway: gateway.map(ip),
            ifindex,
        };
        Neighbours::fixed(
            7,
            &[
                Neighbour {
                    ifindex: 7,
                    ip: ip("10.77.0.1"),
                    mac: MAC,
                },
                Neighbour {
                    ifindex: 7,
                    ip: ip("fd77::1"),
                    mac: MAC,
                },
                Neighbour {
                    ifindex: 7,
                    ip: ip("fe80::1"),
                    mac: GW_MAC,
                },
                Neighbour {
                    ifindex: 8,
                    ip: ip("10.77.0.3"),
                    mac: MAC,
                },
            ],
            &[
                route("0.0.0.0", 0, Some("10.77.0.254"), 7),
                route("10.77.0.0", 24, None, 7),
                route("::", 0, Some("fe80::1"), 7),
                route("fd77::", 64, None, 7),
                route("10.9.0.0", 16, None, 8),
            ],
        )
    }

    #[test]
    fn on_link_destinations_are_their_own_next_hop() {
        let n = view();
        assert_eq!(n.next_hop(ip("10.77.0.1")), Some(ip("10.77.0.1")));
        assert_eq!(n.next_hop(ip("fd77::1")), Some(ip("fd77::1")));
        // A v4-mapped address is the IPv4 address.
        assert_eq!(n.next_hop(ip("::ffff:10.77.0.1")), Some(ip("10.77.0.1")));
    }

    #[test]
    fn off_link_destinations_go_through_the_longest_prefix_gateway() {
        let n = view();
        assert_eq!(n.next_hop(ip("192.0.2.1")), Some(ip("10.77.0.254")));
        assert_eq!(n.next_hop(ip("2001:db8::1")), Some(ip("fe80::1")));
        // Another interface's network is not ours: our default route takes it.
        assert_eq!(n.next_hop(ip("10.9.0.1")), Some(ip("10.77.0.254")));
    }

    #[test]
    fn macs_come_from_the_table_of_this_interface_only() {
        let mut n = view();
        assert_eq!(n.mac_for(ip("10.77.0.1")), Some(MAC));
        assert_eq!(n.mac_for(ip("fd77::1")), Some(MAC));
        assert_eq!(n.mac_for(ip("2001:db8::1")), Some(GW_MAC));
        // Unknown: on our link but not (yet) in the table; the default gateway has no MAC.
        assert_eq!(n.mac_for(ip("10.77.0.3")), None);
        assert_eq!(n.mac_for(ip("192.0.2.1")), None);
    }

    #[test]
    fn no_route_no_next_hop() {
        let n = Neighbours::fixed(7, &[], &[]);
        assert_eq!(n.next_hop(ip("10.77.0.1")), None);
    }
}
