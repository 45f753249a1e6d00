//! Automatic Path Migration (IBA 17.2.8; seeds 000 and 002).
//!
//! A connected QP (RC, UC) may hold an alternate path besides its primary one. The migration
//! state ([`MigState`]) says whether the QP may switch to it:
//!
//! ```text
//!            alternate path loaded + PATH_MIG_STATE=Rearm (Modify QP)
//!   Migrated ───────────────────────────────────────────────────────▶ Rearm
//!   (sends MigReq=1)                                                  (sends MigReq=0)
//!       ▲                                                               │
//!       │ received MigReq=1 on the alternate path, or                   │ received a packet
//!       │ Modify QP PATH_MIG_STATE=Migrated, or                         │ with MigReq=0
//!       │ retry count exhausted                                         ▼
//!       └────────────────────────────────────────────────────────────  Armed
//!                                                                     (sends MigReq=0)
//! ```
//!
//! MigReq on transmit (seed 002 diagram, and hfi1's `hfi1_make_ruc_header_9B`, which sets
//! `IB_BTH_MIG_REQ` exactly when `s_mig_state == IB_MIG_MIGRATED`): 1 while Migrated, 0 while
//! Rearm or Armed. A peer that sees MigReq=0 therefore knows the other side has rearmed, which is
//! what lets it go from Rearm to Armed; a MigReq=1 seen while Armed is a migration request.
//!
//! The struct here is pure state: it never transmits, never raises an event itself and never
//! touches the retry counter. Every method returns what the engine must do.
//!
//! Choices where the references differ or say nothing:
//! - RoCE has no LIDs: "SLID/DLID (and SGID/DGID)" of seed 000 step 6 becomes the receive port
//!   plus the two GIDs (IP addresses), as hfi1 compares the GRH GIDs and the port.
//! - A miscompare raises `IB_EVENT_PATH_MIG_ERR` as seed 000 step 6 requires (hfi1 only drops);
//!   the `Qp` reports the first one per arming or migration and counts the rest, so that a peer
//!   cannot queue events without bound.
//! - A migration empties the alternate slot (hfi1 keeps a stale copy): rearming needs a newly
//!   loaded alternate path, and Rearm without an alternate path is refused.
//! - PATH_MIG_STATE=Rearm is accepted whenever the transition table allows the attribute
//!   (RTR -> RTS, RTS -> RTS, SQD -> RTS, SQD -> SQD); rdmavt accepts it only into RTS.
//! - Loading an alternate path while Armed replaces it and stays Armed (as rdmavt).
//! - A packet that matches neither rule (not a valid migration request, not the primary path)
//!   is silently dropped with no event (IBA 9.6.1.5; hfi1 does the same).
//! - The P_Key check stays with the engine: after [`Apm::on_packet`], check the BTH P_Key
//!   against `primary().pkey_index` (which is the old alternate's after a migration).

use crate::qp_state::QpState;

/// The APM state; the values are the kernel's `enum ib_mig_state`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum MigState {
    /// `IB_MIG_MIGRATED`: the initial state; no migration possible, packets carry MigReq=1.
    Migrated = 0,
    /// `IB_MIG_REARM`: an alternate path is loaded; waiting for the peer (a packet with
    /// MigReq=0) before arming. Packets carry MigReq=0.
    Rearm = 1,
    /// `IB_MIG_ARMED`: both sides have the alternate path; a migration may happen. Packets carry
    /// MigReq=0.
    Armed = 2,
}

impl MigState {
    /// The state with the kernel number `raw`, or `None`.
    pub const fn from_raw(raw: u32) -> Option<MigState> {
        match raw {
            0 => Some(MigState::Migrated),
            1 => Some(MigState::Rearm),
            2 => Some(MigState::Armed),
            _ => None,
        }
    }

    /// The kernel number (`enum ib_mig_state`).
    pub const fn as_raw(self) -> u32 {
        self as u32
    }
}

/// One path of a connected QP as RoCEv2 sees it (IBA 11.2.5 "address vector" + the per-path
/// values of Table 12-3). The destination MAC is not here: the kernel shell resolves it from
/// `dgid` and `port_num` (neighbour lookup) whenever the path changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct PathInfo {
    /// The local port (1-based, as in `ib_qp_attr::port_num` / `alt_port_num`).
    pub port_num: u8,
    /// Index of the source GID in the port's GID table.
    pub sgid_index: u8,
    /// The source GID (our IP address as an IPv6 or IPv4-mapped GID), resolved from
    /// `sgid_index` by the shell. Packets sent on this path carry it as source address.
    pub sgid: [u8; 16],
    /// The destination GID (the peer's IP address). Packets sent on this path carry it as
    /// destination address.
    pub dgid: [u8; 16],
    /// P_Key index (`pkey_index` / `alt_pkey_index`).
    pub pkey_index: u16,
    /// Local ACK timeout exponent: 4.096 us * 2^timeout, 0 = infinite (`timeout` /
    /// `alt_timeout`).
    pub timeout: u8,
    /// IP TTL / hop limit (GRH hop limit).
    pub hop_limit: u8,
    /// IP traffic class / DSCP+ECN (GRH traffic class).
    pub traffic_class: u8,
    /// IPv6 flow label, 20 bits (GRH flow label); RoCEv2 also hashes it into the UDP source port.
    pub flow_label: u32,
    /// Service level (mapped to a VLAN priority on Ethernet).
    pub sl: u8,
    /// Static rate (`enum ib_rate`; 0 = port current rate).
    pub static_rate: u8,
}

