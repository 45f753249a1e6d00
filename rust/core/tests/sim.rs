#![allow(unreachable_pub, missing_docs, dead_code)]
//! Deterministic simulation of two rvrdma QPs over a lossy, duplicating, reordering network
//! with two paths (the primary may die mid-run), plus unit tests of the seed rules.
//!
//! - `cargo test --test sim`: 2000 seeds (override with `SIM_SEEDS=n`, start with
//!   `SIM_SEED_BASE=n`);
//! - `SIM_SEED=n cargo test --test sim -- --nocapture sim_random_seeds`: replay one seed with a
//!   trace.

mod sim {
    pub mod mem;
    pub mod node;
    pub mod rng;
    pub mod rules;
    pub mod world;
}

use rvrdma_core::qp::QpCounters;
use sim::world::{Config, Scenario, Sim};

fn run_seed(seed: u64, trace: bool) -> (Result<(), String>, u64, Sim) {
    let mut cfg = Config::random(seed);
    cfg.trace = trace;
    if std::env::var("SIM_CLEAN").is_ok() {
        // A perfect network: no loss, duplication or reordering.
        cfg.loss = 0;
        cfg.dup = 0;
        cfg.jitter = 0;
    }
    let mut sim = Sim::new(cfg);
    let r = sim.run();
    let steps = sim.steps;
    (r, steps, sim)
}

/// The seeds a test runs: `all`, or only the one environment variable `var` names, replayed
/// with a trace (the second value).
fn seeds_or_replay(var: &str, all: std::ops::Range<u64>) -> (std::ops::Range<u64>, bool) {
    match std::env::var(var).ok().and_then(|v| v.parse::<u64>().ok()) {
        Some(s) => (s..s + 1, true),
        None => (all, false),
    }
}

/// Bulk traffic (messages up to 1 MiB, 16 in flight each way) through a netem-like bottleneck
/// with loss, duplication and reordering, and the 67 ms local ACK timeout of the stock tools:
/// every message arrives intact, and go-back-N stays bounded: after a timeout the requester
/// sends one packet and widens its window as ACKs return, instead of a full window per
/// timeout into a queue the ACKs wait behind (which once cost 36 packets per new one and
/// ended in RETRY_EXC_ERR). `SIM_BULK_SEED=n` replays one seed with a trace.
#[test]
fn sim_bulk_through_a_bottleneck() {
    let (seeds, replay) = seeds_or_replay("SIM_BULK_SEED", 0..6);
    let (mut sent, mut resent) = (0u64, 0u64);
    for seed in seeds {
        let max_len = if seed % 2 == 0 { 1 << 20 } else { 256 << 10 };
        let mut cfg = Config::bulk(seed, max_len);
        cfg.trace = replay;
        let mut sim = Sim::new(cfg);
        let r = sim.run();
        for l in &sim.trace {
            println!("{l}");
        }
        assert!(
            r.is_ok(),
            "bulk seed {seed}: {r:?} (replay: SIM_BULK_SEED={seed})"
        );
        for n in &sim.nodes {
            let c = n.qp.counters();
            sent += c.sq.packets_sent;
            resent += c.sq.retransmitted;
        }
    }
    let new = sent - resent;
    println!("bulk: {resent} of {sent} request packets were retransmissions ({new} new)");
    assert!(
        resent < 4 * new,
        "go-back-N amplification: {resent} retransmitted for {new} new request packets"
    );
}

