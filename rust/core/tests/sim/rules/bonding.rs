//! Seed 002, APM "bonding": a QP whose application loaded no alternate path gets one on the
//! other port and arms, migrates at once when its primary path's port goes down, and re-arms
//! when the port is back, with the re-arm race settled by the protocol (`Apm::auto_rearm`).
//!
//! The alternate path keeps both GIDs and only changes the port, so a packet's path here is
//! the port it leaves and arrives on: link 0 between the two ports 1, link 1 between the two
//! ports 2, both carrying the GIDs of link 0.

use rvrdma_core::apm::{MigState, PathMatch};
use rvrdma_core::events::{AsyncEvent, Timer, WcStatus};
use rvrdma_core::qp::QpAttrs;
use rvrdma_core::qp_state::{AttrMask, QpState};
use rvrdma_core::wire::Headers;
use rvrdma_core::wqe::SendOpcode;

use super::fixtures::*;
use crate::sim::node::timer_index;

/// Two RC QPs in RTS on two-port devices, the links' states, and packets in flight.
struct Bond {
    d: Duo,
    /// Links 0 and 1 (each end's ports 1 and 2) up.
    up: [bool; 2],
}

impl Bond {
    /// Both ends in RTS, nothing loaded but the primary path over port 1; the policy on at
    /// both ends with both ports up.
    fn new(recvs: usize) -> Bond {
        let mut b = Bond {
            d: Duo::running_with(Opts {
                pre_rtr_recvs: [recvs, recvs],
                ..Opts::default()
            }),
            up: [true, true],
        };
        b.ports();
        b
    }

    /// Tells both ends the current port states (what the shell does on a port event).
    fn ports(&mut self) {
        for i in 0..2 {
            let e = &mut self.d.e[i];
            e.qp.set_bonding(Some(self.up), &mut e.out);
        }
    }

    /// Delivers one packet to `to` as it arrives over port `port`, or loses it on a link that
    /// is down.
    fn deliver(&mut self, to: usize, h: &Headers, payload: &[u8], port: u8) {
        if !self.up[usize::from(port - 1)] {
            return;
        }
        let pm = PathMatch {
            port_num: port,
            sgid: gid(1 - to, 0),
            dgid: gid(to, 0),
            ..Default::default()
        };
        let now = self.d.now;
        let e = &mut self.d.e[to];
        e.qp.receive(now, h, payload.into(), &pm, &mut e.mem, &mut e.out);
    }

    /// Moves what node `from` sent. Returns how many packets left it.
    fn flow(&mut self, from: usize) -> usize {
        let pk = self.d.take(from);
        let n = pk.len();
        for (h, p, port) in pk {
            self.deliver(1 - from, &h, &p, port);
        }
        n
    }

    /// Runs both sides until nothing moves (no timer fires).
    fn pump(&mut self) {
        for _ in 0..1000 {
            let mut moved = 0;
            for i in 0..2 {
                self.d.progress(i);
                moved += self.flow(i);
            }
            if moved == 0 {
                return;
            }
        }
        panic!("pump did not settle");
    }

    /// Tells only end `i` the current port states.
    fn ports_of(&mut self, i: usize) {
        let e = &mut self.d.e[i];
        e.qp.set_bonding(Some(self.up), &mut e.out);
    }

    /// Fires the retransmit timers that are armed; whether there was one.
    fn fire_retransmits(&mut self) -> bool {
        let mut fired = false;
        for i in 0..2 {
            if self.d.e[i].out.timers[timer_index(Timer::Retransmit)].is_some() {
                self.d.fire(i, Timer::Retransmit);
                fired = true;
            }
        }
        fired
    }

    /// Fires the retransmit timers that are armed, then pumps, until none is.
    fn settle(&mut self) {
        self.pump();
        for _ in 0..16 {
            if !self.fire_retransmits() {
                return;
            }
            self.pump();
        }
    }

    /// Sets link `link` up or down and tells both ends.
    fn link(&mut self, link: usize, up: bool) {
        self.up[link] = up;
        self.ports();
    }

    fn mig(&self, i: usize) -> MigState {
        self.d.e[i].qp.mig_state()
    }

    fn port(&self, i: usize) -> u8 {
        self.d.e[i].qp.primary_path().port_num
    }

    fn send(&mut self, i: usize, id: u64) {
        self.d
            .post(i, send_wr(id, SendOpcode::Send, 10))
            .expect("post");
    }
}