impl PathInfo {
    /// An all-zero path (port 0 is no port): the value before Modify QP loads anything.
    pub const EMPTY: PathInfo = PathInfo {
        port_num: 0,
        sgid_index: 0,
        sgid: [0; 16],
        dgid: [0; 16],
        pkey_index: 0,
        timeout: 0,
        hop_limit: 0,
        traffic_class: 0,
        flow_label: 0,
        sl: 0,
        static_rate: 0,
    };

    /// Whether a packet with this addressing arrived over this path, seen from the receiver:
    /// the packet's source GID is the path's DGID, its destination GID the path's SGID, and it
    /// came in on the path's port.
    pub fn matches(&self, pkt: &PathMatch) -> bool {
        pkt.port_num == self.port_num && pkt.sgid == self.dgid && pkt.dgid == self.sgid
    }
}

/// The addressing of a received packet, as the receiver sees it (seed 000 step 6 compares it
/// with the path; SLID/DLID do not exist on RoCE, the GIDs are the IP addresses).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct PathMatch {
    /// The local port the packet arrived on.
    pub port_num: u8,
    /// The packet's source GID (IP source address, IPv4 as an IPv4-mapped GID).
    pub sgid: [u8; 16],
    /// The packet's destination GID (IP destination address).
    pub dgid: [u8; 16],
    /// The packet's network header, for the GRH area of a UD receive.
    pub net: NetHeader,
}

/// A received packet's network header as a UD receive reports it in the first 40 bytes of its
/// buffer (RoCEv2, IBA Annex A17.4.5.2): an IPv6 header whole; an IPv4 header in the last 20
/// bytes, after 20 zero bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct NetHeader {
    /// The 40 bytes.
    pub grh: [u8; 40],
    /// The header is an IPv4 header (else IPv6).
    pub ipv4: bool,
}

impl Default for NetHeader {
    fn default() -> Self {
        Self {
            grh: [0; 40],
            ipv4: false,
        }
    }
}

impl NetHeader {
    /// The GRH area of a packet whose IP header is `ip` (20 bytes: IPv4, 40: IPv6); `None` for
    /// another length.
    pub fn from_ip_header(ip: &[u8]) -> Option<Self> {
        // Each length copied as a fixed-size array: a copy whose length is known only at run
        // time is a `memcpy` call, and this runs for every packet received.
        let mut grh = [0u8; 40];
        if let Ok(v4) = <&[u8; 20]>::try_from(ip) {
            let (_, tail) = grh.split_at_mut(20);
            tail.copy_from_slice(v4);
            return Some(Self { grh, ipv4: true });
        }
        let v6 = <&[u8; 40]>::try_from(ip).ok()?;
        Some(Self {
            grh: *v6,
            ipv4: false,
        })
    }
}

/// An async event APM asks the engine to raise; the values are the kernel's
/// `enum ib_event_type`, so the engine maps them with a cast.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum ApmEvent {
    /// `IB_EVENT_PATH_MIG`: the QP migrated to its alternate path (seed 000 steps 4 and 10).
    PathMig = 6,
    /// `IB_EVENT_PATH_MIG_ERR`: a migration request (MigReq=1 while Armed) did not match the
    /// alternate path and was refused (seed 000 step 6, "Path Migration Request Failed").
    PathMigErr = 7,
}

/// What initiated a migration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MigrationCause {
    /// Modify QP with PATH_MIG_STATE=Migrated while Armed (seed 000 "The Causes", first bullet).
    SoftwareCommand,
    /// The SQ logic exhausted its retry count while Armed (seed 000 "The Causes").
    RetryExhausted,
    /// The peer's migration request: a MigReq=1 packet arrived over the alternate path while
    /// Armed (seed 000 steps 6-10).
    PeerRequest,
    /// The bonding policy: the local port of the primary path went down while Armed, and the
    /// QP migrated at once (a migration by local command, seed 000's first cause, taken by the
    /// device instead of software).
    PortDown,
}

/// A migration that just happened (Armed -> Migrated, alternate copied into primary, alternate
/// slot emptied). What the engine must do now:
/// - raise `event` (always [`ApmEvent::PathMig`]; seed 000 steps 4 and 10);
/// - send every next packet over the new primary path, `Apm::primary()`, with MigReq=1
///   (`Apm::mig_req_bit()` already says 1; seed 000 steps 3 and 9). If `port_changed`, the shell
///   must pick the new port's netdev; the destination MAC must be re-resolved in any case;
/// - reload the SQ logic's retry counter with its initial value and retry what is outstanding
///   at once, over the new path. Seed 000 step 5 says so for the QP that migrates on its own
///   (retry exhaustion or a command); steps 6-10, on the QP that migrates on its peer's
///   request, list no such action, but that QP's SQ moves to the new path too: its
///   outstanding requests went out over the old one, and retries spent there say nothing
///   about the new path. So every migration, whatever its cause, reloads the count on that
///   side, and after a migration both sides start from their full retry count;
/// - use `Apm::primary().timeout` as the local ACK timeout from now on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Migration {
    /// What triggered it.
    pub cause: MigrationCause,
    /// The async event to raise ([`ApmEvent::PathMig`]).
    pub event: ApmEvent,
    /// The new primary uses another local port than the old one.
    pub port_changed: bool,
}

