// SPDX-License-Identifier: GPL-2.0

//! A receive path's hold on the QP it found in the device's table. A QP's destroy takes the QP
//! out of the table, then waits for the receive paths that found it before ([`RxHolds::wait`]):
//! after that none acts on the QP, queues one of its packets or its work items. They run in
//! softirq context for microseconds, so the wait is mostly none, where an RCU grace period for
//! each QP cost milliseconds (seconds to destroy a thousand QPs).
//!
//! The count lives in the device, one per QP number, not in the QP: a hold drops its reference
//! to the QP first and its count after, so the QP's last reference never goes in softirq
//! context, and the destroy that waits for the count keeps the QP until then.

use super::qp::QpShared;
use core::ops::Deref;
use core::sync::atomic::{AtomicU32, Ordering};
use kernel::{
    prelude::*,
    sync::Arc,
    time::{delay::fsleep, Delta},
};

/// How long a destroy sleeps between two looks at a count that is not zero yet.
const POLL_US: i64 = 20;

/// The holds on each QP number's QP: one count per number.
pub(crate) struct RxHolds(KVec<AtomicU32>);

impl RxHolds {
    /// `n` counts at zero.
    pub(crate) fn new(n: usize) -> Result<Self> {
        let mut v = KVec::with_capacity(n, GFP_KERNEL)?;
        for _ in 0..n {
            v.push(AtomicU32::new(0), GFP_KERNEL)?;
        }
        Ok(Self(v))
    }

    /// A hold on `qp`, whose count is number `i`. Under the QP table's lock, with `qp` in the
    /// table at `i`: a destroy takes it out under that lock, so it sees this hold.
    pub(crate) fn hold(&self, i: usize, qp: &Arc<QpShared>) -> Option<RxQp<'_>> {
        let count = self.0.get(i)?;
        count.fetch_add(1, Ordering::Relaxed);
        Some(RxQp {
            qp: qp.clone(),
            _hold: Hold(count),
        })
    }

    /// Waits until no hold on number `i` is left. Process context (sleeps), after the QP left
    /// the table at `i` and before the number goes to another QP: no new hold comes.
    pub(crate) fn wait(&self, i: usize) {
        let Some(count) = self.0.get(i) else {
            return;
        };
        // Acquire: pairs with the release in `Hold::drop`; what the receive path did to the QP
        // comes before what the destroy does next.
        while count.load(Ordering::Acquire) != 0 {
            fsleep(Delta::from_micros(POLL_US));
        }
    }
}

/// A count held ([`RxHolds::hold`]).
struct Hold<'a>(&'a AtomicU32);

impl Drop for Hold<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Release);
    }
}

/// A QP as a receive path holds it: its destroy waits until this is dropped.
pub(crate) struct RxQp<'a> {
    // Fields drop in order: the reference before the count.
    qp: Arc<QpShared>,
    _hold: Hold<'a>,
}

impl Deref for RxQp<'_> {
    type Target = Arc<QpShared>;

    fn deref(&self) -> &Arc<QpShared> {
        &self.qp
    }
}