/// Both ends armed: each loaded the alternate path on port 2 by itself and armed on the
/// other's MigReq=0.
fn armed_bond() -> Bond {
    let mut b = Bond::new(16);
    for i in 0..2 {
        assert_eq!(b.mig(i), MigState::Rearm, "end {i} re-armed on its own");
    }
    // Any packet with MigReq=0 arms the peer: one Send each way.
    b.send(0, 1);
    b.pump();
    b.send(1, 2);
    b.pump();
    for i in 0..2 {
        assert_eq!(b.mig(i), MigState::Armed, "end {i} armed");
    }
    b
}

#[test]
fn seed002_a_qp_without_an_alternate_path_gets_one_on_the_other_port() {
    let b = armed_bond();
    for i in 0..2 {
        let q = b.d.e[i].qp.query();
        assert_eq!(q.alt_path.port_num, 2);
        assert_eq!(q.alt_path.sgid, q.path.sgid, "the alternate keeps the GIDs");
        assert_eq!(q.alt_path.dgid, q.path.dgid);
        assert_eq!(b.d.e[i].qp.counters().auto_rearms, 1);
        assert!(!b.d.e[i].out.has_event(AsyncEvent::PathMig));
    }
}

/// Seed 002: "automatically rearm connection whenever an alternate path exists" holds for a
/// connection that carries nothing: each end announces its re-arm, arms on the other's
/// announcement and answers it once, so both arm with no message posted and the exchange ends.
/// A port failure before the first message then fails over like any other.
#[test]
fn seed002_idle_qps_arm_without_traffic_and_fail_over() {
    let mut b = Bond::new(16);
    b.pump();
    for i in 0..2 {
        assert_eq!(
            b.mig(i),
            MigState::Armed,
            "end {i} armed with nothing posted"
        );
        assert!(b.d.e[i].out.send_cqes.is_empty());
    }
    b.link(0, false);
    assert_eq!(b.d.e[0].qp.counters().port_failovers, 1);
    b.send(0, 3);
    b.pump();
    assert_eq!((b.port(0), b.port(1)), (2, 2));
    assert!(b.d.e[0].sends_all(WcStatus::Success));
    assert_eq!(b.d.e[1].out.recv_cqes.len(), 1);
    // And again once link 0 is back: re-armed and armed with no message, ready for link 1.
    b.link(0, true);
    b.pump();
    for i in 0..2 {
        assert_eq!(b.mig(i), MigState::Armed, "end {i} armed again, idle");
    }
    b.link(1, false);
    assert_eq!(b.port(0), 1, "failed over back to port 1 at once");
}

#[test]
fn seed002_policy_off_leaves_apm_to_the_application() {
    // Never on: nothing is loaded.
    let mut d = Duo::running(4);
    assert_eq!(d.e[0].qp.mig_state(), MigState::Migrated);
    let e = &mut d.e[0];
    e.qp.set_bonding(None, &mut e.out);
    assert_eq!(e.qp.mig_state(), MigState::Migrated);
    assert!(
        e.qp.query().alt_path.port_num == 0,
        "no alternate path loaded"
    );
    // Turned off after it armed both ends: the loaded alternate still serves a migration (by
    // retry exhaustion here, as the ends hear of no port event), but nothing re-arms after it.
    let mut b = armed_bond();
    for i in 0..2 {
        let e = &mut b.d.e[i];
        e.qp.set_bonding(None, &mut e.out);
    }
    let rearms = b.d.e[0].qp.counters().auto_rearms;
    b.up[0] = false;
    b.send(0, 7);
    b.settle();
    assert!(b.d.e[0].out.has_event(AsyncEvent::PathMig));
    assert_eq!(b.port(0), 2, "migrated to the alternate path");
    assert_eq!(b.mig(0), MigState::Migrated, "and not re-armed");
    assert_eq!(b.d.e[0].qp.counters().auto_rearms, rearms);
    assert_eq!(b.d.e[0].qp.query().alt_path.port_num, 0);
    assert_eq!(b.d.e[0].qp.counters().port_failovers, 0);
}

