//! Work requests as the verbs caller posts them (send and receive WRs) and the
//! scatter/gather elements they carry.
//!
//! Opcode and flag values equal the kernel's `enum ib_wr_opcode` and `enum ib_send_flags`,
//! so the kernel shell converts with a cast.

/// Maximum number of scatter/gather elements per work request.
pub const MAX_SGE: usize = 8;

/// One scatter/gather element: `length` bytes at `addr` in the local MR named by `lkey`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sge {
    /// Virtual address (or offset for zero-based MRs) of the first byte.
    pub addr: u64,
    /// Number of bytes.
    pub length: u32,
    /// Local key of the memory region.
    pub lkey: u32,
}

/// A fixed-capacity scatter/gather list (at most [`MAX_SGE`] elements). Only the elements in
/// use count: those past them are never read, and two lists are equal when their elements in
/// use are.
#[derive(Clone, Copy, Debug, Default)]
pub struct SgList {
    sges: [Sge; MAX_SGE],
    num: u8,
}

impl SgList {
    /// An empty list.
    pub const EMPTY: SgList = SgList {
        sges: [Sge {
            addr: 0,
            length: 0,
            lkey: 0,
        }; MAX_SGE],
        num: 0,
    };

    /// Builds a list from a slice; `None` if it has more than [`MAX_SGE`] elements.
    pub fn from_slice(sges: &[Sge]) -> Option<SgList> {
        if sges.len() > MAX_SGE {
            return None;
        }
        let mut l = SgList::EMPTY;
        for (d, s) in l.sges.iter_mut().zip(sges.iter()) {
            *d = *s;
        }
        l.num = sges.len() as u8;
        Some(l)
    }

    /// Appends `s`; `None` (the list unchanged) when it holds [`MAX_SGE`] already.
    pub fn push(&mut self, s: Sge) -> Option<()> {
        let d = self.sges.get_mut(usize::from(self.num))?;
        *d = s;
        self.num += 1;
        Some(())
    }

    /// Empties the list (a list reused for the next WR: the elements are left as they are).
    pub fn clear(&mut self) {
        self.num = 0;
    }

    /// The elements in use.
    pub fn as_slice(&self) -> &[Sge] {
        let n = (self.num as usize).min(MAX_SGE);
        self.sges.get(..n).unwrap_or(&[])
    }

    /// Total byte length, `None` if it does not fit in 32 bits (a malformed WQE).
    pub fn total_len(&self) -> Option<u32> {
        total_len(self.as_slice())
    }
}

impl PartialEq for SgList {
    fn eq(&self, other: &SgList) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for SgList {}

/// Total byte length of a scatter/gather list, `None` if it does not fit in 32 bits (a malformed
/// WQE).
pub fn total_len(sges: &[Sge]) -> Option<u32> {
    let mut t: u32 = 0;
    for s in sges {
        t = t.checked_add(s.length)?;
    }
    Some(t)
}

/// Send work request opcodes (values of the kernel's `enum ib_wr_opcode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum SendOpcode {
    /// IB_WR_RDMA_WRITE.
    RdmaWrite = 0,
    /// IB_WR_RDMA_WRITE_WITH_IMM.
    RdmaWriteWithImm = 1,
    /// IB_WR_SEND.
    Send = 2,
    /// IB_WR_SEND_WITH_IMM.
    SendWithImm = 3,
    /// IB_WR_RDMA_READ.
    RdmaRead = 4,
    /// IB_WR_ATOMIC_CMP_AND_SWP.
    AtomicCmpAndSwp = 5,
    /// IB_WR_ATOMIC_FETCH_AND_ADD.
    AtomicFetchAndAdd = 6,
    /// IB_WR_LOCAL_INV.
    LocalInv = 7,
    /// IB_WR_BIND_MW (user space only: `ibv_bind_mw` and type 2 windows).
    BindMw = 8,
    /// IB_WR_SEND_WITH_INV.
    SendWithInv = 9,
    /// IB_WR_FLUSH (IBA 1.5, RC only).
    Flush = 14,
    /// IB_WR_ATOMIC_WRITE (IBA 1.5, RC only).
    AtomicWrite = 15,
    /// IB_WR_REG_MR.
    RegMr = 0x20,
}