/// RDMA Reads of 1 MiB (an NVMe-oF target's fetches of large writes), 15 posted at once,
/// through a fast link that loses 1% of the packets each way: every read arrives intact, and
/// the responses the responder sends stay within 3.5 times those the reads need. A lost
/// response costs the responses already on their way after it (go-back-N); a read resumed a
/// window at a time must not also bring the reads after it again with each window.
/// `SIM_READS_SEED=n` replays one seed with a trace.
#[test]
fn sim_reads_through_loss() {
    let (seeds, replay) = seeds_or_replay("SIM_READS_SEED", 0..4);
    let (mut sent, mut needed) = (0u64, 0u64);
    for seed in seeds {
        let mut cfg = Config::bulk(seed, 1 << 20);
        cfg.reads_only = true;
        cfg.loss = 10;
        cfg.dup = 0;
        cfg.n_wrs = [15, 0];
        cfg.max_rd_atomic = 16;
        cfg.bottleneck = Some(sim::world::Bottleneck {
            per_packet: 2_000,
            limit: 100_000,
            delay: 50_000,
            reorder: 0,
            lanes: 1,
        });
        cfg.trace = replay;
        let mut sim = Sim::new(cfg);
        let r = sim.run();
        for l in &sim.trace {
            println!("{l}");
        }
        let (req, resp) = (sim.nodes[0].qp.counters(), sim.nodes[1].qp.counters());
        let needed_one = 15 * 1024;
        println!(
            "reads seed {seed}: {r:?}: {} ms, {} responses sent for {needed_one}, {} duplicate \
             responses, {} requests sent, {} timeouts",
            sim.now / 1_000_000,
            resp.rq.responses_sent,
            req.sq.duplicate_responses,
            req.sq.packets_sent,
            req.sq.timeouts
        );
        assert!(
            r.is_ok(),
            "reads seed {seed}: {r:?} (replay: SIM_READS_SEED={seed})"
        );
        sent += resp.rq.responses_sent;
        needed += needed_one;
    }
    assert!(
        2 * sent < 7 * needed,
        "{sent} read responses sent for {needed} needed"
    );
}

/// Runs `cfg` to its end, printing the trace (when `cfg.trace`); the result and both QPs'
/// counters.
fn run_traced(cfg: Config) -> (Result<(), String>, Vec<QpCounters>) {
    let mut sim = Sim::new(cfg);
    let r = sim.run();
    for l in &sim.trace {
        println!("{l}");
    }
    let c = sim.nodes.iter().map(|n| n.qp.counters()).collect();
    (r, c)
}

/// Bulk traffic of messages up to `max_len` bytes through a link that loses, duplicates and
/// reorders nothing but passes one packet per 100 us, queueing at most `limit` packets in each
/// of `lanes` queues.
fn clean_slow_link(seed: u64, max_len: u32, limit: u64, lanes: usize) -> Config {
    let mut cfg = Config::bulk(seed, max_len);
    cfg.loss = 0;
    cfg.dup = 0;
    cfg.bottleneck = Some(sim::world::Bottleneck {
        per_packet: 100_000,
        limit,
        delay: 0,
        reorder: 0,
        lanes,
    });
    cfg
}

/// A slow host (a debug kernel under emulation): two CPUs, each with its own backlog served at
/// 100 us per packet, and each batch a QP sends lands in one of them, so batches overtake each
/// other; no loss. `SIM_SLOW_SEED=n` replays one seed with a trace.
#[test]
fn sim_bulk_on_a_slow_two_cpu_host() {
    let (seeds, replay) = seeds_or_replay("SIM_SLOW_SEED", 0..4);
    for seed in seeds {
        let mut cfg = clean_slow_link(seed, 1 << 20, 1000, 2);
        cfg.trace = replay;
        let (r, c) = run_traced(cfg);
        println!(
            "slow seed {seed}: {r:?}: {} of {} request packets resent, {} timeouts, {} \
             sequence NAKs",
            c[0].sq.retransmitted + c[1].sq.retransmitted,
            c[0].sq.packets_sent + c[1].sq.packets_sent,
            c[0].sq.timeouts + c[1].sq.timeouts,
            c[0].rq.seq_naks_sent + c[1].rq.seq_naks_sent
        );
        assert!(
            r.is_ok(),
            "slow seed {seed}: {r:?} (replay: SIM_SLOW_SEED={seed})"
        );
    }
}