/// The verdict on one inbound packet (seed 000 step 6, seed 002 diagram). Call
/// [`Apm::on_packet`] for every packet of a connected QP, requests and responses alike,
/// before any other transport processing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RxVerdict {
    /// The packet came over the primary path; go on processing it. No APM state change.
    Accept,
    /// The packet came over the primary path with MigReq=0 while Rearm: the state is now Armed.
    /// Go on processing it.
    AcceptArmed,
    /// Armed, MigReq=1 and the packet matches the alternate path: the QP has migrated
    /// (seed 000 steps 7-10). Carry out the [`Migration`] and go on processing the packet.
    AcceptMigrated(Migration),
    /// Armed, MigReq=1 and the packet does not match the alternate path: silently drop it,
    /// raise [`ApmEvent::PathMigErr`]; the migration state is unchanged (seed 000 step 6,
    /// "Miscompare").
    DropPathMigErr,
    /// No migration in progress and the packet does not match the primary path: silently drop
    /// it, no event (IBA 9.6.1.5 header validation; hfi1 does the same). Neither the state nor
    /// any counter changes.
    Drop,
}

/// The requester's retry count ran out (transport timer, PSN sequence error NAKs, implied NAKs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetryExhausted {
    /// The QP was Armed and has migrated: carry out the [`Migration`] (reload the retry count,
    /// retry the request over the new path) instead of failing the WQE.
    Migrated(Migration),
    /// Not Armed: the usual exhaustion handling (complete with `IB_WC_RETRY_EXC_ERR`, QP to
    /// Error).
    NotArmed,
}

/// Why a Modify QP's APM attributes are refused. The kernel shell maps each to `-EINVAL`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApmError {
    /// PATH_MIG_STATE=Armed: software may only set Migrated or Rearm; Armed is reached from
    /// Rearm by the peer's MigReq=0.
    ArmedNotSettable,
    /// PATH_MIG_STATE=Rearm while Armed (the QP is armed already; rdmavt refuses it too).
    RearmWhileArmed,
    /// PATH_MIG_STATE=Migrated while Rearm (there is nothing to migrate to yet; rdmavt refuses
    /// it too).
    MigratedWhileRearm,
    /// PATH_MIG_STATE=Rearm but no alternate path is loaded (neither in this call nor before,
    /// or the last one was used up by a migration).
    NoAlternatePath,
    /// An alternate path is only accepted on the way to RTR, RTS or SQD, a migration state only
    /// on the way to RTS or SQD (the transition table allows them nowhere else; this guards
    /// callers that skipped `check_modify`).
    WrongState,
}

/// What a successful APM modify did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApmModify {
    /// Nothing changed in the migration state (an alternate path may have been stored).
    Unchanged,
    /// Migrated -> Rearm: from now on packets carry MigReq=0.
    Rearmed,
    /// Armed -> Migrated by software command: carry out the [`Migration`].
    Migrated(Migration),
}

/// The APM context of one QP: primary path, optional alternate path, migration state.
///
/// Invariants (checked by the property tests): the state is one of the three; Armed and Rearm
/// imply an alternate path is loaded; a migration always leaves the alternate slot empty.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Apm {
    primary: PathInfo,
    alternate: Option<PathInfo>,
    state: MigState,
    /// The peer is known to send over the current primary path: true from the start (both
    /// ends begin on the path Modify QP loaded) and after a migration the peer asked for;
    /// false after this end migrated on its own, until a packet arrives over the new primary.
    peer_follows: bool,
}

impl Default for Apm {
    fn default() -> Self {
        Apm::new()
    }
}

impl Apm {
    /// A fresh context: Migrated, empty primary, no alternate (after Create QP and after Reset).
    pub const fn new() -> Apm {
        Apm {
            primary: PathInfo::EMPTY,
            alternate: None,
            state: MigState::Migrated,
            peer_follows: true,
        }
    }

    /// Back to the state after Create QP (the QP entered Reset).
    pub fn reset(&mut self) {
        *self = Apm::new();
    }

    /// The migration state (query_qp's `path_mig_state`).
    pub const fn state(&self) -> MigState {
        self.state
    }

    /// The primary path: the one every packet is sent on.
    pub const fn primary(&self) -> &PathInfo {
        &self.primary
    }

    /// The primary path, to update from Modify QP (`IB_QP_PORT`, `IB_QP_AV`, `IB_QP_PKEY_INDEX`,
    /// `IB_QP_TIMEOUT`).
    pub fn primary_mut(&mut self) -> &mut PathInfo {
        &mut self.primary
    }

    /// Replace the primary path.
    pub fn set_primary(&mut self, path: PathInfo) {
        self.primary = path;
    }

    /// The alternate path, if one is loaded (query_qp's `alt_ah_attr` etc.).
    pub const fn alternate(&self) -> Option<&PathInfo> {
        self.alternate.as_ref()
    }

    /// The BTH MigReq bit for the next packet sent (any packet: request, ACK, read response):
    /// true while Migrated, false while Rearm or Armed (seed 002 diagram; hfi1 does the same).
    pub const fn mig_req_bit(&self) -> bool {
        matches!(self.state, MigState::Migrated)
    }

