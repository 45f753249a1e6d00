//! One queue pair: the state machine ([`crate::qp_state`]), APM ([`crate::apm`]), the SQ Logic
//! ([`crate::requester`] + [`crate::completer`]) and the RQ Logic ([`crate::responder`]) tied
//! together behind the verbs-shaped entry points `modify`, `query`, `post_send`, `post_recv`,
//! `receive`, `timer_expired` and `progress`.
//!
//! Sans-IO: nothing here blocks, allocates or reads a clock. Everything the QP wants done goes
//! through [`Outputs`]; memory is reached only through [`Memory`].
//!
//! Driving a QP: call [`Qp::progress`] after every `post_send`, `receive`, `timer_expired` and
//! `modify` (it sends queued RDMA Read responses and ACKs first, then requests), again while
//! it returns a full budget and [`Qp::transmit_pending`] says more may go. ACKs and NAKs are
//! emitted directly from `receive` unless they must wait behind read responses.
//!
//! RC is implemented in full; UC reuses the same logic without ACKs, credits or retries (a lost
//! packet drops the message); UD sends single-packet datagrams with a DETH and checks the Q_Key.
//! Other QP types are refused at creation ([`Qp::new`] returns `None`).

use crate::apm::{
    Apm, ApmError, ApmModify, MigState, Migration, PathInfo, PathMatch, RetryExhausted, RxVerdict,
};
use crate::events::{AsyncEvent, CqKind, Outputs, Timer};
use crate::memory::{Memory, RxPayload};
use crate::qp_state::{
    AttrMask, ModifyError, ModifyParams, PostVerdict, QpState, QpStateMachine, QpType, Transition,
};
use crate::requester::{PostError, SqCounters, SqLogic, SqOutcome, TxCtx};
use crate::responder::{RqCounters, RqLogic, RqOutcome, RxCtx};
use crate::sg_pool::SgStore;
use crate::wire::{
    bth::{pkey_matches, RawBth},
    Headers, Transport,
};
use crate::wqe::{RecvSlot, RecvWr, SendSlot, SendWr, UdDest};

/// Creation parameters of a QP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpCreate {
    /// QP type: RC, UC, UD or GSI (QP1: UD with the wire QPN 1).
    pub qp_type: QpType,
    /// Our QP number (24 bits).
    pub qpn: u32,
    /// Receive WQEs come from an SRQ (ACKs then carry credit code 0x1F and entering Error
    /// raises `QP_LAST_WQE_REACHED`). The SRQ itself is the shell's: it posts to this QP's RQ
    /// the WQEs it hands over, and those still held when the QP enters Error are flushed.
    pub srq: bool,
}

/// A QP's creation parameters with its queue storage (see [`Qp::new`]), checked.
#[derive(Debug)]
pub struct QpParts<S, R, G, D> {
    create: QpCreate,
    sq: (S, G, D),
    rq: (R, G),
}

impl<S, R, G, D> QpParts<S, R, G, D>
where
    S: core::ops::Deref<Target = [SendSlot]>,
    D: core::ops::Deref<Target = [UdDest]>,
{
    /// Checks the parameters against the storage; `None` where [`Qp::new`] fails.
    pub fn new(create: QpCreate, sq: (S, G, D), rq: (R, G)) -> Option<Self> {
        let known = matches!(
            create.qp_type,
            QpType::Rc | QpType::Uc | QpType::Ud | QpType::Gsi
        );
        let dests = !create.qp_type.is_datagram() || sq.2.len() >= sq.0.len();
        (known && dests).then_some(QpParts { create, sq, rq })
    }
}

/// Modify/Query QP attributes (the fields of `struct ib_qp_attr` the core uses). Each field is
/// read by `modify` only when its [`AttrMask`] bit is set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpAttrs {
    /// `qp_state` (IB_QP_STATE).
    pub qp_state: QpState,
    /// `cur_qp_state` (IB_QP_CUR_STATE).
    pub cur_qp_state: QpState,
    /// `en_sqd_async_notify` (IB_QP_EN_SQD_ASYNC_NOTIFY).
    pub en_sqd_async_notify: bool,
    /// `qp_access_flags` (IB_QP_ACCESS_FLAGS).
    pub qp_access_flags: u32,
    /// The P_Key value for `pkey_index`, resolved by the shell (IB_QP_PKEY_INDEX).
    pub pkey: u16,
    /// `qkey` (IB_QP_QKEY; UD only).
    pub qkey: u32,
    /// Primary path (IB_QP_AV).
    pub path: PathInfo,
    /// `path_mtu` as `enum ib_mtu` (1 = 256 .. 5 = 4096) (IB_QP_PATH_MTU).
    pub path_mtu: u8,
    /// Local ACK timeout exponent (IB_QP_TIMEOUT).
    pub timeout: u8,
    /// Retry count 0..=7 (IB_QP_RETRY_CNT).
    pub retry_cnt: u8,
    /// RNR retry count 0..=7, 7 = infinite (IB_QP_RNR_RETRY).
    pub rnr_retry: u8,
    /// Responder's starting ePSN (IB_QP_RQ_PSN).
    pub rq_psn: u32,
    /// Requester's starting PSN (IB_QP_SQ_PSN).
    pub sq_psn: u32,
    /// Outstanding RDMA Reads/atomics as initiator (IB_QP_MAX_QP_RD_ATOMIC).
    pub max_rd_atomic: u8,
    /// Responder resources (IB_QP_MAX_DEST_RD_ATOMIC), 1..=16.
    pub max_dest_rd_atomic: u8,
    /// Alternate path (IB_QP_ALT_PATH).
    pub alt_path: PathInfo,
    /// Minimum RNR NAK timer code (IB_QP_MIN_RNR_TIMER).
    pub min_rnr_timer: u8,
    /// APM state (IB_QP_PATH_MIG_STATE).
    pub path_mig_state: MigState,
    /// Destination QP number (IB_QP_DEST_QPN).
    pub dest_qp_num: u32,
}