#[test]
fn sim_random_seeds() {
    let env = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok());
    if let Some(seed) = env("SIM_SEED") {
        let (r, steps, sim) = run_seed(seed, true);
        for l in &sim.trace {
            println!("{l}");
        }
        println!("seed {seed}: {:?} ({steps} steps) cfg {:?}", r, sim.cfg);
        if std::env::var("SIM_DUMP").is_ok() {
            for n in &sim.nodes {
                println!("{:#?}", n.qp);
            }
        }
        assert!(r.is_ok(), "seed {seed} failed: {r:?}");
        return;
    }
    let n = env("SIM_SEEDS").unwrap_or(2000);
    let base = env("SIM_SEED_BASE").unwrap_or(0);
    let start = std::time::Instant::now();
    let mut total_steps = 0u64;
    let mut failures = Vec::new();
    let mut stats = [0u64; 10];
    // UC runs without and with reordering: runs, messages sent, messages received.
    let mut uc = [[0usize; 3]; 2];
    for seed in base..base + n {
        let (r, steps, sim) = run_seed(seed, false);
        total_steps += steps;
        if sim.cfg.scenario == Scenario::UcLossy {
            let u = &mut uc[usize::from(sim.cfg.jitter != 0)];
            u[0] += 1;
            for i in 0..2 {
                u[1] += sim.expected_recv[i].len();
                u[2] += sim.uc_received[i].iter().filter(|&&r| r).count();
            }
        }
        stats[8] += u64::from(sim.sqd_done);
        for i in 0..2 {
            let c = sim.nodes[i].qp.counters();
            stats[0] += sim.credit[i].uncredited_msgs;
            stats[1] += c.rq.rnr_naks_sent;
            stats[2] += c.sq.retries;
            stats[3] += c.rq.seq_naks_sent;
            stats[4] += c.rq.duplicates;
            stats[5] += c.migrations;
            stats[6] += c.sq.retransmitted;
            stats[7] += c.sq.packets_sent;
            stats[9] += c.rq.unsolicited_acks;
        }
        if let Err(e) = r {
            failures.push((seed, e));
            if failures.len() >= 5 {
                break;
            }
        }
    }
    let secs = start.elapsed().as_secs_f64().max(1e-9);
    println!(
        "simulation: {n} seeds from {base}, {total_steps} steps in {secs:.2} s = {:.0} steps/s",
        total_steps as f64 / secs
    );
    println!(
        "  sends beyond the LSN {}, RNR NAKs {}, retries {}, sequence NAKs {}, duplicates {}, \
         migrations {}, retransmitted {} of {} request packets, SQD drains {}, unsolicited ACKs {}",
        stats[0],
        stats[1],
        stats[2],
        stats[3],
        stats[4],
        stats[5],
        stats[6],
        stats[7],
        stats[8],
        stats[9]
    );
    // UC drops a message on any gap in its PSNs, so what arrives depends on the network: in
    // order, only the loss and duplication of a percent or two take messages away (92% to 95%
    // of them arrived over four sets of 2,000 seeds); reordered, most messages lose a packet's
    // place (43% to 48% arrived). Over enough runs, far fewer means messages lost that should
    // have arrived.
    for (u, name, floor) in [(uc[0], "in order", 85), (uc[1], "reordered", 30)] {
        println!(
            "  UC {name}: {} runs, {} of {} messages received",
            u[0], u[2], u[1]
        );
        if u[0] >= 20 {
            assert!(
                u[2] * 100 >= u[1] * floor,
                "UC {name}: {} of {} messages received, under {floor}%",
                u[2],
                u[1]
            );
        }
    }
    if let Some((seed, e)) = failures.first() {
        let (_, _, sim) = run_seed(*seed, true);
        let tail = sim.trace.len().saturating_sub(80);
        for l in &sim.trace[tail..] {
            println!("{l}");
        }
        panic!(
            "{} failing seed(s), first: seed {seed}: {e}\nreplay: SIM_SEED={seed} cargo test --test sim -- --nocapture sim_random_seeds\nall: {:?}",
            failures.len(),
            failures.iter().map(|(s, _)| *s).collect::<Vec<_>>()
        );
    }
}