    /// Validate the APM part of a Modify QP without changing anything. `next` is the state the
    /// QP goes to; `alt` is the alternate path when the mask has `IB_QP_ALT_PATH`; `mig` the
    /// requested state when the mask has `IB_QP_PATH_MIG_STATE`. Rules (rdmavt's, plus the
    /// invariant that Rearm needs an alternate path):
    /// - no APM attribute: always fine;
    /// - an alternate path only when going to RTR, RTS or SQD, a migration state only when going
    ///   to RTS or SQD ([`ApmError::WrongState`]; the transition table says the same);
    /// - Armed cannot be set ([`ApmError::ArmedNotSettable`]);
    /// - Rearm: refused while Armed ([`ApmError::RearmWhileArmed`]); needs an alternate path
    ///   ([`ApmError::NoAlternatePath`]); from Rearm it is a no-op;
    /// - Migrated: refused while Rearm ([`ApmError::MigratedWhileRearm`]); from Armed it
    ///   migrates now; from Migrated it is a no-op;
    /// - an alternate path alone may be loaded in any migration state (while Armed it replaces
    ///   the armed alternate, as rdmavt does).
    pub fn check_modify(
        &self,
        next: QpState,
        alt: Option<&PathInfo>,
        mig: Option<MigState>,
    ) -> Result<(), ApmError> {
        if alt.is_none() && mig.is_none() {
            return Ok(());
        }
        if alt.is_some() && !matches!(next, QpState::Rtr | QpState::Rts | QpState::Sqd) {
            return Err(ApmError::WrongState);
        }
        if mig.is_some() && !matches!(next, QpState::Rts | QpState::Sqd) {
            return Err(ApmError::WrongState);
        }
        match (mig, self.state) {
            (None, _) => Ok(()),
            (Some(MigState::Armed), _) => Err(ApmError::ArmedNotSettable),
            (Some(MigState::Rearm), MigState::Armed) => Err(ApmError::RearmWhileArmed),
            (Some(MigState::Rearm), _) => {
                if alt.is_some() || self.alternate.is_some() {
                    Ok(())
                } else {
                    Err(ApmError::NoAlternatePath)
                }
            }
            (Some(MigState::Migrated), MigState::Rearm) => Err(ApmError::MigratedWhileRearm),
            (Some(MigState::Migrated), _) => Ok(()),
        }
    }

    /// The APM part of a Modify QP: [`Apm::check_modify`], then store the alternate path (if
    /// given) and apply the requested migration state. Nothing changes on error.
    pub fn modify(
        &mut self,
        next: QpState,
        alt: Option<&PathInfo>,
        mig: Option<MigState>,
    ) -> Result<ApmModify, ApmError> {
        self.check_modify(next, alt, mig)?;
        if let Some(path) = alt {
            self.alternate = Some(*path);
        }
        Ok(match (mig, self.state) {
            (Some(MigState::Rearm), MigState::Migrated) => {
                self.state = MigState::Rearm;
                ApmModify::Rearmed
            }
            (Some(MigState::Migrated), MigState::Armed) => {
                match self.migrate(MigrationCause::SoftwareCommand) {
                    Some(m) => ApmModify::Migrated(m),
                    None => ApmModify::Unchanged,
                }
            }
            _ => ApmModify::Unchanged,
        })
    }

    /// The SQ logic exhausted its retry count. While Armed the QP migrates (seed 000 "The
    /// Causes", steps 1-5) and the request is retried over the new path with a reloaded count;
    /// otherwise [`RetryExhausted::NotArmed`] and the engine fails the WQE as usual.
    pub fn on_retry_exhausted(&mut self) -> RetryExhausted {
        if self.state != MigState::Armed {
            return RetryExhausted::NotArmed;
        }
        match self.migrate(MigrationCause::RetryExhausted) {
            Some(m) => RetryExhausted::Migrated(m),
            None => RetryExhausted::NotArmed,
        }
    }

    /// Check one inbound packet's path and MigReq bit (seed 000 step 6; seed 002 diagram).
    ///
    /// - Armed and MigReq=1: a migration request. If `arrived_on` matches the alternate path
    ///   (port, packet SGID = alternate DGID, packet DGID = alternate SGID) the QP migrates
    ///   ([`RxVerdict::AcceptMigrated`]); otherwise the packet is dropped, the state stays
    ///   Armed and PATH_MIG_ERR is raised ([`RxVerdict::DropPathMigErr`]).
    /// - Otherwise the packet must match the primary path, else [`RxVerdict::Drop`] (silent,
    ///   state unchanged). A matching packet with MigReq=0 moves Rearm to Armed
    ///   ([`RxVerdict::AcceptArmed`]); anything else is [`RxVerdict::Accept`].
    pub fn on_packet(&mut self, mig_req: bool, arrived_on: &PathMatch) -> RxVerdict {
        if self.state == MigState::Armed && mig_req {
            let matches_alt = match &self.alternate {
                Some(alt) => alt.matches(arrived_on),
                None => false,
            };
            if !matches_alt {
                return RxVerdict::DropPathMigErr;
            }
            return match self.migrate(MigrationCause::PeerRequest) {
                Some(m) => RxVerdict::AcceptMigrated(m),
                None => RxVerdict::DropPathMigErr,
            };
        }
        if !self.primary.matches(arrived_on) {
            return RxVerdict::Drop;
        }
        self.peer_follows = true;
        if self.state == MigState::Rearm && !mig_req {
            self.state = MigState::Armed;
            return RxVerdict::AcceptArmed;
        }
        RxVerdict::Accept
    }

