//! The RoCEv2 invariant CRC (ICRC, IBA 7.8.1 and RoCEv2 annex A17.3.3).
//!
//! The ICRC is the IEEE 802.3 CRC-32 (polynomial 0x04C11DB7, processed reflected as
//! 0xEDB88320, initial value 0xFFFF_FFFF, final XOR 0xFFFF_FFFF: the same CRC as the Ethernet
//! FCS and zlib's `crc32`) computed over:
//!
//! 1. 8 bytes of `0xFF` standing in for the InfiniBand LRH, which RoCEv2 does not have;
//! 2. the IP header with the fields that routers change masked to all ones: IPv4 TOS (DSCP and
//!    ECN), TTL and header checksum; IPv6 traffic class, flow label and hop limit;
//! 3. the UDP header with the checksum masked to all ones (the UDP length is covered);
//! 4. the BTH with byte 4 (FECN, BECN and the reserved bits, IBA "resv8a") masked to all ones;
//! 5. everything after the BTH up to the ICRC: extension headers, payload and pad bytes.
//!
//! The 32-bit result is sent least significant byte first (as the Ethernet FCS is), i.e. the
//! four ICRC bytes are `icrc.to_le_bytes()`; see [`to_wire`] / [`from_wire`].
//!
//! How this was established: Linux's rdma_rxe (`drivers/infiniband/sw/rxe/rxe_icrc.c`) starts
//! from the CRC state `0xDEBB20E3` (the state after feeding eight `0xFF` bytes to a CRC started
//! at `0xFFFF_FFFF`, see [`ICRC_SEED`]), runs `crc32_le` (a reflected CRC update without
//! pre/post inversion) over a masked copy of the IP, UDP and BTH headers, then over the rest of
//! the headers and payload + pad, inverts the result and stores it as a native `u32` (little
//! endian on the x86/arm64 hosts rxe runs on). The unit tests check this against an independent
//! bitwise computation and against a RoCEv2 CNP captured from a ConnectX-4 Lx.
//!
//! IPv4 options are not supported (rxe does not support them either): the kernel shell should
//! drop RoCEv2 packets whose IPv4 IHL is not 5.

/// The CRC-32 polynomial, reflected (bit-reversed 0x04C11DB7).
pub const CRC32_POLY_REFLECTED: u32 = 0xEDB8_8320;

/// Length of the ICRC trailer in bytes.
pub const ICRC_LEN: usize = 4;

/// Length of the IPv4 header the ICRC covers (no options).
pub const IPV4_HEADER_LEN: usize = 20;
/// Length of the IPv6 header the ICRC covers (no extension headers).
pub const IPV6_HEADER_LEN: usize = 40;
/// Length of the UDP header.
pub const UDP_HEADER_LEN: usize = 8;
/// Length of the BTH.
pub const BTH_LEN: usize = 12;

/// Builds the byte-at-a-time lookup table of the reflected CRC-32.
const fn build_table() -> [u32; 256] {
    let mut table = [0u32; 256];
    let mut i = 0usize;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ CRC32_POLY_REFLECTED
            } else {
                c >> 1
            };
            k += 1;
        }
        table[i] = c;
        i += 1;
    }
    table
}

/// Lookup table of the reflected CRC-32, built at compile time.
pub const CRC32_TABLE: [u32; 256] = build_table();

/// Feeds `data` into the raw CRC state `state` (reflected CRC-32 update with no pre/post
/// inversion, like Linux's `crc32_le`). A standard CRC-32 is `!crc32_update(!0, data)`.
pub const fn crc32_update(state: u32, data: &[u8]) -> u32 {
    let mut crc = state;
    let mut i = 0usize;
    while i < data.len() {
        let idx = ((crc ^ data[i] as u32) & 0xFF) as usize;
        crc = (crc >> 8) ^ CRC32_TABLE[idx];
        i += 1;
    }
    crc
}

/// Bytes [`crc32_update_sliced`] takes at a time.
const SLICE: usize = 16;

/// Builds the slicing-by-16 tables: `[k][b]` is the CRC state of byte `b` followed by `k` zero
/// bytes, so that sixteen table reads advance the CRC by sixteen bytes.
const fn build_sliced_tables() -> [[u32; 256]; SLICE] {
    let mut t = [[0u32; 256]; SLICE];
    t[0] = CRC32_TABLE;
    let mut k = 1;
    while k < SLICE {
        let mut i = 0usize;
        while i < 256 {
            let prev = t[k - 1][i];
            t[k][i] = (prev >> 8) ^ CRC32_TABLE[(prev & 0xFF) as usize];
            i += 1;
        }
        k += 1;
    }
    t
}

/// The slicing-by-16 tables of the reflected CRC-32 (16 KiB), built at compile time. A
/// `static`, not a `const`, so that every use reads the one copy.
pub static CRC32_SLICED: [[u32; 256]; SLICE] = build_sliced_tables();