impl SendOpcode {
    /// Converts a kernel `ib_wr_opcode` value; `None` for opcodes this core does not support.
    pub fn from_u32(v: u32) -> Option<SendOpcode> {
        Some(match v {
            0 => SendOpcode::RdmaWrite,
            1 => SendOpcode::RdmaWriteWithImm,
            2 => SendOpcode::Send,
            3 => SendOpcode::SendWithImm,
            4 => SendOpcode::RdmaRead,
            5 => SendOpcode::AtomicCmpAndSwp,
            6 => SendOpcode::AtomicFetchAndAdd,
            7 => SendOpcode::LocalInv,
            8 => SendOpcode::BindMw,
            9 => SendOpcode::SendWithInv,
            14 => SendOpcode::Flush,
            15 => SendOpcode::AtomicWrite,
            0x20 => SendOpcode::RegMr,
            _ => return None,
        })
    }

    /// True for Send, Send with Immediate and Send with Invalidate.
    pub fn is_send(self) -> bool {
        matches!(
            self,
            SendOpcode::Send | SendOpcode::SendWithImm | SendOpcode::SendWithInv
        )
    }

    /// True for RDMA Write with and without Immediate.
    pub fn is_write(self) -> bool {
        matches!(self, SendOpcode::RdmaWrite | SendOpcode::RdmaWriteWithImm)
    }

    /// True for the two atomic operations.
    pub fn is_atomic(self) -> bool {
        matches!(
            self,
            SendOpcode::AtomicCmpAndSwp | SendOpcode::AtomicFetchAndAdd
        )
    }

    /// True for operations that never leave the local HCA (LOCAL_INV, REG_MR, BIND_MW).
    pub fn is_local(self) -> bool {
        matches!(
            self,
            SendOpcode::LocalInv | SendOpcode::RegMr | SendOpcode::BindMw
        )
    }

    /// True when the message consumes a receive WQE at the responder (Send and RDMA Write with
    /// Immediate): the "limited" operations of seed 003.
    pub fn needs_rq_wqe(self) -> bool {
        self.is_send() || self == SendOpcode::RdmaWriteWithImm
    }

    /// True for FLUSH and ATOMIC WRITE (IBA 1.5), answered like an RDMA Read with no data.
    pub fn is_flush_or_atomic_write(self) -> bool {
        matches!(self, SendOpcode::Flush | SendOpcode::AtomicWrite)
    }

    /// True for RDMA Read, atomics, FLUSH and ATOMIC WRITE, which take a responder resource,
    /// are answered by a response rather than an ACK, and that fences wait for.
    pub fn is_read_or_atomic(self) -> bool {
        self == SendOpcode::RdmaRead || self.is_atomic() || self.is_flush_or_atomic_write()
    }
}

/// Send flags (values of the kernel's `enum ib_send_flags`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SendFlags(pub u32);

impl SendFlags {
    /// IB_SEND_FENCE: wait for all earlier RDMA Reads and atomics to complete.
    pub const FENCE: u32 = 1;
    /// IB_SEND_SIGNALED: generate a completion on success.
    pub const SIGNALED: u32 = 2;
    /// IB_SEND_SOLICITED: set BTH:SE on the last packet.
    pub const SOLICITED: u32 = 4;
    /// IB_SEND_INLINE: the shell copied the data at post time (the core treats the SGEs alike).
    pub const INLINE: u32 = 8;

    /// True if every bit of `bits` is set.
    pub fn has(self, bits: u32) -> bool {
        self.0 & bits == bits
    }
}

/// Parameters of a fast-register (REG_MR) work request, handed to [`crate::memory::Memory`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RegMrParams {
    /// Key (lkey and rkey) the MR gets.
    pub key: u32,
    /// Start address.
    pub iova: u64,
    /// Length in bytes.
    pub length: u64,
    /// `ib_access_flags` bits.
    pub access: u32,
    /// Shell-defined handle of the MR being registered.
    pub mr_handle: u64,
}

/// Parameters of a FLUSH work request (`struct ib_flush_wr` / the rxe WQE's `flush`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlushParams {
    /// Bytes to flush from `remote_addr` (selectivity "range").
    pub length: u32,
    /// Placement type bits ([`crate::wire::feth::PLACEMENT_GLOBAL`], `PLACEMENT_PERSISTENT`).
    pub placement: u8,
    /// Selectivity level ([`crate::wire::feth::SELECT_RANGE`] or `SELECT_MR`).
    pub selectivity: u8,
}

/// Destination of a UD send (the address handle of `struct ib_ud_wr`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UdDest {
    /// Path (address vector) to the destination.
    pub path: crate::apm::PathInfo,
    /// Destination QP number.
    pub remote_qpn: u32,
    /// Q_Key; if its top bit is set the QP's own Q_Key is used instead (IBA 10.2.5).
    pub remote_qkey: u32,
}