    /// Whether the peer is known to send over the current primary path (see
    /// [`Apm::auto_rearm`]).
    pub const fn peer_follows(&self) -> bool {
        self.peer_follows
    }

    /// The bonding policy's failover: the primary path's local port went down. While Armed the
    /// QP migrates at once ([`MigrationCause::PortDown`]); otherwise nothing changes and `None`.
    pub fn on_port_down(&mut self) -> Option<Migration> {
        if self.state != MigState::Armed {
            return None;
        }
        self.migrate(MigrationCause::PortDown)
    }

    /// The bonding policy's re-arm: loads `alt` as the alternate path and moves Migrated to
    /// Rearm, as Modify QP with an alternate path and PATH_MIG_STATE=Rearm would. Only while
    /// Migrated with no alternate path loaded, and only once the peer is known to send over
    /// the current primary: an end that migrated on its own (port down, retry exhaustion,
    /// command) waits for the peer's first packet over the new primary. Re-arming before
    /// that would send MigReq=0 to a peer still Armed on the old primary, over what it takes
    /// for its alternate path: neither a migration request nor its primary, so it would drop
    /// everything, and this end would drop the peer's packets over the old primary in turn.
    /// Returns whether the QP re-armed.
    pub fn auto_rearm(&mut self, alt: &PathInfo) -> bool {
        if self.state != MigState::Migrated || self.alternate.is_some() || !self.peer_follows {
            return false;
        }
        self.alternate = Some(*alt);
        self.state = MigState::Rearm;
        true
    }

