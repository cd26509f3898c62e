//! Starting and stopping a whole relay: workers, route cache, HTTP endpoints, drain.

use std::io;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::thread::JoinHandle;

use ufrag_common::config::RelayConfig;
use ufrag_common::forward::ForwardPolicy;
use ufrag_common::metrics::RelayMetrics;
use ufrag_common::runtime::cache::{RouteCache, WakeFn};
use ufrag_common::runtime::http::HttpEndpoints;
use ufrag_common::runtime::lifecycle::pin_current_thread;

use crate::worker::{Worker, WorkerSpec};

/// A running relay.
#[derive(Debug)]
pub struct Relay {
    /// Its metrics (readiness included).
    pub metrics: Arc<RelayMetrics>,
    stop: Arc<AtomicBool>,
    workers: Vec<JoinHandle<io::Result<()>>>,
    cache: Option<RouteCache>,
    http: Option<HttpEndpoints>,
}

impl Relay {
    /// Binds every socket, starts the workers (each pinned to its CPU), the route cache
    /// and the HTTP endpoints, then marks the relay ready. Any bind error is returned
    /// before anything is left running.
    pub fn start(config: &RelayConfig) -> io::Result<Self> {
        let metrics = RelayMetrics::new("mio", config.workers());
        let policy = ForwardPolicy::from(config);
        let mut bound = Vec::with_capacity(config.workers());
        let mut wakers: Vec<WakeFn> = Vec::with_capacity(config.workers());
        for (index, &cpu) in config.worker_cpus.iter().enumerate() {
            let spec = WorkerSpec {
                index,
                cpu,
                vips: config.vips.clone(),
                internal: config.worker_internal_addr(index),
                policy: policy.clone(),
                flows: config.flows_per_worker,
                idle_timeout: config.idle_timeout,
            };
            let (worker, waker) = Worker::bind(spec, metrics.worker(index))?;
            wakers.push(Box::new(move || {
                let _ = waker.wake();
            }));
            bound.push((worker, cpu));
        }
        let cache = match &config.redis_url {
            Some(url) => {
                let (cache, clients) = RouteCache::start(url, config.idle_timeout, wakers)
                    .map_err(|e| io::Error::other(format!("redis_url: {e}")))?;
                for ((worker, _), client) in bound.iter_mut().zip(clients) {
                    worker.set_cache(client);
                }
                Some(cache)
            }
            None => None,
        };
        let http =
            HttpEndpoints::start(config.metrics_addr, Arc::clone(&metrics)).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("metrics_addr {}: {e}", config.metrics_addr),
                )
            })?;

        let stop = Arc::new(AtomicBool::new(false));
        let mut workers = Vec::with_capacity(bound.len());
        for (index, (worker, cpu)) in bound.into_iter().enumerate() {
            let stop = Arc::clone(&stop);
            let handle = std::thread::Builder::new()
                .name(format!("relay-w{index}"))
                .spawn(move || {
                    if !pin_current_thread(cpu) {
                        tracing::warn!(worker = index, cpu, "could not pin worker to its CPU");
                    }
                    worker.run(&stop)
                })?;
            workers.push(handle);
        }
        tracing::info!(
            workers = config.workers(),
            vips = ?config.vips,
            internal = %config.internal_addr,
            metrics = %http.local_addr(),
            route_cache = config.redis_url.is_some(),
            "relay-mio ready"
        );
        metrics.set_ready(true);
        Ok(Relay {
            metrics,
            stop,
            workers,
            cache,
            http: Some(http),
        })
    }

    /// The stop flag the workers watch.
    pub fn stop_flag(&self) -> &AtomicBool {
        &self.stop
    }

    /// Stops the workers (after the caller's drain), then the cache and HTTP endpoints.
    /// Returns the first worker error, if any.
    pub fn join(mut self) -> io::Result<()> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let mut result = Ok(());
        for handle in self.workers.drain(..) {
            match handle.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => result = result.and(Err(e)),
                Err(_) => result = result.and(Err(io::Error::other("a worker panicked"))),
            }
        }
        if let Some(cache) = self.cache.take() {
            cache.stop();
        }
        if let Some(http) = self.http.take() {
            http.stop();
        }
        result
    }
}
