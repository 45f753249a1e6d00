// SPDX-License-Identifier: GPL-2.0

//! Per-device counters (shown by `rdma statistic`). Names follow rdma_rxe where the meaning is
//! the same, so scripts compare the two drivers one to one.

use super::device::RvrDevice;
use crate::ib::{
    device::Device,
    stats::{PmaCounters, StatDesc, StatsVerbs},
};
use crate::rvcore::qp::{QpCounters, QpCountersView};
use core::sync::atomic::{AtomicU64, Ordering};

macro_rules! counters {
    ($($(#[$m:meta])* $name:ident),* $(,)?) => {
        /// The device's counters.
        #[derive(Default)]
        pub struct Counters {
            $($(#[$m])* pub $name: AtomicU64,)*
        }

        /// The counters' descriptors, in [`Counters::values`] order.
        pub static DESCS: &[StatDesc] = &[$(
            StatDesc::new(
                match core::ffi::CStr::from_bytes_with_nul(
                    concat!(stringify!($name), "\0").as_bytes()
                ) {
                    Ok(c) => c,
                    Err(_) => panic!("counter name"),
                }
            ),
        )*];

        impl Counters {
            /// The current values, in [`NAMES`] order.
            pub fn values(&self, out: &mut [u64]) {
                let v = [$(self.$name.load(Ordering::Relaxed)),*];
                for (o, v) in out.iter_mut().zip(v.iter()) {
                    *o = *v;
                }
            }
        }
    };
}

counters! {
    /// Packets transmitted.
    sent_pkts,
    /// Packets received (ICRC good, for an existing QP).
    rcvd_pkts,
    /// Bytes transmitted (IP packets).
    sent_bytes,
    /// Bytes received (IP packets).
    rcvd_bytes,
    /// Duplicate requests received.
    duplicate_request,
    /// Out-of-sequence requests received.
    out_of_seq_request,
    /// RNR NAKs received.
    rcvd_rnr_err,
    /// RNR NAKs sent.
    send_rnr_err,
    /// Sequence-error NAKs received.
    rcvd_seq_err,
    /// Sequence-error NAKs sent.
    seq_naks_sent,
    /// Retries started by the requester.
    completer_retry_err,
    /// Request packets retransmitted.
    retransmitted_pkts,
    /// Transport timer expiries.
    transport_timeouts,
    /// Sends that waited for end-to-end credits.
    credit_stalls,
    /// Credit probes sent while a message waited for credits.
    credit_probes,
    /// Unsolicited (credit update) ACKs sent.
    credit_acks_sent,
    /// Credit update ACKs received (the peer's initial and unsolicited ACKs, and its answers to
    /// credit probes), counted apart from duplicate responses.
    credit_acks_rcvd,
    /// Duplicate responses dropped.
    duplicate_responses,
    /// R_Keys invalidated by a received Send with Invalidate.
    remote_invalidations,
    /// Completions with retry-exceeded status.
    retry_exceeded_err,
    /// Completions with RNR-retry-exceeded status.
    retry_rnr_exceeded_err,
    /// Path migrations.
    path_migrations,
    /// Migration requests dropped for not matching the alternate path (PATH_MIG_ERR).
    path_mig_errors,
    /// Alternate paths the bonding policy loaded (each followed by a re-arm).
    apm_auto_rearms,
    /// Migrations the bonding policy made when the primary path's port went down.
    apm_port_failovers,
    /// Packets dropped by a QP (state, header or path checks).
    qp_dropped,
    /// Packets dropped by a QP because their P_Key does not match the QP's (another
    /// partition, or two limited members).
    pkey_violations,
    /// Datagrams dropped because their Q_Key does not match the QP's (also the ports'
    /// `qkey_viol_cntr`).
    qkey_violations,
    /// Packets dropped for a bad ICRC.
    icrc_errors,
    /// Malformed packets dropped.
    rx_malformed,
    /// Packets for a QP number that does not exist.
    rx_no_qp,
    /// Packets that could not be built or sent (for want of a route: `tx_no_route`).
    send_err,
    /// Packets dropped because no route to their destination was known yet (the work item
    /// looks it up; a connected QP resends, a datagram is lost as on any network).
    tx_no_route,
    /// Packets not sent because their path's port is not ACTIVE (lost, as on the wire: a
    /// connected QP resends them, over its new path after a migration).
    tx_port_down,
    /// Times a QP's sending moved to the CPU of its previous batch, which another CPU could
    /// have overtaken (see `net::backlog`).
    tx_cpu_handoffs,
    /// Doorbells of unsignaled RDMA Reads and atomics whose requests another CPU sent, so
    /// that the call returned before their responses (see `QpShared::flush_tx_elsewhere`).
    tx_doorbell_handoffs,
    /// Sends of the request stream by the work item that waits on another CPU for a
    /// doorbell's signaled RDMA Read or atomic (see `qp::linger`): about one a request.
    tx_linger_handoffs,
    /// Times that work item took a client's next WQEs from its send ring before their doorbell
    /// (see `qp::linger`).
    tx_linger_ring_takes,
    /// User doorbells that found every WQE of the send ring taken already (by that work item
    /// or by a packet's turn at the QP) and returned without the QP lock.
    tx_doorbells_empty,
    /// Packets that left in a burst of two or more: one UDP GSO packet (`tx_burst`, see
    /// `net::tx::Burst`).
    tx_burst_pkts,
    /// Packets whose payload left by reference to the user's pages, not copied (`tx_paged`,
    /// see `net::paged`).
    tx_paged_pkts,
    /// Received packets whose payload the core took where it lay, in the packet's page
    /// fragments (a payload sent by reference, on a veth), to be copied from there into memory:
    /// the packet was never made linear (see `driver::held_payload`).
    rx_paged_pkts,
    /// Received packets a stream put in their QP's receive queue, for another CPU
    /// (`rx_spread`, see `qp::rx_queue`).
    rx_queued_pkts,
    /// Queued packets its work item took (the others were drained by a packet or verb that
    /// came after them, or taken by the receiving CPU when the queue was full).
    rx_queue_worker_pkts,
    /// Queued packets the receiving CPU took in a batch of its own because the queue was
    /// full (see `qp::rx_queue`).
    rx_queue_help_pkts,
    /// Times a receive queue was handled at high priority because packets still waited when
    /// its deadline came, `URGENT_AFTER_MS` after it was armed, and its work item had not run
    /// since (see `qp::rx_queue`).
    rx_queue_urgent_runs,
    /// Runs of a receive queue's work item queued for any CPU, in a worker thread: a stream of
    /// RDMA Read responses (see `qp::rx_queue`).
    rx_queue_any_cpu_runs,
    /// Longest wait of a QP's work item (timers, transmit budget) between being queued and
    /// running, in microseconds (see `qp::work_delay`).
    work_delay_max_us,
    /// Longest wait of a QP's receive queue work item between being queued and running, in
    /// microseconds.
    rx_queue_delay_max_us,
    /// Longest wait of a QP's transmit hand-off (a stream's packets sent on the CPU of their
    /// last batch, see `qp::transmit`) between being queued and either running or the stream
    /// being sent by another context, in microseconds.
    tx_handoff_delay_max_us,
    /// Longest wait of a QP's timer work item between its timer firing and its run, in
    /// microseconds (see `qp::timers`).
    timer_delay_max_us,
    /// On-demand-paging ranges faulted in because a packet or WQE found them not resident.
    odp_faults,
    /// Packets dropped while their QP waited for on-demand-paging memory (too many kept, or no
    /// memory to keep them): the peer retransmits them.
    odp_drops,
}

/// Defines [`Counters::fold`] and [`folded_total`] from one list of the device counters that
/// mirror a QP's core counters, each with the core counter it adds up.
macro_rules! mirrored {
    ($($dev:ident: $($f:ident).+),* $(,)?) => {
        /// The sum of the core counters [`Counters::fold`] adds to the device's. Each of them only
        /// grows, so the sum moves exactly when one of them does: a QP compares it alone after
        /// each locked section, and folds (two dozen comparisons) only when it moved.
        pub fn folded_total(c: &QpCountersView<'_>) -> u64 {
            0u64$(.wrapping_add(c.$($f).+))*
        }

        impl Counters {
            /// Adds what a QP's core counters advanced since `last`, and updates `last`.
            pub fn fold(&self, now: &QpCounters, last: &mut QpCounters) {
                let add = |c: &AtomicU64, n: u64, l: u64| {
                    let d = n.wrapping_sub(l);
                    if d != 0 {
                        c.fetch_add(d, Ordering::Relaxed);
                    }
                };
                $(add(&self.$dev, now.$($f).+, last.$($f).+);)*
                *last = *now;
            }
        }
    };
}

mirrored! {
    duplicate_request: rq.duplicates,
    out_of_seq_request: rq.sequence_errors,
    rcvd_rnr_err: sq.rnr_naks_received,
    send_rnr_err: rq.rnr_naks_sent,
    rcvd_seq_err: sq.seq_naks_received,
    seq_naks_sent: rq.seq_naks_sent,
    completer_retry_err: sq.retries,
    retransmitted_pkts: sq.retransmitted,
    transport_timeouts: sq.timeouts,
    credit_stalls: sq.credit_stalls,
    credit_probes: sq.credit_probes,
    credit_acks_sent: rq.unsolicited_acks,
    credit_acks_rcvd: sq.credit_acks_received,
    duplicate_responses: sq.duplicate_responses,
    remote_invalidations: rq.remote_invalidations,
    path_migrations: migrations,
    path_mig_errors: mig_errors,
    apm_auto_rearms: auto_rearms,
    apm_port_failovers: port_failovers,
    qp_dropped: dropped,
    pkey_violations: pkey_violations,
    qkey_violations: qkey_violations,
}

impl Counters {
    /// Adds one to `c`.
    pub fn inc(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// Adds `n` to `c`.
    pub fn add(c: &AtomicU64, n: usize) {
        c.fetch_add(n as u64, Ordering::Relaxed);
    }
}

impl StatsVerbs for RvrDevice {
    fn stat_descs() -> &'static [StatDesc] {
        DESCS
    }

    fn read_stats(dev: &Device<Self>, _port: u32, values: &mut [u64]) {
        // The counters are per device: every port shows the same values.
        dev.data().shared.counters.values(values);
    }

    fn pma_counters(dev: &Device<Self>, port: u32) -> Option<PmaCounters> {
        if port == 0 || port > dev.data().nports() {
            return None;
        }
        // Per device too, as `read_stats`; bytes are whole IP packets both ways, as rdma_rxe's.
        let c = &dev.data().shared.counters;
        Some(PmaCounters {
            xmit_bytes: c.sent_bytes.load(Ordering::Relaxed),
            rcv_bytes: c.rcvd_bytes.load(Ordering::Relaxed),
            xmit_packets: c.sent_pkts.load(Ordering::Relaxed),
            rcv_packets: c.rcvd_pkts.load(Ordering::Relaxed),
        })
    }
}