impl Default for QpAttrs {
    fn default() -> QpAttrs {
        QpAttrs {
            qp_state: QpState::Reset,
            cur_qp_state: QpState::Reset,
            en_sqd_async_notify: false,
            qp_access_flags: 0,
            pkey: 0xFFFF,
            qkey: 0,
            path: PathInfo::EMPTY,
            path_mtu: 3,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            rq_psn: 0,
            sq_psn: 0,
            max_rd_atomic: 1,
            max_dest_rd_atomic: 1,
            alt_path: PathInfo::EMPTY,
            min_rnr_timer: 1,
            path_mig_state: MigState::Migrated,
            dest_qp_num: 0,
        }
    }
}

/// Why Modify QP failed (the shell returns `-EINVAL`). Nothing changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QpModifyError {
    /// The state machine refused the transition or the attribute set.
    State(ModifyError),
    /// APM refused the path migration attributes.
    Apm(ApmError),
    /// An attribute value is out of range (MTU, retry counts, timeouts, responder resources).
    BadValue(AttrMask),
}

/// Both halves' counters. `S` and `R` hold the SQ and RQ Logics' counters: copies of them, as
/// [`Qp::counters`] returns; references, as [`Qp::counters_view`] lends them; nothing, for the
/// counters the QP keeps itself.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpCounters<S = SqCounters, R = RqCounters> {
    /// SQ Logic counters.
    pub sq: S,
    /// RQ Logic counters.
    pub rq: R,
    /// Inbound packets dropped before the transport (state, header or path checks; P_Key
    /// mismatches are counted in `pkey_violations` only).
    pub dropped: u64,
    /// Inbound packets dropped because their BTH:P_Key does not match the QP's P_Key.
    pub pkey_violations: u64,
    /// Datagrams dropped because their DETH:Q_Key is not the QP's Q_Key (PortInfo's
    /// Q_KeyViolations).
    pub qkey_violations: u64,
    /// Path migrations.
    pub migrations: u64,
    /// Migration requests dropped because they did not match the alternate path.
    pub mig_errors: u64,
    /// Alternate paths the bonding policy loaded, each followed by Rearm.
    pub auto_rearms: u64,
    /// Migrations the bonding policy made because the primary path's port went down.
    pub port_failovers: u64,
}

/// [`QpCounters`] with the SQ and RQ Logics' counters borrowed where they are kept: a caller
/// that sums some of them after every call reads only those.
pub type QpCountersView<'a> = QpCounters<&'a SqCounters, &'a RqCounters>;

impl<S, R> QpCounters<S, R> {
    /// The same counters with `sq` and `rq` as the SQ and RQ Logics'.
    pub fn with_logics<S2, R2>(&self, sq: S2, rq: R2) -> QpCounters<S2, R2> {
        QpCounters {
            sq,
            rq,
            dropped: self.dropped,
            pkey_violations: self.pkey_violations,
            qkey_violations: self.qkey_violations,
            migrations: self.migrations,
            mig_errors: self.mig_errors,
            auto_rearms: self.auto_rearms,
            port_failovers: self.port_failovers,
        }
    }
}

/// Default number of packets `progress` sends per call when the caller has no budget in mind.
pub const DEFAULT_BUDGET: usize = 64;

/// One RC queue pair over caller-provided SQ and RQ storage.
#[derive(Debug)]
pub struct Qp<S, R, G, D> {
    create: QpCreate,
    sm: QpStateMachine,
    apm: Apm,
    sq: SqLogic<S, G, D>,
    rq: RqLogic<R, G>,
    attrs: QpAttrs,
    /// The counters the QP keeps itself (the logics keep theirs).
    own: QpCounters<(), ()>,
    /// PATH_MIG_ERR was raised since the QP last armed or migrated (reported once, see
    /// `receive`).
    mig_err_reported: bool,
    /// The bonding policy: which of the device's two ports are up (`None`: the policy is off).
    bonding: Option<[bool; 2]>,
}