    /// The migration itself (seed 000 steps 1-2 / 7-8): Armed -> Migrated, the alternate path
    /// becomes the primary, the alternate slot is emptied. `None` (and no change) if there is
    /// no alternate path, which the invariants rule out while Armed.
    fn migrate(&mut self, cause: MigrationCause) -> Option<Migration> {
        let alt = self.alternate.take()?;
        let port_changed = alt.port_num != self.primary.port_num;
        self.primary = alt;
        self.state = MigState::Migrated;
        self.peer_follows = cause == MigrationCause::PeerRequest;
        Some(Migration {
            cause,
            event: ApmEvent::PathMig,
            port_changed,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const L1: [u8; 16] = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x11];
    const R1: [u8; 16] = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x21];
    const L2: [u8; 16] = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x12];
    const R2: [u8; 16] = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x22];

    /// The GRH area: an IPv4 header in its last 20 bytes after 20 zeros (where ib_core's
    /// `ib_get_rdma_header_version` looks for it), an IPv6 header as the whole; any other
    /// length is no IP header.
    #[test]
    fn net_header_from_ip_header() {
        let ip: [u8; 40] = core::array::from_fn(|i| i as u8 + 1);
        let v4 = NetHeader::from_ip_header(&ip[..20]).expect("IPv4");
        assert!(v4.ipv4);
        assert_eq!(v4.grh[..20], [0; 20]);
        assert_eq!(v4.grh[20..], ip[..20]);
        let v6 = NetHeader::from_ip_header(&ip).expect("IPv6");
        assert!(!v6.ipv4);
        assert_eq!(v6.grh, ip);
        for n in [0, 19, 21, 39] {
            assert!(NetHeader::from_ip_header(&ip[..n]).is_none(), "{n} bytes");
        }
    }

    /// A path as configured at one end: local port, local GID, remote GID.
    fn path(port: u8, local: [u8; 16], remote: [u8; 16], timeout: u8) -> PathInfo {
        PathInfo {
            port_num: port,
            sgid_index: port,
            sgid: local,
            dgid: remote,
            pkey_index: 0,
            timeout,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
            sl: 0,
            static_rate: 0,
        }
    }

    /// Our primary (port 1) and alternate (port 2).
    fn primary() -> PathInfo {
        path(1, L1, R1, 14)
    }
    fn alternate() -> PathInfo {
        path(2, L2, R2, 18)
    }

    /// A packet as we receive it when the peer sends over our primary / alternate path.
    fn on_primary() -> PathMatch {
        PathMatch {
            port_num: 1,
            sgid: R1,
            dgid: L1,
            ..Default::default()
        }
    }
    fn on_alternate() -> PathMatch {
        PathMatch {
            port_num: 2,
            sgid: R2,
            dgid: L2,
            ..Default::default()
        }
    }

    fn migrated_with_primary() -> Apm {
        let mut a = Apm::new();
        a.set_primary(primary());
        a
    }

    fn rearmed() -> Apm {
        let mut a = migrated_with_primary();
        let r = a.modify(QpState::Rts, Some(&alternate()), Some(MigState::Rearm));
        assert_eq!(r, Ok(ApmModify::Rearmed));
        a
    }

    fn armed() -> Apm {
        let mut a = rearmed();
        assert_eq!(a.on_packet(false, &on_primary()), RxVerdict::AcceptArmed);
        a
    }

    #[test]
    fn kernel_numbers_match_ib_verbs_h() {
        assert_eq!(MigState::Migrated.as_raw(), 0);
        assert_eq!(MigState::Rearm.as_raw(), 1);
        assert_eq!(MigState::Armed.as_raw(), 2);
        for n in 0..3 {
            assert_eq!(MigState::from_raw(n).map(MigState::as_raw), Some(n));
        }
        assert_eq!(MigState::from_raw(3), None);
        assert_eq!(ApmEvent::PathMig as u8, 6);
        assert_eq!(ApmEvent::PathMigErr as u8, 7);
    }

    // ---- seed 002: the state machine and MigReq ----------------------------------------------

    #[test]
    fn seed002_initial_state_is_migrated_sending_migreq_1() {
        let a = Apm::new();
        assert_eq!(a.state(), MigState::Migrated);
        assert!(a.mig_req_bit());
        assert_eq!(a.alternate(), None);
    }

    #[test]
    fn seed002_alternate_loaded_and_rearmed_moves_to_rearm() {
        for next in [QpState::Rts, QpState::Sqd] {
            let mut a = migrated_with_primary();
            assert_eq!(
                a.modify(next, Some(&alternate()), Some(MigState::Rearm)),
                Ok(ApmModify::Rearmed)
            );
            assert_eq!(a.state(), MigState::Rearm);
            assert_eq!(a.alternate(), Some(&alternate()));
        }
    }

    #[test]
    fn seed002_alternate_loaded_without_rearm_stays_migrated() {
        let mut a = migrated_with_primary();
        assert_eq!(
            a.modify(QpState::Rtr, Some(&alternate()), None),
            Ok(ApmModify::Unchanged)
        );
        assert_eq!(a.state(), MigState::Migrated);
        // Rearm later, without reloading the path.
        assert_eq!(
            a.modify(QpState::Rts, None, Some(MigState::Rearm)),
            Ok(ApmModify::Rearmed)
        );
    }

    #[test]
    fn seed002_rearm_sends_migreq_0() {
        assert!(!rearmed().mig_req_bit());
    }

    #[test]
    fn seed002_rearm_to_armed_on_migreq_0() {
        let mut a = rearmed();
        assert_eq!(a.on_packet(false, &on_primary()), RxVerdict::AcceptArmed);
        assert_eq!(a.state(), MigState::Armed);
        // Further MigReq=0 packets are plain accepts.
        assert_eq!(a.on_packet(false, &on_primary()), RxVerdict::Accept);
    }

    #[test]
    fn seed002_rearm_stays_on_migreq_1() {
        // The peer has not rearmed yet (it is still Migrated and sends MigReq=1).
        let mut a = rearmed();
        assert_eq!(a.on_packet(true, &on_primary()), RxVerdict::Accept);
        assert_eq!(a.state(), MigState::Rearm);
    }

    #[test]
    fn seed002_rearm_to_armed_needs_a_primary_path_packet() {
        let mut a = rearmed();
        assert_eq!(a.on_packet(false, &on_alternate()), RxVerdict::Drop);
        assert_eq!(a.state(), MigState::Rearm);
    }

    #[test]
    fn seed002_armed_sends_migreq_0() {
        assert!(!armed().mig_req_bit());
    }

    #[test]
    fn seed002_armed_modified_to_migrated() {
        let mut a = armed();
        let r = a.modify(QpState::Rts, None, Some(MigState::Migrated));
        let Ok(ApmModify::Migrated(m)) = r else {
            panic!("{r:?}")
        };
        assert_eq!(m.cause, MigrationCause::SoftwareCommand);
        assert_eq!(a.state(), MigState::Migrated);
        assert!(a.mig_req_bit());
    }

    #[test]
    fn seed002_armed_received_migreq_1_migrates() {
        let mut a = armed();
        assert!(matches!(
            a.on_packet(true, &on_alternate()),
            RxVerdict::AcceptMigrated(_)
        ));
        assert_eq!(a.state(), MigState::Migrated);
    }

    // ---- seed 000: the causes -----------------------------------------------------------------

    #[test]
    fn seed000_cause_software_command_armed_to_migrated() {
        for next in [QpState::Rts, QpState::Sqd] {
            let mut a = armed();
            assert!(matches!(
                a.modify(next, None, Some(MigState::Migrated)),
                Ok(ApmModify::Migrated(_))
            ));
        }
    }

    #[test]
    fn seed000_cause_retry_count_exhaustion_while_armed_migrates() {
        let mut a = armed();
        let RetryExhausted::Migrated(m) = a.on_retry_exhausted() else {
            panic!()
        };
        assert_eq!(m.cause, MigrationCause::RetryExhausted);
    }

    #[test]
    fn seed000_retry_exhaustion_without_apm_enabled_does_not_migrate() {
        let mut a = migrated_with_primary();
        assert_eq!(a.on_retry_exhausted(), RetryExhausted::NotArmed);
        let mut a = rearmed();
        assert_eq!(a.on_retry_exhausted(), RetryExhausted::NotArmed);
        assert_eq!(a.state(), MigState::Rearm);
        assert_eq!(a.primary(), &primary());
    }

    // ---- seed 000: the migration, local side (steps 1-5) --------------------------------------

    #[test]
    fn seed000_step1_armed_to_migrated() {
        let mut a = armed();
        a.on_retry_exhausted();
        assert_eq!(a.state(), MigState::Migrated);
    }

    #[test]
    fn seed000_step2_alternate_copied_into_primary() {
        let mut a = armed();
        a.on_retry_exhausted();
        assert_eq!(a.primary(), &alternate());
        // The alternate slot is used up: rearming needs a new alternate path.
        assert_eq!(a.alternate(), None);
        assert_eq!(
            a.check_modify(QpState::Rts, None, Some(MigState::Rearm)),
            Err(ApmError::NoAlternatePath)
        );
    }

    #[test]
    fn seed000_step3_next_packet_migreq_1_over_new_path() {
        let mut a = armed();
        let RetryExhausted::Migrated(m) = a.on_retry_exhausted() else {
            panic!()
        };
        assert!(a.mig_req_bit());
        assert_eq!(a.primary().port_num, 2);
        assert_eq!(a.primary().dgid, R2);
        assert!(m.port_changed);
    }

    #[test]
    fn seed000_step4_path_mig_event_raised() {
        let mut a = armed();
        let RetryExhausted::Migrated(m) = a.on_retry_exhausted() else {
            panic!()
        };
        assert_eq!(m.event, ApmEvent::PathMig);
    }

    #[test]
    fn seed000_step5_migration_on_exhaustion_then_new_timeout() {
        // The retry count itself is the SQ logic's: the Qp reloads it on every `Migration`
        // (tests/sim/rules/apm.rs, seed000_*migrat*).
        let mut a = armed();
        let RetryExhausted::Migrated(m) = a.on_retry_exhausted() else {
            panic!()
        };
        assert_eq!(m.cause, MigrationCause::RetryExhausted);
        // The new path's local ACK timeout applies from now on.
        assert_eq!(a.primary().timeout, 18);
        // Exhausting again after the migration is a real failure ("On Exhaustion").
        assert_eq!(a.on_retry_exhausted(), RetryExhausted::NotArmed);
        // A software command migrates as well.
        let mut a = armed();
        let Ok(ApmModify::Migrated(m)) = a.modify(QpState::Rts, None, Some(MigState::Migrated))
        else {
            panic!()
        };
        assert_eq!(m.cause, MigrationCause::SoftwareCommand);
    }

    // ---- seed 000: the migration, remote side (steps 6-10) ------------------------------------

    #[test]
    fn seed000_step6_miscompare_drops_and_raises_path_mig_err() {
        let wrong = [
            PathMatch {
                port_num: 1,
                ..on_alternate()
            },
            PathMatch {
                sgid: R1,
                ..on_alternate()
            },
            PathMatch {
                dgid: L1,
                ..on_alternate()
            },
            on_primary(),
        ];
        for pkt in wrong {
            let mut a = armed();
            let before = a;
            assert_eq!(
                a.on_packet(true, &pkt),
                RxVerdict::DropPathMigErr,
                "{pkt:?}"
            );
            // The state does not change and the migration request is not accepted.
            assert_eq!(a, before);
            assert_eq!(a.state(), MigState::Armed);
        }
    }

    #[test]
    fn seed000_step6_match_accepts_the_migration() {
        let mut a = armed();
        let RxVerdict::AcceptMigrated(m) = a.on_packet(true, &on_alternate()) else {
            panic!()
        };
        assert_eq!(m.cause, MigrationCause::PeerRequest);
    }

    #[test]
    fn seed000_step7_remote_armed_to_migrated() {
        let mut a = armed();
        a.on_packet(true, &on_alternate());
        assert_eq!(a.state(), MigState::Migrated);
    }

    #[test]
    fn seed000_step8_remote_copies_alternate_into_primary() {
        let mut a = armed();
        a.on_packet(true, &on_alternate());
        assert_eq!(a.primary(), &alternate());
        assert_eq!(a.alternate(), None);
        // From now on, packets must come over the new primary path.
        assert_eq!(a.on_packet(true, &on_alternate()), RxVerdict::Accept);
        assert_eq!(a.on_packet(true, &on_primary()), RxVerdict::Drop);
    }

    #[test]
    fn seed000_step9_remote_sends_migreq_1_over_new_path() {
        let mut a = armed();
        a.on_packet(true, &on_alternate());
        assert!(a.mig_req_bit());
        assert_eq!(a.primary().port_num, 2);
    }

    #[test]
    fn seed000_step10_remote_raises_path_mig() {
        let mut a = armed();
        let RxVerdict::AcceptMigrated(m) = a.on_packet(true, &on_alternate()) else {
            panic!()
        };
        assert_eq!(m.event, ApmEvent::PathMig);
        assert_eq!(m.cause, MigrationCause::PeerRequest);
    }

    #[test]
    fn seed000_two_peers_full_migration() {
        // Peer A's and peer B's views of the same two paths.
        let a_prim = path(1, L1, R1, 14);
        let a_alt = path(2, L2, R2, 14);
        let b_prim = path(1, R1, L1, 14);
        let b_alt = path(2, R2, L2, 14);
        // What each side sees when the other sends over a path (receiver's view).
        let seen_by = |receiver_path: &PathInfo| PathMatch {
            port_num: receiver_path.port_num,
            sgid: receiver_path.dgid,
            dgid: receiver_path.sgid,
            ..Default::default()
        };
        let mut a = Apm::new();
        a.set_primary(a_prim);
        let mut b = Apm::new();
        b.set_primary(b_prim);
        // Both load the alternate path and rearm (LAP/APR done by the CM).
        a.modify(QpState::Rts, Some(&a_alt), Some(MigState::Rearm))
            .unwrap();
        b.modify(QpState::Rts, Some(&b_alt), Some(MigState::Rearm))
            .unwrap();
        // A sends (MigReq=0) -> B armed; B answers (MigReq=0) -> A armed.
        assert_eq!(
            b.on_packet(a.mig_req_bit(), &seen_by(b.primary())),
            RxVerdict::AcceptArmed
        );
        assert_eq!(
            a.on_packet(b.mig_req_bit(), &seen_by(a.primary())),
            RxVerdict::AcceptArmed
        );
        // The primary path breaks: A's retries run out and A migrates.
        assert!(matches!(
            a.on_retry_exhausted(),
            RetryExhausted::Migrated(_)
        ));
        // A's retry goes out over A's new primary (the old alternate) with MigReq=1; B sees it on
        // its alternate path and migrates too.
        assert!(a.mig_req_bit());
        assert_eq!(a.primary(), &a_alt);
        assert!(matches!(
            b.on_packet(a.mig_req_bit(), &seen_by(&b_alt)),
            RxVerdict::AcceptMigrated(_)
        ));
        assert_eq!(b.primary(), &b_alt);
        // B's ACK goes back over the new path and A accepts it.
        assert_eq!(
            a.on_packet(b.mig_req_bit(), &seen_by(a.primary())),
            RxVerdict::Accept
        );
    }

    // ---- rules for the migration state in Modify QP (rdmavt's) --------------------------------

    #[test]
    fn rearm_while_armed_is_invalid() {
        let mut a = armed();
        let before = a;
        assert_eq!(
            a.modify(QpState::Rts, Some(&alternate()), Some(MigState::Rearm)),
            Err(ApmError::RearmWhileArmed)
        );
        assert_eq!(a, before);
    }

    #[test]
    fn migrated_while_rearm_is_invalid() {
        let mut a = rearmed();
        assert_eq!(
            a.modify(QpState::Rts, None, Some(MigState::Migrated)),
            Err(ApmError::MigratedWhileRearm)
        );
        assert_eq!(a.state(), MigState::Rearm);
    }

    #[test]
    fn armed_cannot_be_set_by_software() {
        for mut a in [migrated_with_primary(), rearmed(), armed()] {
            assert_eq!(
                a.modify(QpState::Rts, Some(&alternate()), Some(MigState::Armed)),
                Err(ApmError::ArmedNotSettable)
            );
        }
    }

    #[test]
    fn rearm_without_alternate_path_is_invalid() {
        let mut a = migrated_with_primary();
        assert_eq!(
            a.modify(QpState::Rts, None, Some(MigState::Rearm)),
            Err(ApmError::NoAlternatePath)
        );
        assert_eq!(a.state(), MigState::Migrated);
    }

    #[test]
    fn same_state_requests_are_no_ops() {
        let mut a = migrated_with_primary();
        assert_eq!(
            a.modify(QpState::Rts, None, Some(MigState::Migrated)),
            Ok(ApmModify::Unchanged)
        );
        let mut a = rearmed();
        assert_eq!(
            a.modify(QpState::Rts, None, Some(MigState::Rearm)),
            Ok(ApmModify::Unchanged)
        );
        assert_eq!(a.state(), MigState::Rearm);
    }

    #[test]
    fn apm_attributes_only_on_the_way_to_rtr_rts_sqd() {
        let mut a = migrated_with_primary();
        for next in [QpState::Reset, QpState::Init, QpState::Sqe, QpState::Error] {
            assert_eq!(
                a.modify(next, Some(&alternate()), None),
                Err(ApmError::WrongState)
            );
        }
        assert_eq!(
            a.modify(QpState::Rtr, None, Some(MigState::Rearm)),
            Err(ApmError::WrongState)
        );
        assert_eq!(
            a.modify(QpState::Init, None, None),
            Ok(ApmModify::Unchanged)
        );
    }

    #[test]
    fn alternate_reloaded_while_armed_replaces_it_and_stays_armed() {
        let mut a = armed();
        let other = path(2, L2, R1, 9);
        assert_eq!(
            a.modify(QpState::Rts, Some(&other), None),
            Ok(ApmModify::Unchanged)
        );
        assert_eq!(a.state(), MigState::Armed);
        assert_eq!(a.alternate(), Some(&other));
    }

    // ---- receive-side checks outside a migration ----------------------------------------------

    #[test]
    fn primary_path_mismatch_dropped_silently() {
        for mut a in [migrated_with_primary(), rearmed(), armed()] {
            let before = a;
            let pkt = PathMatch {
                sgid: R2,
                ..on_primary()
            };
            assert_eq!(a.on_packet(false, &pkt), RxVerdict::Drop);
            assert_eq!(a, before);
        }
    }

    #[test]
    fn migrated_accepts_migreq_1_on_primary() {
        let mut a = migrated_with_primary();
        assert_eq!(a.on_packet(true, &on_primary()), RxVerdict::Accept);
        assert_eq!(a.on_packet(false, &on_primary()), RxVerdict::Accept);
        assert_eq!(a.state(), MigState::Migrated);
    }

    #[test]
    fn reset_returns_to_migrated_without_paths() {
        let mut a = armed();
        a.reset();
        assert_eq!(a, Apm::new());
        assert!(a.mig_req_bit());
    }
}
