// SPDX-License-Identifier: GPL-2.0

//! Owned socket buffers (`struct sk_buff`) and irq-safe queues of them (`struct sk_buff_head`).

use super::crc32::{self, CrcImpl};
use super::fill::Fill;
use super::netdev::NetDev;
use super::roce::{self, IcrcAt, RoceHead, RoceRx, RoceRxError};
use crate::bindings as b;
use crate::ib::copy_src::CopySrc;
use crate::rvcore::icrc;
use crate::rvcore::wire::{ip_udp, Glance};
use core::{mem::MaybeUninit, ptr::NonNull};
use kernel::{page::Page, prelude::*, types::Opaque};

/// An owned socket buffer; freed on drop (`kfree_skb`, counted as a drop) unless it is
/// consumed ([`Skb::consume`]) or handed on (sent, queued).
///
/// # Invariants
///
/// The pointer is to a live `struct sk_buff` that this value exclusively owns.
pub struct Skb(NonNull<b::sk_buff>);

// SAFETY: an owned skb may be handed to and freed on any CPU.
unsafe impl Send for Skb {}

impl Skb {
    /// Takes ownership of a raw skb; `None` for a null pointer.
    ///
    /// # Safety
    ///
    /// `ptr` must be null or a live skb whose ownership passes to the result.
    pub unsafe fn from_raw(ptr: *mut b::sk_buff) -> Option<Skb> {
        // INVARIANT: the caller transfers ownership of a live skb.
        NonNull::new(ptr).map(Skb)
    }

    /// Gives up ownership, returning the raw pointer (for a C call that consumes the skb).
    pub fn into_raw(self) -> *mut b::sk_buff {
        let p = self.0.as_ptr();
        core::mem::forget(self);
        p
    }

    /// The raw pointer, for calls into C that do not take ownership.
    pub fn as_raw(&self) -> *mut b::sk_buff {
        self.0.as_ptr()
    }

    /// Allocates an empty skb of `size` bytes of buffer (`GFP_ATOMIC`, callable in any context).
    pub fn alloc(size: usize) -> Result<Skb> {
        let size = u32::try_from(size).map_err(|_| EINVAL)?;
        // SAFETY: `alloc_skb` may be called in any context with GFP_ATOMIC.
        let p = unsafe { b::rvr_alloc_skb(size) };
        // SAFETY: a non-null result is a fresh skb that we own.
        unsafe { Skb::from_raw(p) }.ok_or(ENOMEM)
    }

    /// An empty skb to transmit on `ndev`, with room for its link-layer header and `head` bytes
    /// of headers in front of the `len` bytes to put (`GFP_ATOMIC`, callable in any context).
    pub(crate) fn alloc_tx(ndev: &NetDev, head: usize, len: usize) -> Result<Skb> {
        let head = u32::try_from(head).map_err(|_| EINVAL)?;
        let len = u32::try_from(len).map_err(|_| EINVAL)?;
        // SAFETY: the device is live (`&NetDev`); `alloc_skb` may be called in any context with
        // GFP_ATOMIC.
        let p = unsafe { b::rvr_alloc_tx_skb(ndev.as_raw(), head, len) };
        // SAFETY: a non-null result is a fresh skb that we own.
        unsafe { Skb::from_raw(p) }.ok_or(ENOMEM)
    }

    /// A new skb holding a copy of `pkt`, an IP packet, with the network header at its start (as
    /// a looped-back packet, or a test, hands it to [`Skb::parse_roce`]).
    pub fn from_ip_packet(pkt: &[u8]) -> Result<Skb> {
        let mut skb = Skb::alloc(pkt.len())?;
        skb.put(pkt.len())?.copy_from_slice(pkt);
        skb.reset_network_header();
        Ok(skb)
    }

    /// Frees the skb as successfully processed (`consume_skb`: the kernel's drop tracing does
    /// not count it as a drop).
    pub fn consume(self) {
        // SAFETY: we own the skb (type invariant) and give it up here.
        unsafe { b::consume_skb(self.into_raw()) };
    }

    /// The skb's fields, for the accessors that only read them: plain field reads in Rust
    /// rather than a call into C for each (several a packet).
    fn fields(&self) -> &b::sk_buff {
        // SAFETY: the skb is live and exclusively ours (type invariant), so no other context
        // writes its fields; every caller reads a field and lets the borrow go before any call
        // into C on the skb.
        unsafe { self.0.as_ref() }
    }