/// [`crc32_update`] sixteen bytes at a time (slicing-by-16): the same result, with a table
/// read per byte and no carry-less multiply. Where the CPU's carry-less multiply is emulated
/// (QEMU without KVM), this is faster than the kernel's folding `crc32_le`; the driver
/// measures both when it loads and keeps the faster. Sixteen bytes a step rather than eight
/// halve the loop's own work and the loads of the data.
pub fn crc32_update_sliced(state: u32, data: &[u8]) -> u32 {
    let (chunks, rest) = data.as_chunks::<SLICE>();
    let mut crc = state;
    for c in chunks {
        crc = sliced_step(crc, c, [0, 0]);
    }
    crc32_update(crc, rest)
}

/// One step of [`crc32_update_sliced`]: the state after the 16-byte chunk `c` with the bits of
/// `mask` (its low and high eight bytes as little-endian words) set.
#[inline(always)]
fn sliced_step(crc: u32, c: &[u8; SLICE], mask: [u64; 2]) -> u32 {
    let t = &CRC32_SLICED;
    let lo = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]) | mask[0];
    let lo = lo ^ u64::from(crc);
    let hi = u64::from_le_bytes([c[8], c[9], c[10], c[11], c[12], c[13], c[14], c[15]]) | mask[1];
    // Byte `i` of `lo` has 15 - i bytes after it in the chunk, byte `i` of `hi` 7 - i.
    let mut acc = 0u32;
    let mut i = 0;
    while i < 8 {
        acc ^= t[SLICE - 1 - i][((lo >> (8 * i)) & 0xFF) as usize]
            ^ t[7 - i][((hi >> (8 * i)) & 0xFF) as usize];
        i += 1;
    }
    acc
}

/// The bits the ICRC masks ([`MASKED_V4`]) as [`crc32_update_sliced`]'s 16-byte chunks see them:
/// per chunk, its low and high eight bytes as little-endian words.
const CHUNK_MASKS_V4: [[u64; 2]; 3] = chunk_masks(&MASKED_V4);
/// [`CHUNK_MASKS_V4`] for IPv6 ([`MASKED_V6`]).
const CHUNK_MASKS_V6: [[u64; 2]; 4] = chunk_masks(&MASKED_V6);

/// Folds a list of masked bytes into per-chunk words (`N` chunks cover the last byte).
const fn chunk_masks<const N: usize, const M: usize>(masked: &[(usize, u8); M]) -> [[u64; 2]; N] {
    let mut out = [[0u64; 2]; N];
    let mut i = 0;
    while i < M {
        let (at, bits) = masked[i];
        let (chunk, within) = (at / SLICE, at % SLICE);
        out[chunk][within / 8] |= (bits as u64) << (8 * (within % 8));
        i += 1;
    }
    out
}

/// The ICRC's running CRC over `pkt`, a packet from its IP header (IPv4 if `ipv4`) at least its
/// IP, UDP and BT headers long, from [`ICRC_SEED`]: as [`mask_in_place`] and
/// [`crc32_update_sliced`] over the masked packet, without writing it (the masks are applied to
/// the words as they are loaded). `None` when `pkt` is too short.
pub fn icrc_state_sliced(pkt: &[u8], ipv4: bool) -> Option<u32> {
    let (fixed, masks): (usize, &[[u64; 2]]) = if ipv4 {
        (IPV4_FIXED, &CHUNK_MASKS_V4)
    } else {
        (IPV6_FIXED, &CHUNK_MASKS_V6)
    };
    if pkt.len() < fixed {
        return None;
    }
    let mut crc = ICRC_SEED;
    let mut rest = pkt;
    for m in masks {
        let Some((c, after)) = rest.split_first_chunk::<SLICE>() else {
            // A short packet (an ACK) ends inside the masked headers: its tail masked too.
            let mut tail = [0u8; SLICE];
            let tail = tail.get_mut(..rest.len())?;
            tail.copy_from_slice(rest);
            let bytes = [m[0].to_le_bytes(), m[1].to_le_bytes()];
            for (i, b) in tail.iter_mut().enumerate() {
                *b |= bytes[i / 8][i % 8];
            }
            return Some(crc32_update(crc, tail));
        };
        crc = sliced_step(crc, c, *m);
        rest = after;
    }
    Some(crc32_update_sliced(crc, rest))
}

/// The CRC state after feeding the 8 `0xFF` bytes that stand in for the LRH into a CRC-32
/// started at `0xFFFF_FFFF`. Equals `0xDEBB_20E3`, the seed rdma_rxe uses.
pub const ICRC_SEED: u32 = crc32_update(0xFFFF_FFFF, &[0xFF; 8]);