impl UdDest {
    /// No destination.
    pub const EMPTY: UdDest = UdDest {
        path: crate::apm::PathInfo::EMPTY,
        remote_qpn: 0,
        remote_qkey: 0,
    };
}

/// The fields of a send work request that only some opcodes carry. One of them at a time
/// is stored: a send queue slot holds a copy of every posted WR. A datagram's destination, the
/// largest, is kept apart ([`SendWr::ud`]), so that only datagram QPs pay room for it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WrExtra {
    /// Nothing beyond the common fields.
    #[default]
    None,
    /// CMP_AND_SWP and FETCH_AND_ADD.
    Atomic {
        /// Compare value (CMP_AND_SWP) or add value (FETCH_AND_ADD).
        compare_add: u64,
        /// Swap value (CMP_AND_SWP).
        swap: u64,
    },
    /// The 8 bytes an ATOMIC WRITE stores, in memory order (carried in the WQE).
    AtomicWrite([u8; 8]),
    /// FLUSH parameters.
    Flush(FlushParams),
    /// Fast-register parameters (REG_MR).
    Reg(RegMrParams),
    /// Memory window bind parameters (BIND_MW).
    Bind(crate::mw::BindMwParams),
}

/// A send work request. `L` is its scatter/gather list and `U` its datagram destination: an
/// [`SgList`] and a [`UdDest`] as the caller posts it; in a send queue slot, the list's length
/// and nothing (the queue keeps both apart, see [`SgPool`](crate::sg_pool::SgPool)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SendWr<L = SgList, U = UdDest> {
    /// Caller's identifier, returned in the completion.
    pub wr_id: u64,
    /// What to do.
    pub opcode: SendOpcode,
    /// Fence, signaled, solicited, inline.
    pub flags: SendFlags,
    /// Local gather list (Send, Write) or scatter list (Read, atomic result).
    pub sg: L,
    /// Immediate data (host order) for the `WithImm` opcodes.
    pub imm: u32,
    /// R_Key to invalidate at the responder (SEND_WITH_INV) or key for LOCAL_INV.
    pub invalidate_rkey: u32,
    /// Remote virtual address (RDMA and atomics).
    pub remote_addr: u64,
    /// Remote key (RDMA and atomics).
    pub rkey: u32,
    /// The fields only some opcodes carry.
    pub extra: WrExtra,
    /// Destination of a datagram (UD) send; unused by connected QPs.
    pub ud: U,
}

impl SendWr {
    /// A signaled work request of the given opcode with everything else zero.
    pub fn new(wr_id: u64, opcode: SendOpcode) -> SendWr {
        SendWr {
            wr_id,
            opcode,
            flags: SendFlags(SendFlags::SIGNALED),
            sg: SgList::EMPTY,
            imm: 0,
            invalidate_rkey: 0,
            remote_addr: 0,
            rkey: 0,
            extra: WrExtra::None,
            ud: UdDest::EMPTY,
        }
    }

    /// Makes this WR what [`SendWr::new`] returns, without writing the unused elements of its
    /// list: a WR reused for each WQE taken from a ring costs no zeroed list.
    pub fn reset(&mut self, wr_id: u64, opcode: SendOpcode) {
        // Every field named: one added to the WR fails to compile here until it is reset too,
        // instead of carrying the last WQE's value into the next.
        let SendWr {
            wr_id: id,
            opcode: op,
            flags,
            sg,
            imm,
            invalidate_rkey,
            remote_addr,
            rkey,
            extra,
            ud,
        } = self;
        *id = wr_id;
        *op = opcode;
        *flags = SendFlags(SendFlags::SIGNALED);
        sg.clear();
        *imm = 0;
        *invalidate_rkey = 0;
        *remote_addr = 0;
        *rkey = 0;
        *extra = WrExtra::None;
        *ud = UdDest::EMPTY;
    }

    /// The WR as a send queue slot keeps it (the list's length in place of the list, without
    /// the datagram destination), and the list.
    pub fn split(&self) -> (SendWr<u8, ()>, &[Sge]) {
        let sg = self.sg.as_slice();
        let wr = SendWr {
            wr_id: self.wr_id,
            opcode: self.opcode,
            flags: self.flags,
            sg: sg.len() as u8,
            imm: self.imm,
            invalidate_rkey: self.invalidate_rkey,
            remote_addr: self.remote_addr,
            rkey: self.rkey,
            extra: self.extra,
            ud: (),
        };
        (wr, sg)
    }