    /// The number of bytes from `skb->data` to the end of the packet (`skb->len`).
    pub fn len(&self) -> usize {
        self.fields().len as usize
    }

    /// The length of the linear part from `skb->data` (`skb_headlen`).
    pub(crate) fn headlen(&self) -> usize {
        let f = self.fields();
        f.len.saturating_sub(f.data_len) as usize
    }

    /// Whether the skb holds no bytes after `skb->data`.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Makes the whole packet linear (`skb_linearize`); may allocate (atomically).
    pub fn linearize(&mut self) -> Result {
        // SAFETY: we own the skb exclusively (`&mut self`).
        kernel::error::to_result(unsafe { b::rvr_skb_linearize(self.as_raw()) })
    }

    /// The linear bytes from `skb->data` (`skb_headlen`; the whole packet after
    /// [`Skb::linearize`]).
    pub fn data(&self) -> &[u8] {
        // SAFETY: the skb is live; `data .. data + headlen` is its linear area, which does not
        // change while we borrow the skb (every mutation takes `&mut self`).
        unsafe { core::slice::from_raw_parts(self.fields().data, self.headlen()) }
    }

    /// The linear bytes from `skb->data`, writable; `None` when a clone shares them (a packet
    /// tap's copy of a received packet, say), which may be reading them on another CPU.
    pub(crate) fn data_mut(&mut self) -> Option<&mut [u8]> {
        let mut len = 0u32;
        // SAFETY: the skb is live.
        let p = unsafe { b::rvr_skb_linear_unshared(self.as_raw(), &mut len) };
        if p.is_null() {
            return None;
        }
        // SAFETY: as in `data`, and `&mut self` makes the access exclusive: no clone shares the
        // data (the helper returns NULL otherwise), and no one else holds the skb itself (a skb
        // we allocated is ours alone; the IP layer unshares a received one, `skb_share_check`),
        // so nothing else reads or writes the bytes meanwhile.
        Some(unsafe { core::slice::from_raw_parts_mut(p, len as usize) })
    }

    /// Lets go of what ties a received skb to the receive path's RCU read side (a route held
    /// without a reference, the conntrack entry), so that it may be kept past it.
    pub fn detach(&mut self) {
        // SAFETY: the skb is live and exclusively ours.
        unsafe { b::rvr_skb_detach(self.as_raw()) };
    }

    /// Whether more packets of one burst follow this received one: the UDP layer splits a GSO
    /// packet and hands the pieces to the encapsulation hook in turn, each still linked to the
    /// next (`skb->next`; a packet received alone is on no list).
    pub fn more_follow(&self) -> bool {
        // SAFETY: reading a member of the union is defined (plain data); `skb->next` shares it
        // with the red-black tree node of skbs kept in a tree (TCP's out-of-order queue), and a
        // packet the UDP layer hands over is on a list or none, so the list view is in use.
        !unsafe { self.fields().__bindgen_anon_1.__bindgen_anon_1.next }.is_null()
    }

    /// The net device the skb arrived on or leaves by (`skb->dev`; null if none).
    pub(crate) fn dev_raw(&self) -> *mut b::net_device {
        // SAFETY: reading either member of the union is defined (both are plain data); the
        // device is the member in use: `dev_scratch` is written only when a UDP socket's own
        // receive queue takes the packet, after the encapsulation hook, so a packet in the
        // hook, one kept in a QP's receive queue since, or one we built has its device there.
        unsafe {
            self.fields()
                .__bindgen_anon_1
                .__bindgen_anon_1
                .__bindgen_anon_1
                .dev
        }
    }

    /// The socket that owns the skb (`skb->sk`; null if none).
    pub(crate) fn sk_raw(&self) -> *mut b::sock {
        self.fields().sk
    }

    /// The EtherType of the packet's network protocol (`skb->protocol`: `ETH_P_IP`,
    /// `ETH_P_IPV6`), in host byte order.
    pub(crate) fn protocol(&self) -> u16 {
        // SAFETY: `headers` is the `struct_group` view of the same bytes as the anonymous struct
        // beside it; all its fields are integers, so any bytes are a valid value.
        u16::from_be(unsafe { self.fields().__bindgen_anon_4.headers.as_ref() }.protocol)
    }