/// The IPv4 header as the ICRC sees it: TOS (byte 1), TTL (byte 8) and header checksum
/// (bytes 10-11) set to all ones.
pub const fn mask_ipv4(ip: &[u8; IPV4_HEADER_LEN]) -> [u8; IPV4_HEADER_LEN] {
    let mut m = *ip;
    m[1] = 0xFF;
    m[8] = 0xFF;
    m[10] = 0xFF;
    m[11] = 0xFF;
    m
}

/// The IPv6 header as the ICRC sees it: traffic class (low nibble of byte 0 and high nibble of
/// byte 1), flow label (rest of bytes 1-3) and hop limit (byte 7) set to all ones; the version
/// nibble, payload length, next header and addresses are kept.
pub const fn mask_ipv6(ip: &[u8; IPV6_HEADER_LEN]) -> [u8; IPV6_HEADER_LEN] {
    let mut m = *ip;
    m[0] |= 0x0F;
    m[1] = 0xFF;
    m[2] = 0xFF;
    m[3] = 0xFF;
    m[7] = 0xFF;
    m
}

/// The UDP header as the ICRC sees it: checksum (bytes 6-7) set to all ones.
pub const fn mask_udp(udp: &[u8; UDP_HEADER_LEN]) -> [u8; UDP_HEADER_LEN] {
    let mut m = *udp;
    m[6] = 0xFF;
    m[7] = 0xFF;
    m
}

/// The BTH as the ICRC sees it: byte 4 (FECN, BECN, reserved) set to all ones.
pub const fn mask_bth(bth: &[u8; BTH_LEN]) -> [u8; BTH_LEN] {
    let mut m = *bth;
    m[4] = 0xFF;
    m
}

/// An ICRC computation in progress. Feed the masked prefix with one of the `update_*_prefix`
/// methods (or the individual `update_ipv4`/`update_ipv6`, `update_udp`, `update_bth`), then
/// the bytes after the BTH up to the ICRC with [`Icrc::update`] in as many pieces as
/// convenient (e.g. skb fragments), then [`Icrc::finish`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Icrc {
    state: u32,
}

impl Default for Icrc {
    fn default() -> Icrc {
        Icrc::new()
    }
}

impl Icrc {
    /// A computation with the 8-byte LRH stand-in already fed (state [`ICRC_SEED`]).
    pub const fn new() -> Icrc {
        Icrc { state: ICRC_SEED }
    }

    /// Feeds bytes unmodified.
    pub fn update(&mut self, data: &[u8]) {
        self.state = crc32_update(self.state, data);
    }

    /// Feeds an IPv4 header (20 bytes, no options) with TOS, TTL and checksum masked.
    pub fn update_ipv4(&mut self, ip: &[u8; IPV4_HEADER_LEN]) {
        self.update(&mask_ipv4(ip));
    }

    /// Feeds an IPv6 header (40 bytes) with traffic class, flow label and hop limit masked.
    pub fn update_ipv6(&mut self, ip: &[u8; IPV6_HEADER_LEN]) {
        self.update(&mask_ipv6(ip));
    }

    /// Feeds a UDP header with the checksum masked.
    pub fn update_udp(&mut self, udp: &[u8; UDP_HEADER_LEN]) {
        self.update(&mask_udp(udp));
    }

    /// Feeds a BTH with byte 4 (FECN/BECN/reserved) masked.
    pub fn update_bth(&mut self, bth: &[u8; BTH_LEN]) {
        self.update(&mask_bth(bth));
    }

    /// Feeds the masked IPv4 + UDP + BTH prefix.
    pub fn update_ipv4_prefix(
        &mut self,
        ip: &[u8; IPV4_HEADER_LEN],
        udp: &[u8; UDP_HEADER_LEN],
        bth: &[u8; BTH_LEN],
    ) {
        self.update_ipv4(ip);
        self.update_udp(udp);
        self.update_bth(bth);
    }

    /// Feeds the masked IPv6 + UDP + BTH prefix.
    pub fn update_ipv6_prefix(
        &mut self,
        ip: &[u8; IPV6_HEADER_LEN],
        udp: &[u8; UDP_HEADER_LEN],
        bth: &[u8; BTH_LEN],
    ) {
        self.update_ipv6(ip);
        self.update_udp(udp);
        self.update_bth(bth);
    }

    /// The ICRC value of everything fed so far (the state inverted). Does not consume the
    /// computation. Put it on the wire with [`to_wire`].
    pub const fn finish(&self) -> u32 {
        !self.state
    }
}

/// The four ICRC bytes as sent: least significant byte first.
pub const fn to_wire(icrc: u32) -> [u8; ICRC_LEN] {
    icrc.to_le_bytes()
}

/// The ICRC value carried by four received ICRC bytes.
pub const fn from_wire(bytes: [u8; ICRC_LEN]) -> u32 {
    u32::from_le_bytes(bytes)
}