/// Whether port `port` (1-based) is up in `up`.
fn up_port(up: &[bool; 2], port: u8) -> bool {
    match port {
        1 => up[0],
        2 => up[1],
        _ => false,
    }
}

fn mtu_bytes(v: u8) -> Option<u32> {
    match v {
        1..=5 => Some(128u32 << v),
        _ => None,
    }
}

impl<S, R, G, D> Qp<S, R, G, D>
where
    S: core::ops::DerefMut<Target = [SendSlot]>,
    R: core::ops::DerefMut<Target = [RecvSlot]>,
    G: SgStore,
    D: core::ops::DerefMut<Target = [UdDest]>,
{
    /// Creates a QP in Reset. `sq` and `rq` are the queue storage: the slots (their number is
    /// the queue's depth) and the scatter/gather elements, as many for each slot as a WR may
    /// carry (a WR with more is refused); the send queue's also a datagram destination for each
    /// slot, which only a datagram QP needs (a connected one may give none). `None` for an
    /// unknown QP type, or a datagram QP without a destination for each send slot.
    pub fn new(create: QpCreate, sq: (S, G, D), rq: (R, G)) -> Option<Qp<S, R, G, D>> {
        QpParts::new(create, sq, rq).map(Qp::from_parts)
    }

    /// Creates a QP in Reset from parts already checked: it cannot fail, so a caller can check
    /// before it allocates and build the QP in place afterwards.
    pub fn from_parts(parts: QpParts<S, R, G, D>) -> Qp<S, R, G, D> {
        let QpParts { create, sq, rq } = parts;
        let sql = SqLogic::new(sq.0, sq.1, sq.2);
        let mut rql = RqLogic::new(rq.0, rq.1);
        rql.config_mut().srq = create.srq;
        rql.config_mut().uc = create.qp_type == QpType::Uc;
        rql.config_mut().ud = create.qp_type.is_datagram();
        Qp {
            create,
            sm: QpStateMachine::new(create.qp_type),
            apm: Apm::new(),
            sq: sql,
            rq: rql,
            attrs: QpAttrs::default(),
            own: QpCounters::default(),
            mig_err_reported: false,
            bonding: None,
        }
    }

    /// The current state.
    pub fn state(&self) -> QpState {
        self.sm.state()
    }

    /// The APM state.
    pub fn mig_state(&self) -> MigState {
        self.apm.state()
    }

    /// The current primary path.
    pub fn primary_path(&self) -> &PathInfo {
        self.apm.primary()
    }

    /// The alternate path, if one is loaded.
    pub fn alt_path(&self) -> Option<&PathInfo> {
        self.apm.alternate()
    }

    /// Counters.
    pub fn counters(&self) -> QpCounters {
        self.own
            .with_logics(*self.sq.counters(), *self.rq.counters())
    }

    /// The counters without a copy of the logics' (see [`QpCountersView`]).
    pub fn counters_view(&self) -> QpCountersView<'_> {
        self.own.with_logics(self.sq.counters(), self.rq.counters())
    }

    /// The SQ Logic (read-only view, for tests and the shell's debugfs).
    pub fn sq_logic(&self) -> &SqLogic<S, G, D> {
        &self.sq
    }

    /// The RQ Logic (read-only view).
    pub fn rq_logic(&self) -> &RqLogic<R, G> {
        &self.rq
    }

    /// Whether the inbound request `h` needs a receive WQE this QP does not hold: the shell of a
    /// QP fed from an SRQ then hands one over before [`Qp::receive`]. False for a packet the QP
    /// would drop (wrong QP, P_Key or state) or that starts no message (an RC duplicate or
    /// out-of-sequence packet), so the SRQ's WQEs go only to messages that use them.
    pub fn wants_srq_wqe(&self, h: &Headers) -> bool {
        self.create.srq
            && self.sm.rq_processes_inbound()
            && self.addressed_here(h.bth.dest_qp)
            && pkey_matches(h.bth.pkey, self.attrs.pkey)
            && self.rq.wants_wqe(h)
    }

    /// Sets the MTU in bytes for QP types whose Modify QP carries no path MTU (UD: the port's
    /// active MTU). Values outside 256..=4096 are clamped.
    pub fn set_port_mtu(&mut self, bytes: u32) {
        let m = bytes.clamp(256, 4096);
        self.sq.config_mut().mtu = m;
        self.rq.config_mut().mtu = m;
    }

    /// Query QP: the attributes as they are now.
    pub fn query(&self) -> QpAttrs {
        let mut a = self.attrs;
        a.qp_state = self.sm.state();
        a.cur_qp_state = self.sm.state();
        a.path = *self.apm.primary();
        a.alt_path = self.apm.alternate().copied().unwrap_or(PathInfo::EMPTY);
        a.path_mig_state = self.apm.state();
        a.sq_psn = self.sq.sq_psn();
        a.rq_psn = self.rq.epsn();
        a.en_sqd_async_notify = self.sm.en_sqd_async_notify();
        a
    }

    /// Whether a packet for `dest_qp` is this QP's: its own number, or a multicast it takes
    /// (only UD QPs other than QP1 may be attached to multicast groups, IBA 10.8.3.2; the shell
    /// hands a multicast packet only to the QPs attached to its group).
    fn addressed_here(&self, dest_qp: u32) -> bool {
        dest_qp == self.create.qpn
            || (dest_qp == crate::wire::bth::MULTICAST_QPN && self.create.qp_type == QpType::Ud)
    }

    fn transport(&self) -> Transport {
        match self.create.qp_type {
            QpType::Uc => Transport::Uc,
            QpType::Ud | QpType::Gsi => Transport::Ud,
            _ => Transport::Rc,
        }
    }

    /// What the RQ Logic sends responses with: `path` (a copy of the primary path), BTH:MigReq,
    /// the destination QP, P_Key and QPN, and the GIDs of the packet being processed.
    fn rx_ctx<'a>(&self, path: &'a PathInfo, arrived_on: &PathMatch) -> RxCtx<'a> {
        RxCtx {
            path,
            mig_req: self.apm.mig_req_bit(),
            dest_qp: self.attrs.dest_qp_num,
            pkey: self.attrs.pkey,
            qpn: self.create.qpn,
            src_gid: arrived_on.sgid,
            dst_gid: arrived_on.dgid,
            net: arrived_on.net,
        }
    }

    /// What the SQ Logic sends requests with: `path` (a copy of the primary path), BTH:MigReq,
    /// the destination QP, P_Key, QPN, transport and Q_Key.
    fn tx_ctx<'a>(&self, path: &'a PathInfo) -> TxCtx<'a> {
        TxCtx {
            path,
            mig_req: self.apm.mig_req_bit(),
            dest_qp: self.attrs.dest_qp_num,
            pkey: self.attrs.pkey,
            qpn: self.create.qpn,
            transport: self.transport(),
            qkey: self.attrs.qkey,
        }
    }

    /// The Modify QP verb.
    pub fn modify<O: Outputs>(
        &mut self,
        now: u64,
        attrs: &QpAttrs,
        mask: AttrMask,
        out: &mut O,
    ) -> Result<(), QpModifyError> {
        let next = if mask.contains(AttrMask::STATE) {
            attrs.qp_state
        } else {
            self.sm.state()
        };
        let params = ModifyParams {
            cur_qp_state: attrs.cur_qp_state,
            en_sqd_async_notify: attrs.en_sqd_async_notify,
        };
        let t = self
            .sm
            .plan(next, mask, &params)
            .map_err(QpModifyError::State)?;
        let alt = mask.contains(AttrMask::ALT_PATH).then_some(&attrs.alt_path);
        let mig = mask
            .contains(AttrMask::PATH_MIG_STATE)
            .then_some(attrs.path_mig_state);
        self.apm
            .check_modify(next, alt, mig)
            .map_err(QpModifyError::Apm)?;
        // An attribute given in `mask` with an out-of-range value fails with its mask bit.
        let bad = |m: AttrMask, b: bool| {
            if mask.contains(m) && b {
                Err(QpModifyError::BadValue(m))
            } else {
                Ok(())
            }
        };
        bad(AttrMask::PATH_MTU, mtu_bytes(attrs.path_mtu).is_none())?;
        bad(AttrMask::RETRY_CNT, attrs.retry_cnt > 7)?;
        bad(AttrMask::RNR_RETRY, attrs.rnr_retry > 7)?;
        bad(AttrMask::TIMEOUT, attrs.timeout > 31)?;
        bad(AttrMask::MIN_RNR_TIMER, attrs.min_rnr_timer > 31)?;
        bad(
            AttrMask::MAX_DEST_RD_ATOMIC,
            attrs.max_dest_rd_atomic > crate::responder::MAX_RESOURCES as u8,
        )?;
        bad(
            AttrMask::MAX_QP_RD_ATOMIC,
            attrs.max_rd_atomic > crate::requester::MAX_RD_ATOMIC,
        )?;
        // Everything is valid: commit.
        self.sm.commit(&t, mask, &params);
        if t.reset_queues {
            self.sq.reset();
            self.rq.reset();
            self.apm.reset();
            let srq = self.create.srq;
            self.rq.config_mut().srq = srq;
            self.rq.config_mut().uc = self.create.qp_type == QpType::Uc;
            self.rq.config_mut().ud = self.create.qp_type.is_datagram();
        }
        self.apply_attrs(attrs, mask);
        if alt.is_some() || mig.is_some() {
            self.mig_err_reported = false;
        }
        match self.apm.modify(next, alt, mig) {
            Ok(ApmModify::Migrated(m)) => self.on_migration(&m, out),
            Ok(_) => {}
            Err(e) => return Err(QpModifyError::Apm(e)),
        }
        self.apply_transition(now, &t, out);
        self.bond_step(out);
        Ok(())
    }

    /// The bonding policy (seed 002): `ports_up` says which of the device's two ports are up,
    /// `None` turns the policy off. Called when the policy changes and on every port event.
    /// While on, a connected QP in RTS
    /// - whose primary path's port is down migrates at once if Armed ([`Apm::on_port_down`]),
    ///   and an RC QP tells the peer with an ACK over the new path (MigReq=1), so that the
    ///   peer migrates on that packet instead of at its retry exhaustion;
    /// - that is Migrated with no alternate path gets one on the other port, if that port is
    ///   up: the primary path's GIDs, leaving through the other port (the peer derives the
    ///   same, so its migration check matches), and re-arms ([`Apm::auto_rearm`], which waits
    ///   until the peer is known to follow the current primary).
    ///
    /// Everything stays within the migration state machine: the policy only takes the steps
    /// software may take (load an alternate path, Rearm, migrate by command).
    pub fn set_bonding<O: Outputs>(&mut self, ports_up: Option<[bool; 2]>, out: &mut O) {
        self.bonding = ports_up;
        self.bond_step(out);
    }

    /// What [`Qp::set_bonding`] describes, for the current port states.
    fn bond_step<O: Outputs>(&mut self, out: &mut O) {
        let Some(up) = self.bonding else {
            return;
        };
        if self.create.qp_type.is_datagram() || self.sm.state() != QpState::Rts {
            return;
        }
        let primary = *self.apm.primary();
        let (here, other) = match primary.port_num {
            1 => (0, 1),
            2 => (1, 0),
            _ => return,
        };
        if !up[here]
            && self
                .apm
                .alternate()
                .is_some_and(|a| up_port(&up, a.port_num))
        {
            if let Some(m) = self.apm.on_port_down() {
                self.own.port_failovers = self.own.port_failovers.wrapping_add(1);
                self.on_migration(&m, out);
                self.announce(out);
            }
            return;
        }
        if up[other] && self.apm.state() == MigState::Migrated {
            let alt = PathInfo {
                port_num: other as u8 + 1,
                ..primary
            };
            if self.apm.auto_rearm(&alt) {
                self.own.auto_rearms = self.own.auto_rearms.wrapping_add(1);
                self.mig_err_reported = false;
                // The peer arms on our MigReq=0: an idle connection must not wait for traffic,
                // or a port failure before the first message would find it unarmed.
                self.announce(out);
            }
        }
    }

    /// The bonding policy's word to the peer: an ACK over the primary path carrying this end's
    /// MigReq bit, so that the peer migrates or arms at once rather than on the next message.
    /// It ends: an end announces on re-arming and on arming, and arming happens once per
    /// re-arm.
    fn announce<O: Outputs>(&mut self, out: &mut O) {
        if self.create.qp_type == QpType::Rc && self.sm.rq_processes_inbound() {
            let path = *self.apm.primary();
            let ctx = self.rx_ctx(&path, &PathMatch::default());
            self.rq.announce(&ctx, out);
        }
    }

    fn apply_attrs(&mut self, a: &QpAttrs, mask: AttrMask) {
        if mask.contains(AttrMask::ACCESS_FLAGS) {
            self.attrs.qp_access_flags = a.qp_access_flags;
            self.rq.config_mut().access_flags = a.qp_access_flags;
        }
        if mask.contains(AttrMask::PKEY_INDEX) {
            self.attrs.pkey = a.pkey;
        }
        if mask.contains(AttrMask::QKEY) {
            self.attrs.qkey = a.qkey;
            self.rq.config_mut().qkey = a.qkey;
        }
        if mask.contains(AttrMask::AV) {
            self.apm.set_primary(a.path);
        }
        if mask.contains(AttrMask::PATH_MTU) {
            if let Some(m) = mtu_bytes(a.path_mtu) {
                self.attrs.path_mtu = a.path_mtu;
                self.sq.config_mut().mtu = m;
                self.rq.config_mut().mtu = m;
            }
        }
        if mask.contains(AttrMask::TIMEOUT) {
            self.attrs.timeout = a.timeout;
            self.sq.config_mut().timeout = a.timeout;
            self.apm.primary_mut().timeout = a.timeout;
        }
        if mask.contains(AttrMask::RETRY_CNT) {
            self.attrs.retry_cnt = a.retry_cnt;
            self.sq.config_mut().retry_cnt = a.retry_cnt;
            self.sq.reload_retries();
        }
        if mask.contains(AttrMask::RNR_RETRY) {
            self.attrs.rnr_retry = a.rnr_retry;
            self.sq.config_mut().rnr_retry = a.rnr_retry;
            self.sq.reload_retries();
        }
        if mask.contains(AttrMask::RQ_PSN) {
            self.rq.set_epsn(a.rq_psn);
        }
        if mask.contains(AttrMask::SQ_PSN) {
            self.sq.set_sq_psn(a.sq_psn);
        }
        if mask.contains(AttrMask::MAX_QP_RD_ATOMIC) {
            self.attrs.max_rd_atomic = a.max_rd_atomic;
            self.sq.config_mut().max_rd_atomic = a.max_rd_atomic;
        }
        if mask.contains(AttrMask::MAX_DEST_RD_ATOMIC) {
            self.attrs.max_dest_rd_atomic = a.max_dest_rd_atomic;
            self.rq.config_mut().max_dest_rd_atomic = a.max_dest_rd_atomic;
        }
        if mask.contains(AttrMask::MIN_RNR_TIMER) {
            self.attrs.min_rnr_timer = a.min_rnr_timer;
            self.rq.config_mut().min_rnr_timer = a.min_rnr_timer;
        }
        if mask.contains(AttrMask::DEST_QPN) {
            self.attrs.dest_qp_num = a.dest_qp_num & crate::psn::PSN_MASK;
        }
    }

    fn apply_transition<O: Outputs>(&mut self, now: u64, t: &Transition, out: &mut O) {
        if t.stop_timers {
            self.sq.stop_timers(out);
        }
        if t.flush_sq {
            self.flush_sq(out);
        }
        if t.flush_rq {
            self.flush_rq(out);
        }
        if t.last_wqe_reached && self.create.srq {
            out.async_event(AsyncEvent::QpLastWqeReached, None);
        }
        if t.changes_state() && t.to == QpState::Rtr && self.create.qp_type == QpType::Rc {
            let path = *self.apm.primary();
            let ctx = self.rx_ctx(&path, &PathMatch::default());
            self.rq.initial_ack(&ctx, out);
        }
        if t.start_drain {
            self.check_drained(out);
        }
        let _ = now;
    }

    fn on_migration<O: Outputs>(&mut self, m: &Migration, out: &mut O) {
        self.own.migrations = self.own.migrations.wrapping_add(1);
        self.mig_err_reported = false;
        self.sq.config_mut().timeout = self.apm.primary().timeout;
        out.async_event(AsyncEvent::PathMig, None);
        // Every migration, whatever its `cause`, reloads the retry count and retransmits what is
        // outstanding over the new path at once (see `Migration`).
        let _ = m.cause;
        self.sq.retry_after_migration();
    }

    /// The QP moves itself to Error: timers stop, both queues flush (in order).
    fn enter_error<O: Outputs>(&mut self, now: u64, out: &mut O) {
        let t = self.sm.enter_error();
        self.apply_transition(now, &t, out);
    }

    /// Table 17-7 class G: the QP goes to Error, no WQE is retired and no CQE written; the CQ
    /// error and the affiliated QP fatal event are raised.
    fn cq_overflow<O: Outputs>(&mut self, cq: CqKind, out: &mut O) {
        if self.sq.frozen && self.rq.frozen {
            return; // already reported
        }
        self.sq.frozen = true;
        self.rq.frozen = true;
        self.sq.stop_timers(out);
        let _ = self.sm.enter_error();
        out.async_event(AsyncEvent::CqErr, Some(cq));
        out.async_event(AsyncEvent::QpFatal, None);
    }

    /// Completes every send WQE with `IB_WC_WR_FLUSH_ERR`; a send CQ overflow is class G.
    fn flush_sq<O: Outputs>(&mut self, out: &mut O) {
        if self.sq.flush(self.create.qpn, out) == SqOutcome::CqOverflow {
            self.cq_overflow(CqKind::Send, out);
        }
    }

    /// Completes every receive WQE with `IB_WC_WR_FLUSH_ERR`; a receive CQ overflow is class G.
    fn flush_rq<O: Outputs>(&mut self, out: &mut O) {
        if self.rq.flush(self.create.qpn, out) == RqOutcome::CqOverflow {
            self.cq_overflow(CqKind::Recv, out);
        }
    }

    fn handle_sq<O: Outputs>(&mut self, now: u64, o: SqOutcome, out: &mut O) {
        match o {
            SqOutcome::Ok => {}
            SqOutcome::Error => {
                // A send WQE failed: RC goes to Error, UC/UD to SQE (the RQ keeps working).
                let t = self.sm.on_send_error();
                self.apply_transition(now, &t, out);
            }
            SqOutcome::CqOverflow => self.cq_overflow(CqKind::Send, out),
            SqOutcome::RetryExhausted => match self.apm.on_retry_exhausted() {
                RetryExhausted::Migrated(m) => self.on_migration(&m, out),
                RetryExhausted::NotArmed => {
                    let qpn = self.create.qpn;
                    let o = self.sq.fail_retry_exceeded(qpn, out);
                    match o {
                        SqOutcome::CqOverflow => self.cq_overflow(CqKind::Send, out),
                        _ => self.enter_error(now, out),
                    }
                }
            },
        }
    }

    fn handle_rq<O: Outputs>(&mut self, now: u64, o: RqOutcome, out: &mut O) {
        match o {
            RqOutcome::Ok => {}
            RqOutcome::Error => self.enter_error(now, out),
            RqOutcome::CqOverflow => self.cq_overflow(CqKind::Recv, out),
        }
    }

    fn check_drained<O: Outputs>(&mut self, out: &mut O) {
        if self.sm.is_draining() && self.sq.idle_in_flight() {
            if let Some(_ev) = self.sm.sq_drained() {
                out.async_event(AsyncEvent::SqDrained, None);
            }
        }
    }

    /// Posts a send WR. Refused at once in Reset, Init and RTR (seed 004); in Error it is
    /// accepted and completed with a flush error. Call [`Qp::progress`] afterwards to transmit.
    pub fn post_send<O: Outputs>(&mut self, wr: &SendWr, out: &mut O) -> Result<(), PostError> {
        if self.create.qp_type == QpType::Uc
            && (wr.opcode.is_read_or_atomic() || wr.opcode == crate::wqe::SendOpcode::SendWithInv)
        {
            return Err(PostError::InvalidWr);
        }
        if self.create.qp_type.is_datagram() {
            // UD: Send (with immediate), plus local operations. A message longer than the MTU
            // is accepted and never sent (C10-93.1.1, see the SQ Logic).
            let ok_op = matches!(
                wr.opcode,
                crate::wqe::SendOpcode::Send | crate::wqe::SendOpcode::SendWithImm
            ) || wr.opcode.is_local();
            if !ok_op {
                return Err(PostError::InvalidWr);
            }
        }
        match self.sm.post_send() {
            PostVerdict::Refused => Err(PostError::InvalidState),
            PostVerdict::Flush => {
                self.sq.post(wr)?;
                self.flush_sq(out);
                Ok(())
            }
            PostVerdict::Process | PostVerdict::Hold => self.sq.post(wr),
        }
    }

    /// Posts a receive WR. Each one is a credit (seed 003); if the peer may be stalled for
    /// credits an unsolicited ACK goes out.
    pub fn post_recv<O: Outputs>(&mut self, wr: &RecvWr, out: &mut O) -> Result<(), PostError> {
        match self.sm.post_recv() {
            PostVerdict::Refused => Err(PostError::InvalidState),
            PostVerdict::Flush => {
                self.rq.post(wr)?;
                self.flush_rq(out);
                Ok(())
            }
            PostVerdict::Hold => self.rq.post(wr),
            PostVerdict::Process => {
                self.rq.post(wr)?;
                if matches!(self.sm.state(), QpState::Rtr | QpState::Rts | QpState::Sqd) {
                    let path = *self.apm.primary();
                    let ctx = self.rx_ctx(&path, &PathMatch::default());
                    self.rq.maybe_unsolicited_ack(&ctx, out);
                }
                Ok(())
            }
        }
    }

    /// One inbound packet (headers decoded by the shell; `payload` without pad and ICRC),
    /// with the addressing it arrived with. Never panics, whatever the packet says.
    pub fn receive<O: Outputs, M: Memory>(
        &mut self,
        now: u64,
        h: &Headers,
        payload: RxPayload<'_>,
        arrived_on: &PathMatch,
        mem: &mut M,
        out: &mut O,
    ) {
        let info = h.info();
        let ok_hdr = h.is_consistent()
            && h.bth.tver == 0
            && self.addressed_here(h.bth.dest_qp)
            && info.transport == self.transport()
            && (info.has_payload || payload.is_empty());
        if !self.admit(
            ok_hdr,
            h.bth.pkey,
            info.is_request,
            h.bth.mig_req,
            arrived_on,
            out,
        ) {
            return;
        }
        let path = *self.apm.primary();
        if info.is_request {
            // The RQ Logic drops such a datagram silently; the port counts it.
            if self.create.qp_type.is_datagram()
                && h.deth.is_some_and(|d| d.qkey != self.attrs.qkey)
            {
                self.own.qkey_violations = self.own.qkey_violations.wrapping_add(1);
            }
            let ctx = self.rx_ctx(&path, arrived_on);
            let o = self.rq.on_request(h, payload, &ctx, mem, out);
            self.handle_rq(now, o, out);
        } else {
            let ctx = self.tx_ctx(&path);
            let o = self.sq.on_response(now, h, payload, &ctx, mem, out);
            self.handle_sq(now, o, out);
            self.check_drained(out);
        }
    }

    /// One inbound packet whose opcode the wire decoder does not know (`Headers::decode`
    /// failed with `UnknownOpcode`), given by its BTH. On an RC QP an opcode of the RC range
    /// is a request with a reserved or unsupported opcode: once the packet passes the header,
    /// state and path checks every request gets, it is answered as seed 001 (Table 17-7)
    /// says, with class C. Any other opcode (another transport, CNP, manufacturer-specific)
    /// fails the header checks and is dropped silently.
    pub fn receive_unsupported<O: Outputs>(
        &mut self,
        now: u64,
        bth: &RawBth,
        arrived_on: &PathMatch,
        out: &mut O,
    ) {
        let ok_hdr = bth.tver == 0
            && bth.dest_qp == self.create.qpn
            && bth.is_rc_range()
            && self.transport() == Transport::Rc;
        if !self.admit(ok_hdr, bth.pkey, true, bth.mig_req, arrived_on, out) {
            return;
        }
        let path = *self.apm.primary();
        let ctx = self.rx_ctx(&path, arrived_on);
        let o = self.rq.on_unsupported_request(bth.psn, &ctx, out);
        self.handle_rq(now, o, out);
    }

    /// The checks before the transport sees an inbound packet: the header checks (`ok_hdr`),
    /// the P_Key (`pkey`, BTH:P_Key, against the QP's), the QP state (seed 004: Reset, Init
    /// and Error drop everything) and the path (APM, seed 000 step 6). Counts a dropped packet
    /// and returns false, or raises COMM_EST for the first packet in RTR and returns true.
    fn admit<O: Outputs>(
        &mut self,
        ok_hdr: bool,
        pkey: u16,
        is_request: bool,
        mig_req: bool,
        arrived_on: &PathMatch,
        out: &mut O,
    ) -> bool {
        let ok_state = if is_request {
            self.sm.rq_processes_inbound()
        } else {
            matches!(self.sm.state(), QpState::Rtr | QpState::Rts | QpState::Sqd)
        };
        if ok_hdr && !pkey_matches(pkey, self.attrs.pkey) {
            // A packet of another partition: dropped without a word (no NAK), nothing else
            // changes.
            self.own.pkey_violations = self.own.pkey_violations.wrapping_add(1);
            return false;
        }
        if !ok_hdr || !ok_state {
            self.own.dropped = self.own.dropped.wrapping_add(1);
            return false;
        }
        let apm_verdict = if self.create.qp_type.is_datagram() {
            RxVerdict::Accept // UD has no connection path and no APM
        } else {
            self.apm.on_packet(mig_req, arrived_on)
        };
        match apm_verdict {
            RxVerdict::Accept => {}
            // The peer may have re-armed after our own announcement: it arms on this one.
            RxVerdict::AcceptArmed if self.bonding.is_some() => self.announce(out),
            RxVerdict::AcceptArmed => {}
            RxVerdict::AcceptMigrated(m) => self.on_migration(&m, out),
            RxVerdict::DropPathMigErr => {
                // Seed 000 step 6 reports every miscompare. We report the first one after each
                // arming or migration and count the rest: a peer retransmitting a bad request
                // (or a hostile one) would otherwise queue one event per packet, without
                // bound, in the owner's event queue.
                self.own.dropped = self.own.dropped.wrapping_add(1);
                self.own.mig_errors = self.own.mig_errors.wrapping_add(1);
                if !self.mig_err_reported {
                    self.mig_err_reported = true;
                    out.async_event(AsyncEvent::PathMigErr, None);
                }
                return false;
            }
            RxVerdict::Drop => {
                self.own.dropped = self.own.dropped.wrapping_add(1);
                return false;
            }
        }
        if self.sm.on_inbound_packet().is_some() {
            out.async_event(AsyncEvent::CommEst, None);
        }
        // The peer's first packet over a new primary may be what a re-arm waits for.
        if self.bonding.is_some()
            && self.apm.state() == MigState::Migrated
            && self.apm.alternate().is_none()
        {
            self.bond_step(out);
        }
        true
    }

    /// A timer set through [`Outputs::set_timer`] fired (stale calls are harmless).
    pub fn timer_expired<O: Outputs>(&mut self, now: u64, which: Timer, out: &mut O) {
        if !self.sm.sq_continues_in_flight() {
            return;
        }
        let o = self.sq.on_timer(now, which, out);
        self.handle_sq(now, o, out);
    }

    /// Whether a [`Qp::progress`] call may have more to send now: responses or ACKs waiting,
    /// or requests that nothing holds ([`SqLogic::may_send`]). `false` means the next call
    /// sends nothing: a pass that used its whole budget needs no second one, and what waits
    /// for an ACK or a timer goes when that comes.
    pub fn transmit_pending(&self) -> bool {
        (self.sm.rq_processes_inbound() && self.rq.has_pending_responses())
            || (self.sm.sq_continues_in_flight() && self.sq.may_send())
    }

    /// Transmits what may go now, at most `budget` packets: responder responses first, then
    /// requests. Returns the number of packets sent.
    pub fn progress<O: Outputs, M: Memory>(
        &mut self,
        now: u64,
        budget: usize,
        mem: &mut M,
        out: &mut O,
    ) -> usize {
        let mut sent = 0;
        // Most calls have no response waiting: no context built for those.
        if self.sm.rq_processes_inbound() && self.rq.has_pending_responses() {
            let ctx = self.rx_ctx(self.apm.primary(), &PathMatch::default());
            sent += self.rq.transmit(budget, &ctx, out);
        }
        if self.sm.sq_continues_in_flight() && sent < budget {
            let ctx = self.tx_ctx(self.apm.primary());
            let start_new = self.sm.sq_starts_new_requests();
            let (n, o) = self
                .sq
                .transmit(now, budget - sent, start_new, &ctx, mem, out);
            sent += n;
            self.handle_sq(now, o, out);
            self.check_drained(out);
        }
        sent
    }
}