    /// Sets the destination QP and Q_Key of a datagram send.
    pub fn set_ud_dest(&mut self, remote_qpn: u32, remote_qkey: u32) {
        self.ud.remote_qpn = remote_qpn;
        self.ud.remote_qkey = remote_qkey;
    }

    /// Sets the path of a datagram send.
    pub fn set_ud_path(&mut self, path: crate::apm::PathInfo) {
        self.ud.path = path;
    }
}

impl<L, U> SendWr<L, U> {
    /// The compare (CMP_AND_SWP) or add (FETCH_AND_ADD) value of an atomic; 0 otherwise.
    pub fn compare_add(&self) -> u64 {
        match self.extra {
            WrExtra::Atomic { compare_add, .. } => compare_add,
            _ => 0,
        }
    }

    /// The swap value of a CMP_AND_SWP; 0 otherwise.
    pub fn swap(&self) -> u64 {
        match self.extra {
            WrExtra::Atomic { swap, .. } => swap,
            _ => 0,
        }
    }

    /// The 8 bytes an ATOMIC WRITE stores; zeros otherwise.
    pub fn atomic_write(&self) -> [u8; 8] {
        match self.extra {
            WrExtra::AtomicWrite(v) => v,
            _ => [0; 8],
        }
    }

    /// The parameters of a FLUSH; zeros otherwise.
    pub fn flush(&self) -> FlushParams {
        match self.extra {
            WrExtra::Flush(f) => f,
            _ => FlushParams::default(),
        }
    }

    /// The parameters of a REG_MR; zeros otherwise.
    pub fn reg(&self) -> RegMrParams {
        match self.extra {
            WrExtra::Reg(r) => r,
            _ => RegMrParams::default(),
        }
    }

    /// The parameters of a BIND_MW; zeros otherwise.
    pub fn bind(&self) -> crate::mw::BindMwParams {
        match self.extra {
            WrExtra::Bind(b) => b,
            _ => crate::mw::BindMwParams::default(),
        }
    }
}

/// A receive work request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecvWr {
    /// Caller's identifier, returned in the completion.
    pub wr_id: u64,
    /// Scatter list for the inbound message.
    pub sg: SgList,
}

impl RecvWr {
    /// A receive WQE the shell could not parse (a malformed WQE of a user SRQ, which the QP
    /// takes only when a message needs it): its scatter list's total length does not fit in 32
    /// bits, so the responder fails the message it was taken for as a malformed WQE (a Local
    /// QP Operation Error completion with `wr_id`; on RC also a Remote Operational Error NAK).
    pub fn malformed(wr_id: u64) -> RecvWr {
        let huge = Sge {
            addr: 0,
            length: u32::MAX,
            lkey: 0,
        };
        RecvWr {
            wr_id,
            sg: SgList::from_slice(&[huge, huge]).unwrap_or(SgList::EMPTY),
        }
    }
}

/// Slot index of the WQE with monotonic counter `counter` in a work queue ring of `depth`
/// slots (`counter % depth`); `None` for a queue of depth 0.
pub fn ring_slot(counter: u64, depth: usize) -> Option<usize> {
    let len = depth as u64;
    if len == 0 {
        return None;
    }
    Some((counter % len) as usize)
}

/// One receive queue slot (caller-provided storage): a posted receive WR without its scatter
/// list, which the queue keeps apart (see [`SgPool`](crate::sg_pool::SgPool)).
#[derive(Clone, Copy, Debug, Default)]
pub struct RecvSlot {
    /// Caller's identifier, returned in the completion.
    pub wr_id: u64,
    /// Number of elements in the scatter list.
    pub num_sge: u8,
}

/// One send queue slot (caller-provided storage): the work request plus the SQ Logic's
/// bookkeeping for it.
#[derive(Clone, Copy, Debug)]
pub struct SendSlot {
    /// The posted work request; its scatter/gather list and datagram destination are kept
    /// apart.
    pub wr: SendWr<u8, ()>,
    /// Send sequence number (24 bits, seed 003).
    pub ssn: u32,
    /// PSN of the first request packet (valid once started).
    pub first_psn: u32,
    /// Number of PSNs the message uses (request packets, or response packets for a Read).
    pub npsn: u32,
    /// Total length in bytes.
    pub len: u32,
    /// True once the first packet has been transmitted.
    pub started: bool,
    /// True once the message is complete (acknowledged or answered) and waits to be retired.
    pub done: bool,
    /// Bytes of read response received so far.
    pub read_done: u32,
    /// Where the responses to the last RDMA Read request sent end (bytes from the start; 0 for
    /// the whole read). A resumed read asks for one window of it at a time.
    pub read_end: u32,
    /// Completion status if the WQE failed (0 = success).
    pub status: u32,
}