/// The IP header of a RoCEv2 packet, for the whole-packet helpers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IpHeader<'a> {
    /// A 20-byte IPv4 header (no options).
    V4(&'a [u8; IPV4_HEADER_LEN]),
    /// A 40-byte IPv6 header.
    V6(&'a [u8; IPV6_HEADER_LEN]),
}

/// The masked IP, UDP and BTH headers one after the other, as the ICRC covers them: one
/// buffer, so that a CRC routine with a per-call cost (the kernel's, which may save the FPU
/// state for each call) runs once over the whole prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MaskedPrefix {
    buf: [u8; IPV6_HEADER_LEN + UDP_HEADER_LEN + BTH_LEN],
    len: usize,
}

impl MaskedPrefix {
    /// The prefix of a packet with headers `ip`, `udp` and `bth`.
    pub fn new(ip: IpHeader<'_>, udp: &[u8; UDP_HEADER_LEN], bth: &[u8; BTH_LEN]) -> Self {
        let mut buf = [0u8; IPV6_HEADER_LEN + UDP_HEADER_LEN + BTH_LEN];
        let ip_len = match ip {
            IpHeader::V4(h) => {
                buf[..IPV4_HEADER_LEN].copy_from_slice(&mask_ipv4(h));
                IPV4_HEADER_LEN
            }
            IpHeader::V6(h) => {
                buf[..IPV6_HEADER_LEN].copy_from_slice(&mask_ipv6(h));
                IPV6_HEADER_LEN
            }
        };
        let len = ip_len + UDP_HEADER_LEN + BTH_LEN;
        buf[ip_len..ip_len + UDP_HEADER_LEN].copy_from_slice(&mask_udp(udp));
        buf[ip_len + UDP_HEADER_LEN..len].copy_from_slice(&mask_bth(bth));
        MaskedPrefix { buf, len }
    }

    /// The masked bytes: 40 after an IPv4 header, 60 after an IPv6 one.
    pub fn as_bytes(&self) -> &[u8] {
        self.buf.get(..self.len).unwrap_or(&[])
    }
}

/// The bytes the ICRC masks in a packet laid out from its IP header, for IPv4: each byte's
/// offset and the bits set to one (the IPv4 TOS, TTL and header checksum, the UDP checksum,
/// BTH byte 4), as [`mask_ipv4`], [`mask_udp`] and [`mask_bth`] do.
const MASKED_V4: [(usize, u8); 7] = [
    (1, 0xFF),
    (8, 0xFF),
    (10, 0xFF),
    (11, 0xFF),
    (IPV4_HEADER_LEN + 6, 0xFF),
    (IPV4_HEADER_LEN + 7, 0xFF),
    (IPV4_HEADER_LEN + UDP_HEADER_LEN + 4, 0xFF),
];

/// [`MASKED_V4`] for IPv6 (traffic class, flow label, hop limit), as [`mask_ipv6`] does. The
/// longer list: [`Unmask`] keeps as many bytes.
const MASKED_V6: [(usize, u8); 8] = [
    (0, 0x0F),
    (1, 0xFF),
    (2, 0xFF),
    (3, 0xFF),
    (7, 0xFF),
    (IPV6_HEADER_LEN + 6, 0xFF),
    (IPV6_HEADER_LEN + 7, 0xFF),
    (IPV6_HEADER_LEN + UDP_HEADER_LEN + 4, 0xFF),
];

/// The original values of the bytes [`mask_in_place`] masked, to put back with
/// [`Unmask::restore`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use = "the packet stays masked until restored"]
pub struct Unmask {
    saved: [u8; MASKED_V6.len()],
    ipv4: bool,
}

/// Masks, in `pkt` (a packet from its IP header, at least the IP, UDP and BT headers long),
/// the bytes the ICRC does not cover, so that one CRC pass over `pkt` from [`ICRC_SEED`]
/// computes it; `None` (nothing changed) when `pkt` is too short.
pub fn mask_in_place(pkt: &mut [u8], ipv4: bool) -> Option<Unmask> {
    // On fixed-size headers with the constant tables, the loops unroll without bounds checks:
    // this runs for every packet sent and every packet received, and the restore after it.
    let saved = if ipv4 {
        mask_fixed(fixed_mut::<{ IPV4_FIXED }>(pkt)?, &MASKED_V4)
    } else {
        mask_fixed(fixed_mut::<{ IPV6_FIXED }>(pkt)?, &MASKED_V6)
    };
    Some(Unmask { saved, ipv4 })
}

/// Bytes from the IP header to the end of the BTH, over IPv4.
const IPV4_FIXED: usize = IPV4_HEADER_LEN + UDP_HEADER_LEN + BTH_LEN;
/// Bytes from the IP header to the end of the BTH, over IPv6.
const IPV6_FIXED: usize = IPV6_HEADER_LEN + UDP_HEADER_LEN + BTH_LEN;