#[test]
fn seed002_an_alternate_path_the_application_loaded_is_kept() {
    // Loaded without re-arming: the QP stays Migrated, its alternate path the application's.
    let mut d = Duo::running(4);
    let mut a = QpAttrs {
        qp_state: QpState::Rts,
        alt_path: d.e[0].paths[1],
        ..QpAttrs::default()
    };
    a.alt_path.timeout = 12;
    d.modify(0, &a, AttrMask::ALT_PATH)
        .expect("load an alternate path");
    let alt = d.e[0].qp.query().alt_path;
    assert_eq!(alt.timeout, 12);
    assert_eq!(d.e[0].qp.mig_state(), MigState::Migrated);
    let e = &mut d.e[0];
    e.qp.set_bonding(Some([true, true]), &mut e.out);
    assert_eq!(e.qp.query().alt_path, alt, "the policy left it alone");
    assert_eq!(e.qp.mig_state(), MigState::Migrated, "and did not re-arm");
    assert_eq!(e.qp.counters().auto_rearms, 0);
    // Armed by the application: kept too.
    let mut d = armed_duo();
    let alt = d.e[0].qp.query().alt_path;
    let e = &mut d.e[0];
    e.qp.set_bonding(Some([true, true]), &mut e.out);
    assert_eq!(e.qp.query().alt_path, alt);
    assert_eq!(e.qp.counters().auto_rearms, 0);
}

#[test]
fn seed002_local_port_down_migrates_at_once_and_the_peer_follows() {
    let mut b = armed_bond();
    // A Send lost with link 0 as it goes down.
    b.up[0] = false;
    b.send(0, 7);
    b.d.progress(0);
    b.flow(0);
    b.ports();
    // Migrated by the port event, not by retry exhaustion: no timer fired.
    assert!(b.d.e[0].out.has_event(AsyncEvent::PathMig));
    assert_eq!(b.d.e[0].qp.counters().port_failovers, 1);
    assert_eq!(b.port(0), 2);
    assert_eq!(b.mig(0), MigState::Migrated);
    // The Send goes again over port 2 at once, and the ACK that announces the migration.
    b.d.progress(0);
    let p = b.d.take(0);
    assert!(!p.is_empty());
    assert!(p.iter().all(|(h, _, port)| *port == 2 && h.bth.mig_req));
    for (h, pl, port) in &p {
        b.deliver(1, h, pl, *port);
    }
    assert!(
        b.d.e[1].out.has_event(AsyncEvent::PathMig),
        "the peer migrated"
    );
    assert_eq!(b.port(1), 2);
    b.pump();
    assert!(b.d.e[0].sends_all(WcStatus::Success));
    assert_eq!(b.d.e[1].out.recv_cqes.len(), 2, "each Send received once");
}

#[test]
fn seed002_the_peer_follows_on_the_announcement_alone() {
    let mut b = armed_bond();
    b.link(0, false);
    assert_eq!(b.port(0), 2);
    // Nothing was outstanding: the ACK alone tells the peer, whose own Send then goes over
    // port 2 at once instead of waiting for retry exhaustion on the dead port.
    b.d.progress(0);
    let p = b.d.take(0);
    assert_eq!(p.len(), 1, "one ACK announces the migration");
    b.deliver(1, &p[0].0, &p[0].1, p[0].2);
    assert_eq!(b.port(1), 2);
    b.send(1, 9);
    b.pump();
    assert!(b.d.e[1].sends_all(WcStatus::Success));
    assert_eq!(b.d.e[1].out.send_cqes.len(), 2);
}

#[test]
fn seed002_rearm_when_the_port_is_back() {
    let mut b = armed_bond();
    b.link(0, false);
    b.pump();
    assert_eq!((b.port(0), b.port(1)), (2, 2));
    for i in 0..2 {
        assert_eq!(
            b.mig(i),
            MigState::Migrated,
            "end {i}: nothing to re-arm with"
        );
    }
    b.link(0, true);
    for i in 0..2 {
        assert_eq!(b.mig(i), MigState::Rearm, "end {i} re-armed");
        assert_eq!(b.d.e[i].qp.query().alt_path.port_num, 1);
    }
    b.send(0, 20);
    b.pump();
    b.send(1, 21);
    b.pump();
    for i in 0..2 {
        assert_eq!(b.mig(i), MigState::Armed, "end {i} armed again");
    }
    // And the next failure, of link 1 now, goes back to port 1.
    b.link(1, false);
    b.pump();
    assert_eq!((b.port(0), b.port(1)), (1, 1));
    b.send(0, 22);
    b.pump();
    assert!(b.d.e[0].sends_all(WcStatus::Success));
}