    /// Whether the skb arrived on (or is bound to) the net device `ndev` (`skb->dev`).
    pub fn came_from(&self, ndev: &NetDev) -> bool {
        self.dev_raw() == ndev.as_raw()
    }

    /// Whether the skb is for the net device `ndev`: it arrived on it, or it came over a
    /// loopback device to one of `ndev`'s addresses (the host talking to itself). RCU read side
    /// (the receive path).
    pub fn arrived_for(&self, ndev: &NetDev) -> bool {
        // SAFETY: the skb is live (type invariant); the helper reads its headers and looks the
        // address up under the caller's RCU read side.
        self.came_from(ndev) || unsafe { b::rvr_skb_local_for(self.as_raw(), ndev.as_raw()) }
    }

    /// Free bytes after the tail of a linear skb (`skb_tailroom`; 0 when non-linear).
    fn tailroom(&self) -> usize {
        let f = self.fields();
        if f.data_len != 0 {
            return 0;
        }
        // On 64-bit `tail` and `end` are offsets from `head` (`sk_buff_data_t`).
        f.end.saturating_sub(f.tail) as usize
    }

    /// Free bytes before `skb->data` (`skb_headroom`).
    fn headroom(&self) -> usize {
        let f = self.fields();
        (f.data as usize).saturating_sub(f.head as usize)
    }

    /// Appends `len` bytes at the tail and returns them (uninitialised contents are zeroed).
    /// `EMSGSIZE` if the tailroom is too small.
    pub(crate) fn put(&mut self, len: usize) -> Result<&mut [u8]> {
        let n = u32::try_from(len).map_err(|_| EMSGSIZE)?;
        if self.tailroom() < len {
            return Err(EMSGSIZE);
        }
        // SAFETY: we checked the tailroom, so `skb_put` does not panic; it returns `len` bytes.
        let p = unsafe { b::skb_put(self.as_raw(), n) }.cast::<u8>();
        // SAFETY: `p .. p + len` lies in the skb's buffer and is exclusively ours.
        let s = unsafe { core::slice::from_raw_parts_mut(p, len) };
        s.fill(0);
        Ok(s)
    }