/// The first `N` bytes of `pkt`, or `None` when it is shorter.
fn fixed_mut<const N: usize>(pkt: &mut [u8]) -> Option<&mut [u8; N]> {
    pkt.get_mut(..N)?.try_into().ok()
}

/// Masks the bytes `masked` lists in `h` and returns their values before.
fn mask_fixed<const N: usize, const M: usize>(
    h: &mut [u8; N],
    masked: &[(usize, u8); M],
) -> [u8; MASKED_V6.len()] {
    let mut saved = [0u8; MASKED_V6.len()];
    for ((at, bits), keep) in masked.iter().zip(saved.iter_mut()) {
        if let Some(b) = h.get_mut(*at) {
            *keep = *b;
            *b |= bits;
        }
    }
    saved
}

/// Puts back in `h` the bytes `masked` lists, from `saved`.
fn unmask_fixed<const N: usize, const M: usize>(
    h: &mut [u8; N],
    masked: &[(usize, u8); M],
    saved: &[u8; MASKED_V6.len()],
) {
    for ((at, _), keep) in masked.iter().zip(saved.iter()) {
        if let Some(b) = h.get_mut(*at) {
            *b = *keep;
        }
    }
}

impl Unmask {
    /// Puts back the bytes [`mask_in_place`] masked in `pkt`.
    pub fn restore(self, pkt: &mut [u8]) {
        if self.ipv4 {
            if let Some(h) = fixed_mut::<{ IPV4_FIXED }>(pkt) {
                unmask_fixed(h, &MASKED_V4, &self.saved);
            }
        } else if let Some(h) = fixed_mut::<{ IPV6_FIXED }>(pkt) {
            unmask_fixed(h, &MASKED_V6, &self.saved);
        }
    }
}

/// Computes the ICRC of a packet held in contiguous buffers: `ip` and `udp` headers and
/// `transport`, the bytes from the first byte of the BTH up to (not including) the ICRC.
/// `None` when `transport` is shorter than a BTH.
pub fn compute(ip: IpHeader<'_>, udp: &[u8; UDP_HEADER_LEN], transport: &[u8]) -> Option<u32> {
    let bth: &[u8; BTH_LEN] = transport.get(..BTH_LEN)?.try_into().ok()?;
    let rest = transport.get(BTH_LEN..)?;
    let mut c = Icrc::new();
    c.update(MaskedPrefix::new(ip, udp, bth).as_bytes());
    c.update(rest);
    Some(c.finish())
}

/// Checks the ICRC of a received packet: `udp_payload` spans from the BTH to the last byte of
/// the ICRC. False when it is too short to hold a BTH and an ICRC, or the ICRC does not match.
pub fn check(ip: IpHeader<'_>, udp: &[u8; UDP_HEADER_LEN], udp_payload: &[u8]) -> bool {
    let Some(split) = udp_payload.len().checked_sub(ICRC_LEN) else {
        return false;
    };
    let (transport, trailer) = udp_payload.split_at(split);
    let Ok(trailer) = <[u8; ICRC_LEN]>::try_from(trailer) else {
        return false;
    };
    compute(ip, udp, transport) == Some(from_wire(trailer))
}

