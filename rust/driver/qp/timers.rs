// SPDX-License-Identifier: GPL-2.0

//! A QP's timers: the protocol core's retransmit and RNR timers and the user-ring poll, kept as
//! a table of deadlines served by one hrtimer armed for the earliest. The hrtimer fires in
//! softirq context and only queues a work item, which runs the expired timers under the QP lock
//! (see [`super::QpShared::drive`]). That item runs at high priority: on a loaded host an
//! ordinary worker can wait seconds for a CPU, and a lost packet's recovery waits with it.

use super::QpShared;
use crate::rvcore::events::Timer;
use kernel::{
    sync::{Arc, ArcBorrow},
    time::{
        hrtimer::{
            ArcHrTimerHandle, HrTimerCallback, HrTimerCallbackContext, HrTimerPointer,
            HrTimerRestart, RelativeSoftMode,
        },
        Delta, Monotonic,
    },
};

/// The timers of a QP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum QpTimer {
    /// The core's transport (Local ACK) timer.
    Retransmit,
    /// The core's RNR NAK wait.
    Rnr,
    /// The poll of the user rings (see [`super::user_rings`]).
    RingPoll,
}

impl QpTimer {
    /// Every timer, in table order.
    const ALL: [QpTimer; 3] = [QpTimer::Retransmit, QpTimer::Rnr, QpTimer::RingPoll];

    fn index(self) -> usize {
        match self {
            QpTimer::Retransmit => 0,
            QpTimer::Rnr => 1,
            QpTimer::RingPoll => 2,
        }
    }
}

impl From<Timer> for QpTimer {
    fn from(t: Timer) -> Self {
        match t {
            Timer::Retransmit => QpTimer::Retransmit,
            Timer::Rnr => QpTimer::Rnr,
        }
    }
}

/// Deadlines (monotonic clock, ns) by [`QpTimer`], and the hrtimer that serves them.
#[derive(Default)]
pub(crate) struct QpTimers {
    deadlines: [Option<u64>; QpTimer::ALL.len()],
    /// When the hrtimer is armed to fire, and its handle (dropping it cancels the timer).
    armed: Option<(u64, ArcHrTimerHandle<QpShared>)>,
}

impl QpTimers {
    /// Sets `t` to fire at `at`.
    pub(crate) fn set(&mut self, t: QpTimer, at: u64) {
        self.deadlines[t.index()] = Some(at);
    }

    /// Stops `t`.
    pub(crate) fn stop(&mut self, t: QpTimer) {
        self.deadlines[t.index()] = None;
    }

    /// Whether `t` is set.
    pub(crate) fn is_set(&self, t: QpTimer) -> bool {
        self.deadlines[t.index()].is_some()
    }

    /// Whether `t` is due at `now`; a due timer is stopped.
    pub(crate) fn expire(&mut self, t: QpTimer, now: u64) -> bool {
        let due = self.deadlines[t.index()].is_some_and(|d| d <= now);
        if due {
            self.stop(t);
        }
        due
    }

    /// Arms the hrtimer of `qp` for the earliest deadline, unless it is armed to fire no later
    /// and not in the past.
    pub(crate) fn rearm(&mut self, qp: &Arc<QpShared>, now: u64) {
        let Some(at) = self.deadlines.iter().flatten().copied().min() else {
            return;
        };
        if matches!(self.armed, Some((t, _)) if t <= at && t > now) {
            return;
        }
        // Dropping the old handle cancels it (its callback never takes the QP lock).
        self.armed = None;
        let delta = i64::try_from(at.saturating_sub(now)).unwrap_or(i64::MAX);
        self.armed = Some((at, qp.clone().start(Delta::from_nanos(delta))));
    }

    /// Stops every timer and hands back the hrtimer handle, for the caller to drop (cancel)
    /// outside the QP lock.
    pub(crate) fn shut_down(&mut self) -> Option<ArcHrTimerHandle<QpShared>> {
        self.deadlines = Default::default();
        self.armed.take().map(|(_, h)| h)
    }
}

kernel::impl_has_hr_timer! {
    impl HasHrTimer<Self> for QpShared {
        mode: RelativeSoftMode<Monotonic>,
        field: self.timer
    }
}

impl HrTimerCallback for QpShared {
    type Pointer<'a> = Arc<QpShared>;

    fn run(this: ArcBorrow<'_, Self>, _ctx: HrTimerCallbackContext<'_, Self>) -> HrTimerRestart {
        // Softirq: only schedule the work item, which does the protocol work.
        Arc::<QpShared>::from(this).schedule_timers();
        HrTimerRestart::NoRestart
    }
}