    /// Appends `len` bytes at the tail, written by `f` through a [`Fill`] (no pass zeroes them
    /// first); any bytes `f` leaves unwritten are zeroed. Returns what `f` returns; the bytes
    /// stay appended when `f` fails. `EMSGSIZE` if the tailroom is too small.
    pub(crate) fn put_with<R>(
        &mut self,
        len: usize,
        f: impl FnOnce(&mut Fill<'_>) -> Result<R>,
    ) -> Result<R> {
        let n = u32::try_from(len).map_err(|_| EMSGSIZE)?;
        if self.tailroom() < len {
            return Err(EMSGSIZE);
        }
        // SAFETY: we checked the tailroom, so `skb_put` does not panic; it returns `len` bytes.
        let p = unsafe { b::skb_put(self.as_raw(), n) }.cast::<MaybeUninit<u8>>();
        // SAFETY: `p .. p + len` lies in the skb's buffer and is exclusively ours while `self` is
        // borrowed; any bytes are valid `MaybeUninit`s.
        let buf = unsafe { core::slice::from_raw_parts_mut(p, len) };
        let mut fill = Fill::new(buf);
        let r = f(&mut fill);
        // The skb's data is read as bytes from here on: none may stay uninitialised. Trust the
        // count only of the fill we made (`f` could have swapped in another).
        let filled = fill.filled_over(p, len).unwrap_or(0);
        // A writer that fills every byte costs no `memset` call.
        if filled < len {
            // SAFETY: `filled < len`, so `p + filled .. p + len` lies in the bytes `skb_put`
            // gave; `fill` is not used again.
            unsafe { core::ptr::write_bytes(p.add(filled), 0, len - filled) };
        }
        r
    }

    /// Moves `skb->data` back by `len` bytes of headroom (`skb_push`) and returns the new start.
    /// `EMSGSIZE` if the headroom is too small.
    fn push_raw(&mut self, len: usize) -> Result<*mut u8> {
        let n = u32::try_from(len).map_err(|_| EMSGSIZE)?;
        if self.headroom() < len {
            return Err(EMSGSIZE);
        }
        // SAFETY: the headroom was checked, so `skb_push` does not panic.
        Ok(unsafe { b::skb_push(self.as_raw(), n) }.cast::<u8>())
    }

    /// Prepends `N` bytes and returns them, zeroed (a fresh skb's headroom is uninitialised). A
    /// header's size is fixed, so the zeroing is a few stores, not a `memset` call. `EMSGSIZE`
    /// if the headroom is too small.
    pub(crate) fn push<const N: usize>(&mut self) -> Result<&mut [u8; N]> {
        let p = self.push_raw(N)?.cast::<[u8; N]>();
        // SAFETY: `p .. p + N` is the new start of the linear data, exclusively ours while `self`
        // is borrowed; an array of bytes has alignment 1.
        unsafe { p.write([0; N]) };
        // SAFETY: as above, and the bytes are now initialised.
        Ok(unsafe { &mut *p })
    }

    /// Removes `len` bytes from the start (`skb_pull`); `EINVAL` if the linear part is shorter.
    pub(crate) fn pull(&mut self, len: usize) -> Result {
        if len > self.headlen() {
            return Err(EINVAL);
        }
        // SAFETY: `len` bytes are in the linear area (checked), so `skb_pull` succeeds.
        unsafe { b::skb_pull(self.as_raw(), len as u32) };
        Ok(())
    }

    /// Marks the current `skb->data` as the network header.
    pub(crate) fn reset_network_header(&mut self) {
        // SAFETY: the skb is live and exclusively ours.
        unsafe { b::rvr_skb_reset_network_header(self.as_raw()) };
    }

    /// Moves `skb->data` back to the network header if it is past it (the UDP layer hands
    /// `encap_rcv` the skb with `data` at the UDP header). `EINVAL` if the network header lies
    /// after `data`.
    fn push_to_network_header(&mut self) -> Result {
        // `network_header` is an offset from `head` (`skb_network_header` is `head` plus it).
        // SAFETY: `headers` is the `struct_group` view of the same bytes as the anonymous struct
        // beside it; all its fields are integers, so any bytes are a valid value.
        let nh =
            usize::from(unsafe { self.fields().__bindgen_anon_4.headers.as_ref() }.network_header);
        let back = self.headroom().checked_sub(nh).ok_or(EINVAL)?;
        if back > 0 {
            // The IP layer's headers are still there: keep them.
            self.push_raw(back)?;
        }
        Ok(())
    }

    /// Appends the `len` bytes of `page` at `off` as the next fragment, holding a reference on
    /// the page until the skb is freed. `EMSGSIZE` when every fragment slot is taken.
    pub(super) fn add_page_frag(&mut self, page: &Page, off: usize, len: usize) -> Result {
        let off = u32::try_from(off).map_err(|_| EINVAL)?;
        let len = u32::try_from(len).map_err(|_| EINVAL)?;
        // SAFETY: the skb is exclusively ours; the page is live while borrowed, and the helper
        // takes the reference that keeps it live for the skb.
        kernel::error::to_result(unsafe {
            b::rvr_skb_add_page_frag(self.as_raw(), page.as_ptr(), off, len)
        })
    }

    /// Appends `bytes` (at most a cache line) as the last fragment, in fresh memory.
    /// `ENOMEM` when none is left, or no fragment slot.
    pub(super) fn append_frag_bytes(&mut self, bytes: &[u8]) -> Result {
        let len = u32::try_from(bytes.len()).map_err(|_| EINVAL)?;
        // SAFETY: the skb is exclusively ours.
        let p = unsafe { b::rvr_skb_add_trailer_frag(self.as_raw(), len) }.cast::<u8>();
        if p.is_null() {
            return Err(ENOMEM);
        }
        // SAFETY: the helper returned `bytes.len()` fresh bytes that only this skb refers to,
        // and no one reads them before the skb is sent.
        unsafe { core::ptr::copy_nonoverlapping(bytes.as_ptr(), p, bytes.len()) };
        Ok(())
    }

    /// `crc32_le` continued from `crc` over the bytes of every fragment.
    pub(super) fn frags_crc32_le(&self, crc: u32) -> u32 {
        self.frags_crc32(crc32::chosen(), crc, u32::MAX)
    }

    /// `crc32_le` continued from `crc` over the first `len` bytes of the fragments, with
    /// implementation `i`.
    pub(super) fn frags_crc32(&self, i: CrcImpl, crc: u32, len: u32) -> u32 {
        // SAFETY: the skb is live; its fragments' pages are held by it while it is borrowed.
        // The callback reads only the bytes it is given.
        unsafe { b::rvr_skb_frags_crc32_le(self.as_raw(), crc, len, crc32::c_callback(i)) }
    }

    /// Moves `skb->data` back to the network header without making the packet linear: its
    /// headers are read from the linear part ([`Skb::glance`]); the rest waits for
    /// [`Skb::to_ip_packet`].
    pub fn to_network_header(&mut self) -> Result {
        self.push_to_network_header()
    }

    /// A glance at the BTH of a packet [`Skb::to_network_header`] has prepared, whose payload
    /// may lie in fragments: the IP, UDP and transport headers must be in the linear part (as
    /// they are in every packet rvrdma builds); `None` otherwise, or when the packet is shorter
    /// than its UDP length says.
    pub fn glance(&self) -> Option<Glance> {
        let head = self.data();
        let span = ip_udp::udp_payload_span(head)?;
        if span.end > self.len() {
            return None;
        }
        Glance::of_prefix(head.get(span.start..)?, span.len())
    }

    /// Parses a received RoCEv2 packet: linearizes, moves `skb->data` back to the network header
    /// (as set by the IP layer, or by [`Skb::from_ip_packet`]), checks the IPv4 (IHL 5) or IPv6
    /// and UDP headers and lengths, and verifies the ICRC. `Err` for a malformed packet or a bad
    /// ICRC (the caller counts and drops it).
    pub fn parse_roce(&mut self) -> Result<RoceRx<'_>, RoceRxError> {
        self.to_ip_packet().map_err(RoceRxError::Skb)?;
        roce::parse_ip_packet(self.data())
    }

