//! The Redis route cache: `client ip:port + VIP → route`, written when a flow is made (and
//! refreshed while it lives) with a TTL equal to the idle timeout, read when a non-STUN
//! datagram arrives for a client without a flow (after a relay restart).
//!
//! Workers never block on Redis. They talk to one helper thread through bounded
//! crossbeam channels with `try_send`: a full queue is a counted cache error, never a
//! wait. Lookup answers come back on a per-worker bounded channel, and the helper calls
//! the worker's wake function so that a worker sleeping in its poll loop installs the
//! flow at once. When Redis is down or slow (every command has a timeout), requests fail
//! fast and are counted, the helper reconnects with exponential backoff (50 ms … 2 s),
//! and forwarding of existing flows is not affected at all. The helper sends what has
//! queued up as one pipeline (up to [`PIPELINE`] commands per round trip), so its rate is
//! bounded by Redis, not by round trips.
//!
//! Keys: `ufrag-relay:flow:<client>|<vip>`; values: `<next hop>|<return via or ->|<key
//! id>|<MAC>`, the MAC (16 bytes, hex) over the key and the route under a key derived
//! from the current hint key ([`HintKeys::route_mac`]). A value whose MAC does not verify
//! under the hint keys a relay holds is a miss, counted as `unauthenticated`: anything
//! that can write to Redis but holds no hint key cannot point a restarted relay's flows
//! anywhere. After a key rotation retires the key an entry was written under, the entry
//! is a miss; live flows rewrite theirs every third of the idle timeout.
//!
//! The store ([`RouteStore`]) is one Redis server, a Redis Cluster (the `redis` crate's
//! cluster client: each key goes to the master of its slot, a pipeline is split by node,
//! and the client follows `MOVED` redirections and the cluster's own failovers), or the
//! master that Redis Sentinels name: asked again on every reconnect, so after a failover
//! (the old master dead, or demoted and refusing writes) the helper finds the new one.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TrySendError, bounded};

use crate::config::{RedisAccess, RouteStore};
use crate::execute::{Egress, Executor, RouteCacheRequest};
use crate::flow::FlowKey;
use crate::forward::Route;
use crate::hint::HintKeys;
use crate::reasons::CacheError;
use crate::runtime::keys::SharedKeys;

/// Capacity of the request queue shared by all workers.
pub const REQUEST_QUEUE: usize = 8192;
/// Capacity of each worker's answer queue.
pub const ANSWER_QUEUE: usize = 1024;
/// Timeout of a connect and of each command (a pipeline of them).
pub const COMMAND_TIMEOUT: Duration = Duration::from_millis(250);
/// Requests sent to Redis in one pipeline at most: a queue that has grown (a burst of new
/// flows, every flow's refresh) drains in round trips of this many.
pub const PIPELINE: usize = 256;

const BACKOFF_MIN: Duration = Duration::from_millis(50);
const BACKOFF_MAX: Duration = Duration::from_secs(2);

/// A worker's request, as the helper thread sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct CacheRequest {
    request: RouteCacheRequest,
    /// The asking worker: answers go to it, failures are counted against it.
    worker: usize,
}

/// The answer to a lookup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheAnswer {
    /// The flow asked about.
    pub key: FlowKey,
    /// Its route, or `None` when Redis has none.
    pub route: Option<Route>,
}

/// A worker's handle to the cache. Every method returns at once.
#[derive(Debug)]
pub struct CacheClient {
    worker: usize,
    requests: Sender<CacheRequest>,
    answers: Receiver<CacheAnswer>,
    failures: Arc<FailureCounts>,
}

/// The failures the helper saw for one worker, by [`CacheError::index`], until the worker
/// takes them.
type FailureCounts = [AtomicU64; CacheError::COUNT];

impl CacheClient {
    /// Queues a request; false when the queue is full (a cache error for the caller). A
    /// lookup takes only the first half of the queue: writes (new and refreshed routes,
    /// what makes restores possible) always find the other half.
    pub fn submit(&self, request: RouteCacheRequest) -> bool {
        if matches!(request, RouteCacheRequest::Lookup { .. })
            && self.requests.len() >= REQUEST_QUEUE / 2
        {
            return false;
        }
        let request = CacheRequest {
            request,
            worker: self.worker,
        };
        match self.requests.try_send(request) {
            Ok(()) => true,
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => false,
        }
    }