impl Default for SendSlot {
    fn default() -> SendSlot {
        SendSlot {
            wr: SendWr::new(0, SendOpcode::Send).split().0,
            ssn: 0,
            first_psn: 0,
            npsn: 0,
            len: 0,
            started: false,
            done: false,
            read_done: 0,
            read_end: 0,
            status: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apm::PathInfo;

    #[test]
    fn reset_wr_equals_a_new_one_and_reads_no_stale_element() {
        let mut wr = SendWr::new(9, SendOpcode::AtomicCmpAndSwp);
        wr.flags = SendFlags(SendFlags::INLINE);
        for i in 0..MAX_SGE as u32 {
            wr.sg
                .push(Sge {
                    addr: 1,
                    length: i + 1,
                    lkey: 2,
                })
                .unwrap();
        }
        wr.imm = 1;
        wr.invalidate_rkey = 2;
        wr.remote_addr = 3;
        wr.rkey = 4;
        wr.extra = WrExtra::Atomic {
            compare_add: 5,
            swap: 6,
        };
        wr.set_ud_dest(7, 8);
        wr.reset(1, SendOpcode::RdmaRead);
        assert_eq!(wr, SendWr::new(1, SendOpcode::RdmaRead));
        assert!(wr.sg.as_slice().is_empty());
        assert_eq!(wr.sg.total_len(), Some(0));
        let s = Sge {
            addr: 10,
            length: 11,
            lkey: 12,
        };
        wr.sg.push(s).unwrap();
        assert_eq!(wr.sg.as_slice(), &[s]);
        assert_eq!(wr.sg, SgList::from_slice(&[s]).unwrap());
        assert_eq!(wr.split().1, &[s]);
    }

    #[test]
    fn sg_list_push_appends_up_to_max_sge_as_from_slice_builds() {
        let all: [Sge; MAX_SGE] = core::array::from_fn(|i| Sge {
            addr: i as u64 * 4096,
            length: i as u32 + 1,
            lkey: 7,
        });
        let mut l = SgList::EMPTY;
        for (i, s) in all.iter().enumerate() {
            assert_eq!(l.push(*s), Some(()));
            assert_eq!(Some(l), SgList::from_slice(&all[..=i]));
        }
        assert_eq!(l.push(all[0]), None);
        assert_eq!(l.as_slice(), &all[..]);
    }

    #[test]
    fn opcode_fields_read_back_and_read_zero_for_other_opcodes() {
        let mut wr = SendWr::new(1, SendOpcode::AtomicCmpAndSwp);
        wr.extra = WrExtra::Atomic {
            compare_add: 7,
            swap: 9,
        };
        assert_eq!((wr.compare_add(), wr.swap()), (7, 9));
        assert_eq!(wr.atomic_write(), [0; 8]);
        assert_eq!(wr.flush(), FlushParams::default());
        assert_eq!(wr.reg(), RegMrParams::default());
        assert_eq!(wr.bind(), crate::mw::BindMwParams::default());
        assert_eq!(wr.ud, UdDest::EMPTY);
        wr.extra = WrExtra::AtomicWrite([1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(wr.atomic_write(), [1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!((wr.compare_add(), wr.swap()), (0, 0));
    }

    #[test]
    fn a_datagram_destination_is_set_in_two_steps() {
        let path = PathInfo {
            port_num: 1,
            flow_label: 0x12345,
            ..PathInfo::EMPTY
        };
        // Either order: the shell learns the QP and Q_Key from the WQE, the path from the AH.
        let mut a = SendWr::new(1, SendOpcode::Send);
        a.set_ud_dest(0x11, 0x22);
        a.set_ud_path(path);
        let mut b = SendWr::new(1, SendOpcode::Send);
        b.set_ud_path(path);
        b.set_ud_dest(0x11, 0x22);
        let want = UdDest {
            path,
            remote_qpn: 0x11,
            remote_qkey: 0x22,
        };
        assert_eq!((a.ud, b.ud), (want, want));
    }

    /// A queue keeps a copy of every WR in each of its slots (255 for a QP of 128 WRs), its
    /// scatter/gather list and datagram destination apart: the opcode-specific fields share one
    /// place, so a slot stays this small (255 of them fit in seven pages).
    #[test]
    fn queue_slots_stay_small() {
        assert!(core::mem::size_of::<SendSlot>() <= 112);
        assert!(core::mem::size_of::<RecvSlot>() <= 16);
    }
}