    /// [`Skb::parse_roce`] without the ICRC check ([`Skb::icrc_ok`] does it later).
    pub fn parse_roce_headers(&mut self) -> Result<RoceRx<'_>, RoceRxError> {
        self.to_ip_packet().map_err(RoceRxError::Skb)?;
        self.roce_headers()
    }

    /// Makes a received packet linear and moves `skb->data` back to the network header, for
    /// [`Skb::roce_udp_payload`] and [`Skb::roce_headers`].
    pub fn to_ip_packet(&mut self) -> Result {
        // Most packets are linear already: no call out for them.
        if !self.is_linear() {
            self.linearize()?;
        }
        self.push_to_network_header()
    }

    /// [`Skb::parse_roce_headers`] of a packet [`Skb::to_ip_packet`] has prepared.
    pub fn roce_headers(&self) -> Result<RoceRx<'_>, RoceRxError> {
        roce::parse_ip_headers(self.data())
    }

    /// The UDP payload of a packet [`Skb::to_ip_packet`] has prepared, found from its IP
    /// version and UDP length alone (`ip_udp::udp_payload`): enough for a glance at its BTH,
    /// where [`Skb::roce_headers`] checks the headers in full. `None` only where that fails
    /// too.
    pub fn roce_udp_payload(&self) -> Option<&[u8]> {
        crate::rvcore::wire::ip_udp::udp_payload(self.data())
    }

    /// Whether the ICRC of a packet [`Skb::parse_roce_headers`] or [`Skb::roce_head`] parsed
    /// (`at`: where it lies) is right: for a linear packet in one `crc32_le` call over it,
    /// masked in place unless a clone shares the data; else [`Skb::icrc_ok_in_pieces`].
    pub fn icrc_ok(&mut self, at: &IcrcAt) -> bool {
        if !self.is_linear() {
            return self.icrc_ok_in_pieces(at);
        }
        // The table CRC writes nothing: no need to own the data.
        if super::crc32::chosen() == super::crc32::CrcImpl::Sliced {
            return at.check(self.data());
        }
        match self.data_mut() {
            Some(pkt) => at.check_in_place(pkt),
            None => at.check(self.data()),
        }
    }

    /// [`Skb::icrc_ok`] without writing the packet: over the linear part, then the fragments
    /// up to the ICRC, which is read where it lies.
    pub fn icrc_ok_in_pieces(&self, at: &IcrcAt) -> bool {
        if self.is_linear() && at.value().is_some() {
            return at.check(self.data());
        }
        let Some((mut state, covered)) = at.state_of_head(self.data()) else {
            return false;
        };
        if covered < at.at() {
            // The rest lies in the fragments, which must be all of it, and readable.
            if self.has_frag_list() || !self.frags_readable() {
                return false;
            }
            let Ok(n) = u32::try_from(at.at() - covered) else {
                return false;
            };
            state = self.frags_crc32(crc32::chosen(), state, n);
        }
        let mut wire = [0u8; roce::ICRC_LEN];
        if self.copy_bits(at.at(), &mut wire).is_err() {
            return false;
        }
        !state == icrc::from_wire(wire)
    }

    /// Whether a packet [`Skb::to_network_header`] prepared, whose glance is `g`, holds its
    /// IP, UDP and transport headers in its linear part, and the rest in readable page
    /// fragments only (no list of further skbs): what [`Skb::roce_head`] and [`SkbBytes`]
    /// need.
    pub fn headers_linear(&self, g: &Glance) -> bool {
        let Some(span) = ip_udp::udp_payload_span(self.data()) else {
            return false;
        };
        span.start + g.opcode.info().header_len <= self.headlen()
            && !self.has_frag_list()
            && self.frags_readable()
    }

    /// Whether the CPU may read the fragments' pages (`skb_frags_readable`): not so for device
    /// memory a NIC received into (net_iov), which only its consumer reaches.
    pub fn frags_readable(&self) -> bool {
        // SAFETY: the skb is live.
        unsafe { b::rvr_skb_frags_readable(self.as_raw()) }
    }

    /// Whether every byte is in the linear part (`!skb_is_nonlinear`).
    pub fn is_linear(&self) -> bool {
        self.fields().data_len == 0
    }

    /// Whether the packet continues in a list of further skbs (`skb_has_frag_list`).
    pub fn has_frag_list(&self) -> bool {
        // SAFETY: the skb is live.
        unsafe { b::rvr_skb_has_frag_list(self.as_raw()) }
    }

    /// Copies the bytes starting `off` bytes after `skb->data` to `dst`, wherever they lie
    /// (`skb_copy_bits`); `EFAULT` when the packet is shorter.
    pub fn copy_bits(&self, off: usize, dst: &mut [u8]) -> Result {
        let (Ok(off), Ok(len)) = (u32::try_from(off), u32::try_from(dst.len())) else {
            return Err(EFAULT);
        };
        // SAFETY: the skb is live; `dst` is valid for `len` bytes of writes.
        kernel::error::to_result(unsafe {
            b::rvr_skb_copy_bits(self.as_raw(), off, dst.as_mut_ptr().cast(), len)
        })
    }

    /// The IP and UDP headers of a packet [`Skb::to_network_header`] has prepared, parsed from
    /// its linear part, which must hold them; the payload may lie in fragments. The ICRC is
    /// checked later ([`Skb::icrc_ok`] with [`IcrcAt::of_head`]).
    pub fn roce_head(&self) -> Result<RoceHead<'_>, RoceRxError> {
        roce::parse_ip_head(self.data(), self.len())
    }
}