    /// The next answer waiting for this worker, if any. Never waits.
    pub fn next_answer(&self) -> Option<CacheAnswer> {
        self.answers.try_recv().ok()
    }

    /// The failures the helper saw for this worker since the last call (Redis down,
    /// timeouts, answer queue full), by [`CacheError::index`].
    pub fn take_failures(&self) -> [u64; CacheError::COUNT] {
        core::array::from_fn(|i| self.failures[i].swap(0, Ordering::Relaxed))
    }
}

/// Hands every answer waiting in `cache` to `executor` (a route restores the flow and
/// sends what was parked for it through `egress`; none is a miss), counts the helper's
/// failures as cache errors, and flushes `egress`. `cache` is read through `cache_of`
/// because backends keep it inside their egress.
pub fn deliver_answers<E: Egress>(
    executor: &mut Executor,
    egress: &mut E,
    cache_of: impl Fn(&E) -> Option<&CacheClient>,
    now: Instant,
) {
    while let Some(answer) = cache_of(egress).and_then(CacheClient::next_answer) {
        executor.cache_answer(&answer.key, answer.route, now, egress);
    }
    if let Some(failures) = cache_of(egress).map(CacheClient::take_failures) {
        executor.cache_failures(&failures);
    }
    executor.flush(egress);
}

/// Wakes a worker (e.g. a `mio::Waker`); called from the helper thread.
pub type WakeFn = Box<dyn Fn() + Send + Sync>;

/// The running cache: its helper thread and one client per worker.
#[derive(Debug)]
pub struct RouteCache {
    helper: Option<JoinHandle<()>>,
    requests: Option<Sender<CacheRequest>>,
}

/// How the helper reaches its store.
enum StoreClient {
    Server(redis::Client),
    Cluster(redis::cluster::ClusterClient),
    Sentinel(redis::sentinel::SentinelClient),
}

/// A connection to the store.
enum StoreConnection {
    /// To one server: the store's, or the master the Sentinels named.
    Server(redis::Connection),
    /// Boxed: a cluster connection holds one connection per node and the slot map.
    Cluster(Box<redis::cluster::ClusterConnection>),
}

impl StoreClient {
    /// A client for `store`, as `access` says (user, password, TLS); fails only on a
    /// malformed URL or unusable TLS material.
    fn open(store: &RouteStore, access: &RedisAccess) -> redis::RedisResult<StoreClient> {
        use redis::IntoConnectionInfo as _;
        let certificates = || redis::TlsCertificates {
            client_tls: access
                .client
                .as_ref()
                .map(|(cert, key)| redis::ClientTlsConfig {
                    client_cert: cert.pem.clone(),
                    client_key: key.pem.clone(),
                }),
            root_cert: access.ca.as_ref().map(|ca| ca.pem.clone()),
        };
        let with_credentials = |mut settings: redis::RedisConnectionInfo| {
            if let Some(user) = &access.username {
                settings = settings.set_username(user);
            }
            if let Some(password) = &access.password {
                settings = settings.set_password(password);
            }
            settings
        };
        Ok(match store {
            RouteStore::Server(url) => {
                let info = url.as_str().into_connection_info()?;
                let settings = with_credentials(info.redis_settings().clone());
                let info = info.set_redis_settings(settings);
                if store.uses_tls() {
                    StoreClient::Server(redis::Client::build_with_tls(info, certificates())?)
                } else {
                    StoreClient::Server(redis::Client::open(info)?)
                }
            }
            RouteStore::Cluster(nodes) => {
                let mut builder =
                    redis::cluster::ClusterClientBuilder::new(nodes.iter().map(String::as_str))
                        .connection_timeout(COMMAND_TIMEOUT)
                        .response_timeout(COMMAND_TIMEOUT)
                        .retries(1);
                if let Some(user) = &access.username {
                    builder = builder.username(user.clone());
                }
                if let Some(password) = &access.password {
                    builder = builder.password(password.clone());
                }
                if store.uses_tls() {
                    builder = builder.tls(redis::TlsMode::Secure).certs(certificates());
                }
                StoreClient::Cluster(builder.build()?)
            }
            // The credentials are the master's; the Sentinels are asked without them.
            RouteStore::Sentinel { sentinels, master } => {
                let addrs = sentinels
                    .iter()
                    .map(|url| Ok(url.as_str().into_connection_info()?.addr().clone()))
                    .collect::<redis::RedisResult<Vec<_>>>()?;
                let mut builder = redis::sentinel::SentinelClientBuilder::new(
                    addrs,
                    master,
                    redis::sentinel::SentinelServerType::Master,
                )?;
                if let Some(user) = &access.username {
                    builder = builder.set_client_to_redis_username(user);
                }
                if let Some(password) = &access.password {
                    builder = builder.set_client_to_redis_password(password);
                }
                if store.uses_tls() {
                    builder = builder
                        .set_client_to_redis_tls_mode(redis::TlsMode::Secure)
                        .set_client_to_redis_certificates(certificates())
                        .set_client_to_sentinel_certificates(certificates());
                }
                StoreClient::Sentinel(builder.build()?)
            }
        })
    }