/// Writes the ICRC into the last 4 bytes of `udp_payload` (which spans from the BTH to the last
/// byte of the ICRC) and returns it. `None` when `udp_payload` is too short to hold a BTH and an
/// ICRC.
pub fn fill(ip: IpHeader<'_>, udp: &[u8; UDP_HEADER_LEN], udp_payload: &mut [u8]) -> Option<u32> {
    let split = udp_payload.len().checked_sub(ICRC_LEN)?;
    let (transport, trailer) = udp_payload.split_at_mut(split);
    let icrc = compute(ip, udp, transport)?;
    trailer.copy_from_slice(&to_wire(icrc));
    Some(icrc)
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::vec::Vec;

    use super::*;

    /// An independent reference: bit-at-a-time CRC written from the polynomial, MSB-first on
    /// bit-reversed input (the unreflected formulation), so it shares no code with the table.
    fn reference_crc32_le(mut crc: u32, data: &[u8]) -> u32 {
        // Work in the unreflected domain: reverse the state, shift MSB first with 0x04C11DB7,
        // feed each input byte bit-reversed, reverse back.
        crc = crc.reverse_bits();
        for &byte in data {
            let b = byte.reverse_bits();
            crc ^= u32::from(b) << 24;
            for _ in 0..8 {
                crc = if crc & 0x8000_0000 != 0 {
                    (crc << 1) ^ 0x04C1_1DB7
                } else {
                    crc << 1
                };
            }
        }
        crc.reverse_bits()
    }

    /// rxe's steps, literally: seed 0xdebb20e3, copy IP+UDP+BTH into a pseudo header buffer,
    /// mask it field by field, CRC it, CRC the rest, invert, store native little-endian.
    fn reference_rxe_ipv4(ip_udp_transport: &[u8]) -> [u8; 4] {
        let hdr_size = 20 + 8;
        let mut pshdr = ip_udp_transport[..hdr_size + 12].to_vec();
        pshdr[8] = 0xFF; // ttl
        pshdr[10] = 0xFF; // check
        pshdr[11] = 0xFF;
        pshdr[1] = 0xFF; // tos
        pshdr[20 + 6] = 0xFF; // udp check
        pshdr[20 + 7] = 0xFF;
        pshdr[hdr_size + 4] = 0xFF; // bth qpn word |= ~QPN_MASK
        let mut crc = reference_crc32_le(0xDEBB_20E3, &pshdr);
        let end = ip_udp_transport.len() - 4;
        crc = reference_crc32_le(crc, &ip_udp_transport[hdr_size + 12..end]);
        (!crc).to_le_bytes()
    }

    fn hex(s: &str) -> Vec<u8> {
        let digits: Vec<u8> = s.bytes().filter(u8::is_ascii_hexdigit).collect();
        digits
            .chunks(2)
            .map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap())
            .collect()
    }

    #[test]
    fn table_crc_is_standard_crc32() {
        // The CRC-32 check value of "123456789".
        assert_eq!(!crc32_update(!0, b"123456789"), 0xCBF4_3926);
        assert_eq!(
            reference_crc32_le(!0, b"123456789"),
            crc32_update(!0, b"123456789")
        );
    }

    #[test]
    fn sliced_crc_is_the_table_crc() {
        assert_eq!(!crc32_update_sliced(!0, b"123456789"), 0xCBF4_3926);
        // Every length around a slice's edge, from unaligned starts.
        let data: Vec<u8> = (0..300u32)
            .map(|i| (i.wrapping_mul(167) >> 3) as u8)
            .collect();
        for start in 0..9 {
            for len in 0..data.len() - start {
                let d = &data[start..start + len];
                let seed = 0xDEBB_20E3 ^ (len as u32).wrapping_mul(0x9E37_79B9);
                assert_eq!(crc32_update_sliced(seed, d), crc32_update(seed, d));
            }
        }
        assert_eq!(CRC32_SLICED[0], CRC32_TABLE);
    }

    #[test]
    fn icrc_seed_is_rxe_0xdebb20e3() {
        assert_eq!(ICRC_SEED, 0xDEBB_20E3);
        assert_eq!(reference_crc32_le(0xFFFF_FFFF, &[0xFF; 8]), 0xDEBB_20E3);
    }

    /// A hand-built RC SEND ONLY with 5 bytes of payload over IPv4, checked against a literal
    /// re-enactment of rxe_icrc_generate.
    #[test]
    fn hand_built_ipv4_send_only_matches_rxe_steps() {
        let mut pkt = Vec::new();
        // IPv4: ver/ihl, tos (DSCP 26, ECN 2), total len, id, flags/frag, ttl, proto, csum, src, dst
        let payload = b"hello";
        let udp_len = 8 + 12 + 5 + 3 + 4;
        let total = 20 + udp_len;
        pkt.extend_from_slice(&[0x45, 0x6A]);
        pkt.extend_from_slice(&(total as u16).to_be_bytes());
        pkt.extend_from_slice(&[0x12, 0x34, 0x40, 0x00, 0x40, 0x11, 0xAB, 0xCD]);
        pkt.extend_from_slice(&[192, 168, 1, 1, 192, 168, 1, 2]);
        // UDP: sport, dport 4791, len, csum
        pkt.extend_from_slice(&[0xC3, 0x50, 0x12, 0xB7]);
        pkt.extend_from_slice(&(udp_len as u16).to_be_bytes());
        pkt.extend_from_slice(&[0x5A, 0x5A]);
        // BTH: RC SEND ONLY, SE, pad 3, P_Key ffff, FECN set, dqp 0x11, AckReq, PSN 0x123456
        pkt.extend_from_slice(&[0x04, 0xB0, 0xFF, 0xFF, 0x80, 0x00, 0x00, 0x11]);
        pkt.extend_from_slice(&[0x80, 0x12, 0x34, 0x56]);
        pkt.extend_from_slice(payload);
        pkt.extend_from_slice(&[0, 0, 0]);
        pkt.extend_from_slice(&[0, 0, 0, 0]);
        assert_eq!(pkt.len(), total);

        let expected = reference_rxe_ipv4(&pkt);
        let ip: [u8; 20] = pkt[..20].try_into().unwrap();
        let udp: [u8; 8] = pkt[20..28].try_into().unwrap();
        let icrc = fill(IpHeader::V4(&ip), &udp, &mut pkt[28..]).unwrap();
        assert_eq!(to_wire(icrc), expected);
        assert_eq!(&pkt[total - 4..], &expected);
        assert!(check(IpHeader::V4(&ip), &udp, &pkt[28..]));

        // The same via the incremental API, payload fed in odd pieces.
        let bth: [u8; 12] = pkt[28..40].try_into().unwrap();
        let mut c = Icrc::new();
        c.update_ipv4_prefix(&ip, &udp, &bth);
        c.update(&pkt[40..42]);
        c.update(&pkt[42..total - 4]);
        assert_eq!(c.finish(), icrc);
    }

    #[test]
    fn masked_prefix_is_the_three_masked_headers_in_order() {
        let ip4: [u8; IPV4_HEADER_LEN] = core::array::from_fn(|i| i as u8 + 1);
        let ip6: [u8; IPV6_HEADER_LEN] = core::array::from_fn(|i| 0x80 | i as u8);
        let udp: [u8; UDP_HEADER_LEN] = core::array::from_fn(|i| 0x40 + i as u8);
        let bth: [u8; BTH_LEN] = core::array::from_fn(|i| 0x20 + i as u8);
        let v4 = MaskedPrefix::new(IpHeader::V4(&ip4), &udp, &bth);
        let v6 = MaskedPrefix::new(IpHeader::V6(&ip6), &udp, &bth);
        let want4 = [&mask_ipv4(&ip4)[..], &mask_udp(&udp), &mask_bth(&bth)].concat();
        let want6 = [&mask_ipv6(&ip6)[..], &mask_udp(&udp), &mask_bth(&bth)].concat();
        assert_eq!(v4.as_bytes(), &want4[..]);
        assert_eq!(v6.as_bytes(), &want6[..]);
        let mut c = Icrc::new();
        c.update_ipv6_prefix(&ip6, &udp, &bth);
        let mut d = Icrc::new();
        d.update(v6.as_bytes());
        assert_eq!(c, d);
    }

    #[test]
    fn icrc_state_sliced_is_the_masked_crc_at_every_length() {
        for ipv4 in [true, false] {
            let fixed = if ipv4 { IPV4_FIXED } else { IPV6_FIXED };
            for fill in [0x00u8, 0x5A, 0xFF] {
                // Every length from the headers alone past the last masked chunk and beyond.
                for n in fixed..fixed + 70 {
                    let pkt: Vec<u8> = (0..n).map(|i| (i as u8).wrapping_mul(37) ^ fill).collect();
                    let mut m = pkt.clone();
                    let _ = mask_in_place(&mut m, ipv4).unwrap();
                    let want = crc32_update(ICRC_SEED, &m);
                    assert_eq!(
                        icrc_state_sliced(&pkt, ipv4),
                        Some(want),
                        "ipv4 {ipv4} n {n}"
                    );
                }
            }
            assert_eq!(icrc_state_sliced(&std::vec![0u8; fixed - 1], ipv4), None);
        }
    }

    #[test]
    fn mask_in_place_masks_what_the_masked_prefix_masks_and_restores() {
        for ipv4 in [true, false] {
            let ip_len = if ipv4 {
                IPV4_HEADER_LEN
            } else {
                IPV6_HEADER_LEN
            };
            let n = ip_len + UDP_HEADER_LEN + BTH_LEN;
            // Every byte value somewhere, and the bits the masks set both clear and set.
            for fill in [0x00u8, 0x5A, 0xFF] {
                let pkt: Vec<u8> = (0..n + 9)
                    .map(|i| (i as u8).wrapping_mul(37) ^ fill)
                    .collect();
                let ip = &pkt[..ip_len];
                let ip = if ipv4 {
                    IpHeader::V4(ip.try_into().unwrap())
                } else {
                    IpHeader::V6(ip.try_into().unwrap())
                };
                let udp: [u8; UDP_HEADER_LEN] = pkt[ip_len..ip_len + 8].try_into().unwrap();
                let bth: [u8; BTH_LEN] = pkt[ip_len + 8..n].try_into().unwrap();
                let want = MaskedPrefix::new(ip, &udp, &bth);
                let mut m = pkt.clone();
                let u = mask_in_place(&mut m, ipv4).unwrap();
                assert_eq!(&m[..n], want.as_bytes());
                assert_eq!(&m[n..], &pkt[n..]);
                u.restore(&mut m);
                assert_eq!(m, pkt);
            }
            let mut short = std::vec![0u8; n - 1];
            assert!(mask_in_place(&mut short, ipv4).is_none());
            assert!(short.iter().all(|b| *b == 0));
        }
    }

    #[test]
    fn masked_fields_do_not_change_icrc() {
        let mut pkt = hex("4500 0030 0001 4000 4011 0000 0a000001 0a000002
                           c000 12b7 001c 0000
                           1100 ffff 0000 0011 0000 0005 1f000001
                           00000000");
        let base = {
            let ip: [u8; 20] = pkt[..20].try_into().unwrap();
            let udp: [u8; 8] = pkt[20..28].try_into().unwrap();
            fill(IpHeader::V4(&ip), &udp, &mut pkt[28..]).unwrap()
        };
        // Change TOS/ECN, TTL, IP checksum, UDP checksum, FECN/BECN: ICRC stays.
        pkt[1] = 0x03;
        pkt[8] = 0x01;
        pkt[10] = 0x77;
        pkt[26] = 0x12;
        pkt[28 + 4] = 0xC0;
        let ip: [u8; 20] = pkt[..20].try_into().unwrap();
        let udp: [u8; 8] = pkt[20..28].try_into().unwrap();
        assert!(check(IpHeader::V4(&ip), &udp, &pkt[28..]));
        // Change the PSN: ICRC breaks.
        pkt[28 + 11] ^= 1;
        assert!(!check(IpHeader::V4(&ip), &udp, &pkt[28..]));
        assert_eq!(
            compute(IpHeader::V4(&ip), &udp, &pkt[28..pkt.len() - 4]).map(|c| c != base),
            Some(true)
        );
    }

    /// A RoCEv2 CNP captured from a Mellanox ConnectX-4 Lx, from Scapy's RoCE tests
    /// (github.com/secdev/scapy, test/contrib/roce.uts, "RoCE CNP captured on ConnectX-4 Lx"):
    /// ICRC bytes on the wire `82 fd 00 2a`.
    #[test]
    fn connectx4_lx_captured_cnp_icrc() {
        let frame = hex("e41d 2dab 2bc2 7cfe 9064 3b32 0800 45c2
                         003c 718c 4000 4011 9161 0a00 1101 0a00
                         1201 0000 12b7 0028 0000 8100 ffff 4000
                         0118 0000 0000 0000 0000 0000 0000 0000
                         0000 0000 0000 82fd 002a");
        let ip_pkt = &frame[14..];
        let ip: [u8; 20] = ip_pkt[..20].try_into().unwrap();
        let udp: [u8; 8] = ip_pkt[20..28].try_into().unwrap();
        let udp_payload = &ip_pkt[28..];
        assert!(check(IpHeader::V4(&ip), &udp, udp_payload));
        let icrc = compute(
            IpHeader::V4(&ip),
            &udp,
            &udp_payload[..udp_payload.len() - 4],
        );
        assert_eq!(icrc, Some(0x2A00_FD82));
        assert_eq!(to_wire(0x2A00_FD82), [0x82, 0xFD, 0x00, 0x2A]);
        assert_eq!(reference_rxe_ipv4(ip_pkt), [0x82, 0xFD, 0x00, 0x2A]);
    }

    #[test]
    fn ipv6_masks_traffic_class_flow_label_hop_limit() {
        let mut ip = [0u8; 40];
        ip[0] = 0x6A; // version 6, TC high nibble A
        ip[1] = 0xBC;
        ip[2] = 0xDE;
        ip[3] = 0xF0;
        ip[4] = 0;
        ip[5] = 24; // payload length
        ip[6] = 17; // next header UDP
        ip[7] = 64; // hop limit
        for (i, b) in ip[8..].iter_mut().enumerate() {
            *b = i as u8;
        }
        let m = mask_ipv6(&ip);
        assert_eq!(&m[..8], &[0x6F, 0xFF, 0xFF, 0xFF, 0, 24, 17, 0xFF]);
        assert_eq!(&m[8..], &ip[8..]);
        let udp = [0xC0, 0x00, 0x12, 0xB7, 0x00, 24, 0x12, 0x34];
        let mut transport = [0u8; 16];
        transport[0] = 0x11;
        transport[2] = 0xFF;
        transport[3] = 0xFF;
        let icrc = fill(IpHeader::V6(&ip), &udp, &mut transport).unwrap();
        // Reference: the whole masked stream through the bitwise CRC.
        let mut stream = std::vec![0xFFu8; 8];
        stream.extend_from_slice(&m);
        stream.extend_from_slice(&mask_udp(&udp));
        let mut bth = transport[..12].to_vec();
        bth[4] = 0xFF;
        stream.extend_from_slice(&bth);
        assert_eq!(!reference_crc32_le(!0, &stream), icrc);
        // Changing a masked field keeps it valid; changing an address breaks it.
        ip[1] = 0x00;
        ip[7] = 1;
        assert!(check(IpHeader::V6(&ip), &udp, &transport));
        ip[39] ^= 0x80;
        assert!(!check(IpHeader::V6(&ip), &udp, &transport));
    }

    #[test]
    fn short_inputs_do_not_panic() {
        let ip = [0u8; 20];
        let udp = [0u8; 8];
        for n in 0..16 {
            let mut buf = std::vec![0u8; n];
            assert!(!check(IpHeader::V4(&ip), &udp, &buf) || n >= 16);
            assert_eq!(fill(IpHeader::V4(&ip), &udp, &mut buf).is_some(), n >= 16);
        }
    }
}