/// The re-arm race: end 0 migrated on its own and its port came back before end 1 followed.
/// Re-arming then would send MigReq=0 over port 2, which end 1 (still Armed on port 1) takes
/// for neither a migration request nor its primary path, and drops; end 0 waits instead until
/// end 1's first packet arrives over port 2.
#[test]
fn seed002_rearm_waits_until_the_peer_follows() {
    let mut b = armed_bond();
    b.up[0] = false;
    b.ports_of(0);
    assert_eq!(b.port(0), 2);
    b.d.take(0); // the announcement is lost
    b.up[0] = true;
    b.ports_of(0);
    assert_eq!(
        b.mig(0),
        MigState::Migrated,
        "no re-arm before the peer follows"
    );
    assert_eq!(
        b.d.e[0].qp.query().alt_path.port_num,
        0,
        "no alternate loaded"
    );
    // End 1 sends over port 1 (its primary): end 0 drops it (not its primary any more), and
    // end 1 migrates at its retry exhaustion, its MigReq=1 reaches end 0 over port 2.
    b.send(1, 30);
    b.d.progress(1);
    b.flow(1);
    for _ in 0..8 {
        if b.port(1) == 2 {
            break;
        }
        b.d.fire(1, Timer::Retransmit);
        b.d.progress(1);
        b.flow(1);
    }
    assert_eq!(b.port(1), 2, "end 1 migrated on retry exhaustion");
    assert_eq!(
        b.mig(0),
        MigState::Rearm,
        "end 0 re-armed on end 1's first packet"
    );
    b.pump();
    b.send(0, 31);
    b.pump();
    b.send(1, 32);
    b.pump();
    for i in 0..2 {
        assert_eq!(b.mig(i), MigState::Armed, "end {i} armed");
        assert!(b.d.e[i].sends_all(WcStatus::Success));
    }
}

/// Port 1 flaps faster than migrations and re-arms complete: down and up again with packets
/// in flight, six times. The first down migrates both ends; no later flap touches their new
/// primary, and the re-arm waits for traffic. No Send is lost, failed or received twice, and
/// both ends end up armed again.
#[test]
fn seed002_a_flapping_port_loses_nothing() {
    let mut b = armed_bond();
    let mut id = 100;
    for _ in 0..6 {
        b.link(0, false);
        for i in 0..2 {
            b.send(i, id);
            id += 1;
            b.d.progress(i);
        }
        b.flow(0);
        b.link(0, true);
        b.flow(1);
    }
    b.settle();
    b.send(0, 200);
    b.send(1, 201);
    b.settle();
    for i in 0..2 {
        assert!(b.d.e[i].sends_all(WcStatus::Success), "end {i}");
        assert_eq!(
            b.d.e[i].out.send_cqes.len(),
            1 + 6 + 1,
            "end {i}: every Send completed"
        );
        assert_eq!(
            b.d.e[1 - i].out.recv_cqes.len(),
            1 + 6 + 1,
            "received once each"
        );
        assert_eq!(b.d.state(i), rvrdma_core::qp_state::QpState::Rts);
        assert_eq!(b.mig(i), MigState::Armed, "end {i} armed again");
        assert_eq!(b.port(i), 2);
    }
}

/// rping's two applications over a [`Bond`] (end 0 the client, end 1 the server): one receive
/// posted at a time; per ping the client Sends, the server Reads the client's buffer and Sends,
/// the client Sends again, the server Writes and Sends.
struct Rping {
    /// Client: pings done, and the step within the ping (0: waits "go ahead", 1: "done").
    pings: u64,
    cstep: u8,
    /// Receives seen by each end.
    seen: [usize; 2],
    /// Server send completions seen.
    sends_seen: usize,
    /// Sends posted by each end.
    posted: [u64; 2],
}

impl Rping {
    const PINGS: u64 = 4;

    /// A bond with the client's buffer filled and its first Send posted.
    fn start() -> (Bond, Rping) {
        let mut b = Bond::new(1);
        b.pump();
        let data: Vec<u8> = (0..64u8).collect();
        fill(&b.d.e[0].mem, RMT, RMT_VA, &data);
        b.send(0, 1);
        let r = Rping {
            pings: 0,
            cstep: 0,
            seen: [0; 2],
            sends_seen: 0,
            posted: [1, 0],
        };
        (b, r)
    }