/// Bytes of a received packet wherever they lie, linear part or fragments: `len` bytes from
/// `off` bytes after `skb->data`. A payload left in the pages it arrived in is copied out of
/// them ([`CopySrc`]) and never lent as a slice (their owner may write them at any time).
#[derive(Clone, Copy)]
pub struct SkbBytes<'a> {
    skb: &'a Skb,
    off: usize,
    len: usize,
}

impl<'a> SkbBytes<'a> {
    /// The bytes `range` (offsets from `skb->data`); `None` past the packet's end.
    pub fn new(skb: &'a Skb, range: core::ops::Range<usize>) -> Option<Self> {
        if range.start > range.end || range.end > skb.len() {
            return None;
        }
        Some(Self {
            skb,
            off: range.start,
            len: range.end - range.start,
        })
    }

    /// Copies the bytes to `dst`, which must be as long (`EINVAL` otherwise).
    pub fn copy_out(&self, dst: &mut [u8]) -> Result {
        if dst.len() != self.len {
            return Err(EINVAL);
        }
        self.skb.copy_bits(self.off, dst)
    }

    /// The bytes as a slice when they lie in the linear part.
    pub fn linear(&self) -> Option<&'a [u8]> {
        self.skb.data().get(self.off..self.off + self.len)
    }
}

