// SPDX-License-Identifier: GPL-2.0

//! Packet order across CPUs on virtual links. A veth (or `lo`) hands each transmitted packet to
//! the receive backlog of the CPU that transmits it, and each CPU works through its own backlog:
//! two packets of one flow sent from two CPUs can reach the receiver in either order. A sender
//! that wants its packets delivered in order sends each batch from one CPU, and sends from
//! another CPU only once the backlog of the previous one has been worked past the previous
//! batch ([`send_in_order`]); until then it hands the sending to that CPU.
//!
//! The backlog counters exist with `CONFIG_RPS` (on in every SMP distribution kernel); without
//! it every CPU may send, as if the order held.

use crate::bindings as b;
use crate::sync::bh::BhOff;
use core::sync::atomic::{AtomicU64, Ordering};

/// The end of one batch of packets in a CPU's receive backlog.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BacklogMark {
    cpu: u32,
    tail: u32,
}

impl BacklogMark {
    /// Whether the backlog of the mark's CPU has been processed past the mark.
    fn passed(&self) -> bool {
        // SAFETY: `cpu` came from `rvr_this_cpu`, a possible CPU; the helper only reads a
        // per-CPU counter.
        let head = unsafe { b::rvr_backlog_head(self.cpu) };
        head.wrapping_sub(self.tail) as i32 >= 0
    }
}

/// Where a sender's last batch ended (none yet at first), for [`send_in_order`]. Written by
/// one sender at a time (the caller serializes its senders), read by the next.
pub struct LastBatch(AtomicU64);

impl LastBatch {
    /// No CPU has a batch: `u32::MAX` is no CPU number.
    const NONE: u64 = u64::MAX;

    /// No batch sent yet.
    pub const fn new() -> Self {
        Self(AtomicU64::new(Self::NONE))
    }

    /// The mark of the last batch.
    pub fn get(&self) -> Option<BacklogMark> {
        let bits = self.0.load(Ordering::Acquire);
        (bits != Self::NONE).then_some(BacklogMark {
            cpu: (bits >> 32) as u32,
            tail: bits as u32,
        })
    }

    /// The CPU of the last batch if it is another CPU whose backlog still holds it: what this
    /// CPU sends now would need a hand-off to that CPU ([`send_in_order`]).
    ///
    /// Softirq context (the CPU cannot change under the caller).
    pub fn held_elsewhere(&self) -> Option<u32> {
        let m = self.get()?;
        // SAFETY: in softirq context the task stays on this CPU.
        let cpu = unsafe { b::rvr_this_cpu() };
        (m.cpu != cpu && !m.passed()).then_some(m.cpu)
    }

    /// Records the mark of the last batch.
    pub fn set(&self, m: Option<BacklogMark>) {
        let bits = m.map_or(Self::NONE, |m| (u64::from(m.cpu) << 32) | u64::from(m.tail));
        self.0.store(bits, Ordering::Release);
    }
}

impl Default for LastBatch {
    fn default() -> Self {
        Self::new()
    }
}

/// Runs `send` (which transmits packets and returns how many) on this CPU, so that all it
/// sends enters one CPU's backlog, unless packets sent before `prev` could still be overtaken
/// from here: then `send` does not run and the result is `Err(cpu)`, the CPU to send from
/// instead. On success, the mark after what `send` sent (`prev` if it sent nothing). What it
/// sent waits in this CPU's backlog at least until bottom halves come back on.
pub fn send_in_order(
    _bh: &BhOff,
    prev: Option<BacklogMark>,
    send: impl FnOnce() -> usize,
) -> Result<Option<BacklogMark>, u32> {
    // SAFETY: with bottom halves disabled (`_bh`) the task stays on this CPU.
    let cpu = unsafe { b::rvr_this_cpu() };
    match prev {
        Some(p) if p.cpu != cpu && !p.passed() => Err(p.cpu),
        _ => {
            let sent = send();
            if sent == 0 {
                Ok(prev)
            } else {
                // SAFETY: `cpu` is this CPU; the helper only reads a per-CPU counter.
                let tail = unsafe { b::rvr_backlog_tail(cpu) };
                Ok(Some(BacklogMark { cpu, tail }))
            }
        }
    }
}

/// How many packets wait in this CPU's receive backlog behind the one being received: a stream
/// is arriving when there are several. 0 without `CONFIG_RPS`.
///
/// Softirq context (the CPU cannot change under the caller).
pub fn waiting_here() -> u32 {
    // SAFETY: in softirq context the task stays on this CPU.
    let cpu = unsafe { b::rvr_this_cpu() };
    // SAFETY: `cpu` is this CPU; the helpers only read per-CPU counters.
    let (head, tail) = unsafe { (b::rvr_backlog_head(cpu), b::rvr_backlog_tail(cpu)) };
    tail.wrapping_sub(head)
}

/// Another online CPU to hand receive work to (the next one after this CPU), or `None` on a
/// single CPU. It stays online while the caller runs.
///
/// Softirq context (preemption disabled: a CPU cannot finish going offline meanwhile).
pub fn other_cpu() -> Option<u32> {
    // SAFETY: in softirq context the task stays on this CPU; the helper only reads the online
    // mask.
    let cpu = unsafe { b::rvr_next_online_cpu() };
    u32::try_from(cpu).ok()
}