    /// Both applications react to what completed; every completion must be a success.
    fn react(&mut self, b: &mut Bond, what: &str) {
        while self.seen[0] < b.d.e[0].out.recv_cqes.len() {
            let st = b.d.e[0].out.recv_cqes[self.seen[0]].status;
            assert_eq!(st, WcStatus::Success, "{what}");
            self.seen[0] += 1;
            b.d.post_recv(0, 64).expect("recv");
            if self.cstep == 0 {
                self.cstep = 1;
            } else {
                self.cstep = 0;
                self.pings += 1;
                if self.pings == Self::PINGS {
                    continue;
                }
            }
            b.send(0, 10 + self.seen[0] as u64);
            self.posted[0] += 1;
        }
        while self.seen[1] < b.d.e[1].out.recv_cqes.len() {
            let st = b.d.e[1].out.recv_cqes[self.seen[1]].status;
            assert_eq!(st, WcStatus::Success, "{what}");
            self.seen[1] += 1;
            b.d.post_recv(1, 64).expect("recv");
            let id = 1000 + self.seen[1] as u64;
            if self.seen[1] % 2 == 1 {
                b.d.post(1, read_wr(id, 64)).expect("read");
            } else {
                b.d.post(1, send_wr(id, SendOpcode::RdmaWrite, 64))
                    .expect("write");
            }
        }
        while self.sends_seen < b.d.e[1].out.send_cqes.len() {
            let c = b.d.e[1].out.send_cqes[self.sends_seen];
            assert_eq!(c.status, WcStatus::Success, "{what}: server WR {}", c.wr_id);
            self.sends_seen += 1;
            if (1000..2000).contains(&c.wr_id) {
                b.send(1, 5000 + c.wr_id);
                self.posted[1] += 1;
            }
        }
    }

    /// Runs the exchange to its end: `on_packet(bond, from, headers, payload, port)` carries
    /// each packet sent (delivers, holds or drops it), then both applications react; the
    /// retransmission timers fire whenever nothing moves. Then [`Rping::check`].
    fn run(
        &mut self,
        b: &mut Bond,
        what: &str,
        mut on_packet: impl FnMut(&mut Bond, usize, Headers, Vec<u8>, u8),
    ) {
        for _round in 0..10_000 {
            let mut moved = 0;
            for i in 0..2 {
                b.d.progress(i);
                for (h, p, port) in b.d.take(i) {
                    on_packet(b, i, h, p, port);
                    moved += 1;
                }
            }
            self.react(b, what);
            if moved == 0 && !b.fire_retransmits() {
                break;
            }
        }
        self.check(b, what);
    }

    /// Every ping ended, each Send was received exactly once, every WR succeeded.
    fn check(&self, b: &Bond, what: &str) {
        assert_eq!(self.pings, Self::PINGS, "{what}: every ping ended");
        assert_eq!(
            self.seen[0] as u64, self.posted[1],
            "{what}: client received each Send once"
        );
        assert_eq!(
            self.seen[1] as u64, self.posted[0],
            "{what}: server received each Send once"
        );
        for i in 0..2 {
            assert!(b.d.e[i].sends_all(WcStatus::Success), "{what}: end {i}");
        }
    }
}

/// rping's exchange (one receive posted at a time; per ping the client Sends, the server Reads
/// the client's buffer and Sends, the client Sends again, the server Writes and Sends), with
/// link 0 cut after each possible number of packets, restored later, then link 1 cut: every
/// message is received exactly once, every WR completes successfully, every ping ends.
#[test]
fn seed002_rping_exchange_survives_cuts_anywhere() {
    for cut in 1..80 {
        let (mut b, mut r) = Rping::start();
        let what = format!("cut {cut}");
        let mut steps = 0;
        r.run(&mut b, &what, |b, i, h, p, port| {
            steps += 1;
            match steps - cut {
                0 => b.link(0, false),
                30 => b.link(0, true),
                60 => b.link(1, false),
                _ => {}
            }
            b.deliver(1 - i, &h, &p, port);
        });
    }
}

/// How the kernel can move packets around a link cut that the plain cut above does not: each
/// end hears of the cut some packets after it happened (`lag`: its port event comes after the
/// fact, the peer's often later still), and what an end sends over the dead port meanwhile is
/// not lost but held (the IP layer queues them on the fresh neighbour entry it resolves for a
/// route whose entry the cut flushed, and sends them once ARP answers) and delivered, in order,
/// over the old path once the link is back: before either end hears of the restoration, or
/// just after both re-armed.
struct LateCut {
    /// Packets after which link 0 goes down.
    cut: usize,
    /// Packets after the cut each end hears of it.
    lag: [usize; 2],
    /// The held packets arrive after both ends heard of the restoration (else before).
    release_after_restore: bool,
}