    /// Connects, with every command bounded by [`COMMAND_TIMEOUT`].
    fn connect(&mut self) -> redis::RedisResult<StoreConnection> {
        let server = |client: &redis::Client| {
            let c = client.get_connection_with_timeout(COMMAND_TIMEOUT)?;
            c.set_read_timeout(Some(COMMAND_TIMEOUT))?;
            c.set_write_timeout(Some(COMMAND_TIMEOUT))?;
            Ok(StoreConnection::Server(c))
        };
        match self {
            StoreClient::Server(client) => server(client),
            StoreClient::Cluster(client) => {
                Ok(StoreConnection::Cluster(Box::new(client.get_connection()?)))
            }
            // Asks the Sentinels which server is the master now.
            StoreClient::Sentinel(sentinels) => server(&sentinels.get_client()?),
        }
    }
}

impl StoreConnection {
    /// Runs `commands` as one pipeline (one round trip per node); the replies of those
    /// marked `ignored` are left out of the answer.
    fn pipeline(
        &mut self,
        commands: Vec<(redis::Cmd, bool)>,
    ) -> redis::RedisResult<Vec<Option<String>>> {
        match self {
            StoreConnection::Server(c) => {
                let mut pipe = redis::pipe();
                for (cmd, ignored) in commands {
                    pipe.add_command(cmd);
                    if ignored {
                        pipe.ignore();
                    }
                }
                pipe.query(c)
            }
            StoreConnection::Cluster(c) => {
                let mut pipe = redis::cluster::cluster_pipe();
                for (cmd, ignored) in commands {
                    pipe.add_command(cmd);
                    if ignored {
                        pipe.ignore();
                    }
                }
                pipe.query(c)
            }
        }
    }
}

struct Helper {
    client: StoreClient,
    connection: Option<StoreConnection>,
    retry_at: Instant,
    backoff: Duration,
    ttl: Duration,
    answers: Vec<Sender<CacheAnswer>>,
    wakers: Vec<WakeFn>,
    failures: Vec<Arc<FailureCounts>>,
    connected_once: bool,
    /// What values are authenticated with.
    keys: SharedKeys,
}

/// The Redis key of a flow.
pub fn redis_key(key: &FlowKey) -> String {
    format!("ufrag-relay:flow:{}|{}", key.client, key.vip)
}

/// The route as the value spells it, before its MAC: `<next hop>|<return via or ->`.
fn route_text(route: &Route) -> String {
    match route.return_via {
        Some(via) => format!("{}|{via}", route.next_hop),
        None => format!("{}|-", route.next_hop),
    }
}

/// What the MAC covers: the flow's Redis key and the route, so a value cannot be moved
/// to another flow.
fn mac_entry(key: &FlowKey, route_text: &str) -> Vec<u8> {
    format!("{}\n{route_text}", redis_key(key)).into_bytes()
}

