//! The route cache's helper against a real redis-server, in bursts: records and lookups
//! queued together go to Redis in pipelines (up to `PIPELINE` per round trip), and each
//! lookup is answered with its own flow's route, in order with the records before it in
//! the same queue, with no failure counted; a lookup of a flow never recorded is a miss.

use std::time::{Duration, Instant};

use testkit::addr::unique_ip;
use testkit::redis::RedisServer;
use ufrag_common::execute::RouteCacheRequest;
use ufrag_common::flow::FlowKey;
use ufrag_common::forward::Route;
use ufrag_common::runtime::cache::{CacheAnswer, PIPELINE, RouteCache};

fn key(i: u32) -> FlowKey {
    FlowKey::new(
        std::net::SocketAddr::from(([198, 51, (i >> 8) as u8, i as u8], 5000)),
        "203.0.113.1:3478".parse().unwrap(),
    )
}

fn route(i: u32) -> Route {
    Route {
        next_hop: std::net::SocketAddr::from(([10, 0, (i >> 8) as u8, i as u8], 41_000)),
        return_via: None,
    }
}

#[test]
fn a_burst_of_records_and_lookups_is_answered_flow_by_flow() {
    let redis = RedisServer::start_at(unique_ip());
    let (cache, clients) =
        RouteCache::start(&redis.url(), Duration::from_secs(30), vec![Box::new(|| {})]).unwrap();
    let client = &clients[0];
    // More than a few pipelines' worth, each flow recorded then looked up at once, and a
    // lookup of a flow that was never recorded after every tenth.
    let flows = (PIPELINE * 8) as u32;
    let mut queued = 0;
    for i in 0..flows {
        assert!(client.submit(RouteCacheRequest::Record {
            key: key(i),
            route: route(i)
        }));
        assert!(client.submit(RouteCacheRequest::Lookup { key: key(i) }));
        queued += 1;
        if i % 10 == 0 {
            assert!(client.submit(RouteCacheRequest::Lookup {
                key: key(flows + i)
            }));
            queued += 1;
        }
    }
    let mut answers: Vec<CacheAnswer> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while answers.len() < queued && Instant::now() < deadline {
        match client.next_answer() {
            Some(a) => answers.push(a),
            None => std::thread::sleep(Duration::from_millis(1)),
        }
    }
    assert_eq!(answers.len(), queued, "every lookup answered");
    assert_eq!(client.take_failures(), 0);
    for a in &answers {
        let i = (0..2 * flows)
            .find(|&i| key(i) == a.key)
            .expect("a flow asked about");
        if i < flows {
            assert_eq!(a.route, Some(route(i)), "flow {i}: its own route");
        } else {
            assert_eq!(a.route, None, "never recorded: a miss");
        }
    }
    drop(clients);
    cache.stop();
}