/// rping's exchange (see `seed002_rping_exchange_survives_cuts_anywhere`) through a cut of
/// link 0 as `c` describes, its restoration 30 packets later and a cut of link 1 30 packets
/// after that. Panics unless every message is received exactly once and every WR succeeds.
fn rping_through_late_cut(c: &LateCut) {
    let (mut b, mut r) = Rping::start();
    let mut steps = 0;
    // Packets sent over link 0 while it is down: (to, headers, payload).
    let mut held: Vec<(usize, Headers, Vec<u8>)> = Vec::new();
    let mut released = false;
    let what = format!(
        "cut {} lag {:?} release {}",
        c.cut,
        c.lag,
        if c.release_after_restore {
            "after"
        } else {
            "before"
        }
    );
    r.run(&mut b, &what, |b, i, h, p, port| {
        steps += 1;
        if steps == c.cut {
            b.up[0] = false;
        }
        for e in 0..2 {
            if steps == c.cut + c.lag[e] {
                b.ports_of(e);
            }
        }
        if steps == c.cut + 30 {
            if !c.release_after_restore {
                for (to, hh, pp) in held.drain(..) {
                    b.up[0] = true;
                    b.deliver(to, &hh, &pp, 1);
                    b.up[0] = false;
                }
            }
            b.link(0, true);
            if c.release_after_restore {
                for (to, hh, pp) in held.drain(..) {
                    b.deliver(to, &hh, &pp, 1);
                }
            }
            released = true;
        }
        if steps == c.cut + 60 {
            b.link(1, false);
        }
        if port == 1 && !b.up[0] && !released {
            held.push((1 - i, h, p));
        } else {
            b.deliver(1 - i, &h, &p, port);
        }
    });
}

/// The rping exchange through cuts the ends hear of late, with what they sent over the dead
/// port meanwhile delivered long after, over the old path: a stale request is a duplicate or
/// off the primary path, a stale response answers nothing, so no message is received twice,
/// none is lost and nothing fails.
#[test]
fn seed002_rping_exchange_survives_late_port_events_and_stale_old_path_packets() {
    for cut in 1..80 {
        for lag in [[0, 0], [0, 4], [2, 12], [6, 1]] {
            for release_after_restore in [false, true] {
                rping_through_late_cut(&LateCut {
                    cut,
                    lag,
                    release_after_restore,
                });
            }
        }
    }
}

/// A failover while the peer's RDMA Read is answered: none or part of the responses get through
/// before the cut, and the announcement's ACK covers the Read's last PSN while the requester
/// still waits for the rest (an ACK past an outstanding Read means its responses were lost: the
/// requester asks again). The Read completes once, with all its data.
#[test]
fn seed002_a_read_half_answered_across_a_failover_completes_once() {
    for through in [0, 1, 2, 6, 11] {
        let mut b = armed_bond();
        let data: Vec<u8> = (0..3000u32).map(|i| (i * 11 + 5) as u8).collect();
        fill(&b.d.e[0].mem, RMT, RMT_VA, &data);
        b.d.post(1, read_wr(40, 3000)).expect("post");
        b.d.progress(1);
        b.flow(1);
        b.d.progress(0);
        let resp = b.d.take(0);
        assert_eq!(resp.len(), 12, "twelve response packets (path MTU 256)");
        for (h, p, port) in resp.iter().take(through) {
            b.deliver(1, h, p, *port);
        }
        b.up[0] = false;
        b.ports();
        b.settle();
        assert_eq!((b.port(0), b.port(1)), (2, 2));
        let reads: Vec<_> = b.d.e[1]
            .out
            .send_cqes
            .iter()
            .filter(|c| c.wr_id == 40)
            .collect();
        assert_eq!(reads.len(), 1, "{through} through: the Read completed once");
        assert_eq!(
            b.d.e[1].out.send_cqes.len(),
            2,
            "armed_bond's Send and the Read"
        );
        assert_eq!(reads[0].status, WcStatus::Success);
        let got = b.d.e[1]
            .mem
            .0
            .borrow()
            .read(DST, DST_VA, 3000)
            .expect("read");
        assert!(got == data, "{through} through: the Read's data landed");
    }
}