/// Guest test 22-srq's first point in the simulation: receives on an SRQ at both ends (the
/// driver's: a request that needs a WQE takes one when the QP holds none), node 0's initial ACK
/// lost (node 1 was not in RTR yet, as with rcpair's connect order), messages up to 1 MiB both
/// ways through a clean, slow link with the stock 67 ms local ACK timeout: every message
/// completes, none with RETRY_EXC_ERR. `SIM_SRQ_SEED=n` replays one seed with a trace.
#[test]
fn sim_srq_both_ways_without_initial_credits() {
    let n: u64 = std::env::var("SIM_SRQ_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8);
    let (seeds, replay) = seeds_or_replay("SIM_SRQ_SEED", 0..n);
    for seed in seeds {
        let mut cfg = clean_slow_link(
            seed,
            if seed % 2 == 0 { 1 << 20 } else { 64 << 10 },
            100_000,
            1,
        );
        cfg.srq = true;
        cfg.lose_initial_ack = true;
        cfg.trace = replay;
        let (r, c) = run_traced(cfg);
        assert!(
            r.is_ok(),
            "srq seed {seed}: {r:?} counters {c:?} (replay: SIM_SRQ_SEED={seed})"
        );
    }
}

/// Bulk traffic as the guest tests run it (a 268 ms local ACK timeout, 4 Reads and atomics in
/// flight, `wrs` WRs each way) through one queue passing a packet per `per_packet` ns, then
/// `delay` ns, which `reorder` per mille of the packets skip.
fn guest_like(
    seed: u64,
    max_len: u32,
    wrs: usize,
    per_packet: u64,
    delay: u64,
    reorder: u64,
) -> Config {
    let mut cfg = Config::bulk(seed, max_len);
    cfg.timeout = 16;
    cfg.max_rd_atomic = 4;
    cfg.n_wrs = [wrs, wrs];
    cfg.bottleneck = Some(sim::world::Bottleneck {
        per_packet,
        limit: 1000,
        delay,
        reorder,
        lanes: 1,
    });
    cfg
}

/// A link that goes down and up every 0.5 s (guest test 65 flaps veth0 so) under bulk traffic
/// of every opcode, with a 268 ms local ACK timeout: each outage costs timeouts, and every WR
/// completes intact anyway, for a retry count of 7 outlasts an outage of 0.5 s (an attempt in
/// each up phase gets through). `SIM_FLAP_SEED=n` replays one seed with a trace.
#[test]
fn sim_flapping_link() {
    let (seeds, replay) = seeds_or_replay("SIM_FLAP_SEED", 0..8);
    for seed in seeds {
        // Messages up to 160 KiB, for the regions of a bulk run; 2.5 MB/s each way: the run
        // spans about ten outages.
        let mut cfg = guest_like(seed, 160 << 10, 150, 400_000, 1_000_000, 0);
        cfg.loss = 0;
        cfg.dup = 0;
        cfg.flap = Some((500_000_000, 500_000_000));
        cfg.trace = replay;
        let (r, c) = run_traced(cfg);
        let t = c[0].sq.timeouts;
        println!("flap seed {seed}: {r:?}: {t} timeouts");
        assert!(
            r.is_ok(),
            "flap seed {seed}: {r:?} (replay: SIM_FLAP_SEED={seed})"
        );
        assert!(t > 5, "flap seed {seed}: the outages never hit the traffic");
    }
}

/// Seeds of storms like guest test 68's (5% duplication each way, 10 ms delay, a 268 ms local
/// ACK timeout): 68's own (5% loss, a quarter of the packets overtaking), a harsher one (11%
/// loss), and 5% loss without overtaking. Every WR completes intact. Two once ended in
/// RETRY_EXC_ERR, each through a hold set by a partial duplicate Read on "the resources after
/// it" (responses kept until the requester asks for them again), which kept every ACK queued
/// behind it waiting: seed 35 at 11%, where the hold began at the next new Read, and seed 1861
/// without overtaking, where it covered an atomic whose answer the requester had.
/// `SIM_STORM_SEED=n` replays one seed with a trace, `SIM_STORM_LOSS` and `SIM_STORM_REORDER`
/// (per mille; 110 and 250 unless given) its storm.
#[test]
fn sim_storm_regressions() {
    let env = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok());
    // (seed, loss per mille, overtaking per mille)
    let runs: Vec<(u64, u64, u64)> = match env("SIM_STORM_SEED") {
        Some(s) => vec![(
            s,
            env("SIM_STORM_LOSS").unwrap_or(110),
            env("SIM_STORM_REORDER").unwrap_or(250),
        )],
        None => (30..40)
            .map(|s| (s, 110, 250))
            .chain((40..50).map(|s| (s, 50, 250)))
            .chain([(1861, 50, 0)])
            .collect(),
    };
    let replay = runs.len() == 1;
    for (seed, loss, reorder) in runs {
        let mut cfg = guest_like(seed, 64 << 10, 60, 20_000, 10_000_000, reorder);
        cfg.loss = loss;
        cfg.dup = 50;
        cfg.time_limit = 600_000_000_000;
        cfg.trace = replay;
        let (r, _) = run_traced(cfg);
        assert!(
            r.is_ok(),
            "storm seed {seed}: {r:?} (replay: SIM_STORM_SEED={seed} SIM_STORM_LOSS={loss} \
             SIM_STORM_REORDER={reorder})"
        );
    }
}