/// The Redis value of `key`'s route, authenticated under `keys`' current key.
pub fn redis_value(key: &FlowKey, route: &Route, keys: &HintKeys) -> String {
    let text = route_text(route);
    let (key_id, mac) = keys.route_mac(&mac_entry(key, &text));
    let hex: String = mac.iter().map(|b| format!("{b:02x}")).collect();
    format!("{text}|{key_id}|{hex}")
}

/// Why a Redis value was not taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueRefused {
    /// Not a value any relay writes.
    Malformed,
    /// Well formed, but its MAC does not verify under the keys held (a writer without
    /// the hint key, or a key since retired).
    Unauthenticated,
}

/// Parses and authenticates `key`'s Redis value under `keys`.
pub fn parse_value(key: &FlowKey, value: &str, keys: &HintKeys) -> Result<Route, ValueRefused> {
    let malformed = ValueRefused::Malformed;
    let mut fields = value.split('|');
    let (Some(next_hop), Some(via), Some(key_id), Some(mac), None) = (
        fields.next(),
        fields.next(),
        fields.next(),
        fields.next(),
        fields.next(),
    ) else {
        return Err(malformed);
    };
    let route = Route {
        next_hop: next_hop.parse().map_err(|_| malformed)?,
        return_via: match via {
            "-" => None,
            via => Some(via.parse().map_err(|_| malformed)?),
        },
    };
    if key_id.is_empty() || !key_id.bytes().all(|c| c.is_ascii_digit()) {
        return Err(malformed);
    }
    let key_id: u8 = key_id.parse().map_err(|_| malformed)?;
    let mac = decode_hex(mac).ok_or(malformed)?;
    let entry = mac_entry(key, &value[..next_hop.len() + 1 + via.len()]);
    if !keys.route_mac_verifies(key_id, &entry, &mac) {
        return Err(ValueRefused::Unauthenticated);
    }
    Ok(route)
}