impl CopySrc for SkbBytes<'_> {
    fn len(&self) -> usize {
        self.len
    }

    fn as_slice(&self) -> Option<&[u8]> {
        self.linear()
    }

    unsafe fn copy_to(&self, at: usize, dst: *mut u8, n: usize) -> Result {
        let (Ok(off), Ok(n)) = (u32::try_from(self.off + at), u32::try_from(n)) else {
            return Err(EFAULT);
        };
        // SAFETY: the skb is live; `dst` is valid for `n` bytes of writes (caller).
        kernel::error::to_result(unsafe {
            b::rvr_skb_copy_bits(self.skb.as_raw(), off, dst.cast(), n)
        })
    }
}

impl Drop for Skb {
    fn drop(&mut self) {
        // SAFETY: we own the skb (type invariant); it is freed exactly once here.
        unsafe { b::rvr_kfree_skb(self.0.as_ptr()) };
    }
}

/// An irq-safe FIFO of skbs (`struct sk_buff_head` with its internal spinlock); purged on drop.
///
/// # Invariants
///
/// `q` was initialised by `skb_queue_head_init` and holds only skbs owned by the queue.
#[pin_data(PinnedDrop)]
pub struct SkbQueue {
    #[pin]
    q: Opaque<b::sk_buff_head>,
}

// SAFETY: the queue owns its skbs, which may be freed on any CPU.
unsafe impl Send for SkbQueue {}
// SAFETY: every `&self` method goes through the queue's irq-safe internal lock.
unsafe impl Sync for SkbQueue {}

impl SkbQueue {
    /// An empty queue.
    pub fn new() -> impl PinInit<Self> {
        pin_init!(Self {
            q <- Opaque::ffi_init(|slot: *mut b::sk_buff_head| {
                // INVARIANT: initialised here, before any use.
                // SAFETY: `slot` is valid for writes and pinned.
                unsafe { b::rvr_skb_queue_head_init(slot) }
            }),
        })
    }

    /// Appends an skb (`skb_queue_tail`); callable in any context.
    pub fn push(&self, skb: Skb) {
        // SAFETY: the queue is initialised (type invariant); ownership of `skb` passes to it.
        unsafe { b::skb_queue_tail(self.q.get(), skb.into_raw()) };
    }

    /// Removes the oldest skb (`skb_dequeue`); callable in any context.
    pub fn pop(&self) -> Option<Skb> {
        // SAFETY: the queue is initialised; a dequeued skb is owned by the caller.
        unsafe { Skb::from_raw(b::skb_dequeue(self.q.get())) }
    }

    /// [`SkbQueue::pop`] after a lockless look ([`SkbQueue::is_empty`]), which spares the lock
    /// when the queue is empty, as it mostly is where this is used. An skb queued after the
    /// look is left for the caller's next look, so the caller must have one (a re-check after
    /// a flag the producer tests, or work the producer queues).
    pub fn pop_nonempty(&self) -> Option<Skb> {
        if self.is_empty() {
            return None;
        }
        self.pop()
    }

    /// The number of queued skbs (a snapshot, read without the lock, as
    /// `skb_queue_len_lockless`).
    pub fn len(&self) -> usize {
        // SAFETY: the queue is initialised (type invariant); `qlen` is written under its lock,
        // and a volatile read of the aligned `u32` is the `READ_ONCE` the lockless read takes.
        unsafe { core::ptr::read_volatile(&raw const (*self.q.get()).qlen) as usize }
    }

    /// Frees every queued skb (`skb_queue_purge`). Not with interrupts disabled: an skb's
    /// destructor may re-enable bottom halves.
    pub fn purge(&self) {
        // SAFETY: the queue is initialised and owns its skbs; purging frees each once.
        unsafe { b::rvr_skb_queue_purge(self.q.get()) };
    }

    /// Frees every queued skb as successfully processed ([`Skb::consume`]). Not with
    /// interrupts disabled, as [`SkbQueue::purge`].
    pub fn consume_all(&self) {
        while let Some(skb) = self.pop() {
            skb.consume();
        }
    }

    /// Whether the queue is empty (a snapshot).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[pinned_drop]
impl PinnedDrop for SkbQueue {
    fn drop(self: Pin<&mut Self>) {
        // SAFETY: the queue is initialised and owns its skbs; purging frees each once.
        unsafe { b::rvr_skb_queue_purge(self.q.get()) };
    }
}