/// Lowercase hex, two digits a byte, as [`redis_value`] writes it; `None` for anything
/// else (a sign, uppercase, an odd length), so a value has one spelling.
fn decode_hex(text: &str) -> Option<Vec<u8>> {
    let lower_hex = |c: u8| c.is_ascii_digit() || (b'a'..=b'f').contains(&c);
    if !text.len().is_multiple_of(2) || !text.bytes().all(lower_hex) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

impl RouteCache {
    /// Starts the helper for `store`, reached as `access` says, with one client per wake
    /// function (one per worker). Fails only on a malformed URL or unusable TLS material;
    /// an unreachable Redis (or one that refuses the password) is retried in the background.
    pub fn start(
        store: &RouteStore,
        access: &RedisAccess,
        ttl: Duration,
        wakers: Vec<WakeFn>,
        keys: SharedKeys,
    ) -> Result<(Self, Vec<CacheClient>), redis::RedisError> {
        let client = StoreClient::open(store, access)?;
        let (requests, incoming) = bounded(REQUEST_QUEUE);
        let mut clients = Vec::with_capacity(wakers.len());
        let mut answers = Vec::with_capacity(wakers.len());
        let mut failures = Vec::with_capacity(wakers.len());
        for worker in 0..wakers.len() {
            let (tx, rx) = bounded(ANSWER_QUEUE);
            let failed = Arc::new(core::array::from_fn(|_| AtomicU64::new(0)));
            answers.push(tx);
            failures.push(Arc::clone(&failed));
            clients.push(CacheClient {
                worker,
                requests: requests.clone(),
                answers: rx,
                failures: failed,
            });
        }
        let mut helper = Helper {
            client,
            connection: None,
            retry_at: Instant::now(),
            backoff: BACKOFF_MIN,
            ttl,
            answers,
            wakers,
            failures,
            connected_once: false,
            keys,
        };
        let thread = std::thread::Builder::new()
            .name("route-cache".into())
            .spawn(move || helper.run(&incoming))
            .expect("spawning the route-cache thread");
        Ok((
            RouteCache {
                helper: Some(thread),
                requests: Some(requests),
            },
            clients,
        ))
    }

    /// Stops the helper once the workers' clients are dropped.
    pub fn stop(mut self) {
        self.requests.take();
        if let Some(helper) = self.helper.take() {
            let _ = helper.join();
        }
    }
}

impl Helper {
    fn run(&mut self, incoming: &Receiver<CacheRequest>) {
        // Connect before the first request needs it.
        self.connect();
        let mut batch = Vec::with_capacity(PIPELINE);
        loop {
            match incoming.recv_timeout(Duration::from_millis(200)) {
                Ok(request) => {
                    // Whatever else is queued goes in the same round trip.
                    batch.push(request);
                    batch.extend(incoming.try_iter().take(PIPELINE - 1));
                    self.handle(&batch);
                    batch.clear();
                }
                Err(RecvTimeoutError::Timeout) => {
                    if self.connection.is_none() {
                        self.connect();
                    }
                }
                Err(RecvTimeoutError::Disconnected) => return,
            }
        }
    }

    fn fail(&self, request: &CacheRequest, reason: CacheError) {
        if let Some(f) = self.failures.get(request.worker) {
            f[reason.index()].fetch_add(1, Ordering::Relaxed);
        }
    }

    fn connect(&mut self) -> bool {
        if Instant::now() < self.retry_at {
            return false;
        }
        match self.client.connect() {
            Ok(c) => {
                tracing::info!(
                    reconnect = self.connected_once,
                    "route cache connected to redis"
                );
                self.connected_once = true;
                self.connection = Some(c);
                self.backoff = BACKOFF_MIN;
                true
            }
            Err(e) => {
                if self.backoff == BACKOFF_MIN {
                    tracing::warn!(error = %e, "route cache cannot reach redis; retrying with backoff");
                }
                self.retry_at = Instant::now() + self.backoff;
                self.backoff = (self.backoff * 2).min(BACKOFF_MAX);
                false
            }
        }
    }

    /// Sends a batch of requests as one pipeline (one round trip to Redis), then hands
    /// each lookup's answer to its worker. A failed pipeline fails every request in it.
    fn handle(&mut self, batch: &[CacheRequest]) {
        if self.connection.is_none() && !self.connect() {
            batch
                .iter()
                .for_each(|r| self.fail(r, CacheError::Unreachable));
            return;
        }
        let Some(connection) = self.connection.as_mut() else {
            batch
                .iter()
                .for_each(|r| self.fail(r, CacheError::Unreachable));
            return;
        };
        let ttl_ms = u64::try_from(self.ttl.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        // The keys now, for this batch (a reload takes effect at the next).
        let keys = self.keys.current();
        let commands = batch
            .iter()
            .map(|request| match request.request {
                RouteCacheRequest::Record { key, route } => {
                    let mut set = redis::cmd("SET");
                    set.arg(redis_key(&key))
                        .arg(redis_value(&key, &route, &keys))
                        .arg("PX")
                        .arg(ttl_ms);
                    (set, true)
                }
                RouteCacheRequest::Lookup { key } => {
                    let mut get = redis::cmd("GET");
                    get.arg(redis_key(&key));
                    (get, false)
                }
                RouteCacheRequest::Forget { key } => {
                    let mut del = redis::cmd("DEL");
                    del.arg(redis_key(&key));
                    (del, true)
                }
            })
            .collect();
        // One value per lookup, in order (the records' replies are ignored).
        let values = match connection.pipeline(commands) {
            Ok(values) => values,
            Err(e) => {
                tracing::warn!(error = %e, "route cache command failed; reconnecting");
                self.connection = None;
                self.retry_at = Instant::now() + self.backoff;
                let reason = if e.is_timeout() {
                    CacheError::Timeout
                } else {
                    CacheError::CommandFailed
                };
                batch.iter().for_each(|r| self.fail(r, reason));
                return;
            }
        };
        let lookups = batch.iter().filter_map(|r| match r.request {
            RouteCacheRequest::Lookup { key } => Some((r, key)),
            RouteCacheRequest::Record { .. } | RouteCacheRequest::Forget { .. } => None,
        });
        for ((request, key), value) in lookups.zip(values) {
            let parsed = value.as_deref().map(|v| parse_value(&key, v, &keys));
            if parsed == Some(Err(ValueRefused::Unauthenticated)) {
                self.fail(request, CacheError::Unauthenticated);
            }
            let answer = CacheAnswer {
                key,
                route: parsed.and_then(Result::ok),
            };
            let delivered = self
                .answers
                .get(request.worker)
                .is_some_and(|tx| tx.try_send(answer).is_ok());
            if delivered {
                if let Some(wake) = self.wakers.get(request.worker) {
                    wake();
                }
            } else {
                self.fail(request, CacheError::AnswerQueueFull);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_not_written_under_the_hint_keys_is_refused() {
        let key = FlowKey::new(
            "198.51.100.7:5".parse().unwrap(),
            "203.0.113.1:3478".parse().unwrap(),
        );
        let route = Route {
            next_hop: "10.0.0.2:40000".parse().unwrap(),
            return_via: None,
        };
        let ours = HintKeys::parse(&format!("1:{}", "ab".repeat(32))).unwrap();
        let theirs = HintKeys::parse(&format!("1:{}", "cd".repeat(32))).unwrap();
        let value = redis_value(&key, &route, &ours);
        assert!(value.starts_with("10.0.0.2:40000|-|1|"), "{value}");
        // Written by something without our key, or under a key id we do not hold.
        let forged = redis_value(&key, &route, &theirs);
        assert_eq!(
            parse_value(&key, &forged, &ours),
            Err(ValueRefused::Unauthenticated)
        );
        let other_id = value.replacen("|1|", "|2|", 1);
        assert_eq!(
            parse_value(&key, &other_id, &ours),
            Err(ValueRefused::Unauthenticated)
        );
        // Another route, or another flow's value, under a valid MAC.
        let redirected = value.replacen("10.0.0.2:40000", "10.0.0.66:40000", 1);
        assert_eq!(
            parse_value(&key, &redirected, &ours),
            Err(ValueRefused::Unauthenticated)
        );
        let other_flow = FlowKey::new("198.51.100.8:5".parse().unwrap(), key.vip);
        assert_eq!(
            parse_value(&other_flow, &value, &ours),
            Err(ValueRefused::Unauthenticated)
        );
        // The previous key still verifies during a rotation.
        let rotated =
            HintKeys::parse(&format!("2:{}\n1:{}", "ef".repeat(32), "ab".repeat(32))).unwrap();
        assert_eq!(parse_value(&key, &value, &rotated), Ok(route));
    }

    #[test]
    fn values_round_trip_and_garbage_is_a_miss() {
        let direct = Route {
            next_hop: "10.0.0.2:40000".parse().unwrap(),
            return_via: None,
        };
        let via = Route {
            next_hop: "[fd00::2]:40000".parse().unwrap(),
            return_via: Some("192.0.2.1:41000".parse().unwrap()),
        };
        let key = FlowKey::new(
            "198.51.100.7:5".parse().unwrap(),
            "203.0.113.1:3478".parse().unwrap(),
        );
        let keys = HintKeys::parse(&format!("1:{}", "ab".repeat(32))).unwrap();
        for r in [direct, via] {
            assert_eq!(
                parse_value(&key, &redis_value(&key, &r, &keys), &keys),
                Ok(r)
            );
        }
        let hex = "00".repeat(16);
        let signed = format!("10.0.0.2:1|-|+1|{hex}");
        let plus = format!("10.0.0.2:1|-|1|+f{}", &hex[2..]);
        for bad in [
            "",
            "x",
            "10.0.0.2:1",
            "10.0.0.2:1|nope",
            "a|-",
            "10.0.0.2:1|-|1|zz",
            &signed,
            &plus,
        ] {
            assert_eq!(
                parse_value(&key, bad, &keys),
                Err(ValueRefused::Malformed),
                "{bad:?}"
            );
        }
        assert_eq!(
            redis_key(&key),
            "ufrag-relay:flow:198.51.100.7:5|203.0.113.1:3478"
        );
    }
}
