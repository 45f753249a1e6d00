#!/usr/bin/python3
"""roce_fuzz.py: crafted RoCEv2 packets with a valid ICRC, sent from a raw IP socket.

Each packet is an IPv4/UDP datagram to port 4791 whose RoCE part is random but mostly well
formed: a random opcode (RC, UC, UD, reserved values and CNP), random PSN, AckReq, SE, MigReq,
pad count and P_Key, the extension headers the opcode has (RETH, AETH, AtomicETH,
AtomicAckETH, DETH, ImmDt, IETH, FETH) with random fields (R_Keys, addresses, lengths, MSNs,
syndromes, Q_Keys), and a payload of random length (sometimes empty, longer than the victims'
path MTU, or cut in the middle of a header; at most what a 1500-byte link carries). Most
packets name one of the --qpns (the victims' QPs, with the source address of their real peer);
the rest a random QP number.

The ICRC is computed as RoCEv2 defines it (IBA A17.3.3: CRC-32 over 8 bytes of 0xFF, the IP
and UDP headers and the BTH with their variant fields masked, then the rest), so packets get
past the ICRC check and into the transport. To prove that, the run starts with --probe packets
to a QP number nobody has (the device must count them as for no QP, not as ICRC errors) and
--bad-icrc packets whose ICRC is wrong on purpose (counted as ICRC errors).

Prints, on its last line: "sent N probe P bad_icrc B" (JSON-free, for the shell).
usage: roce_fuzz.py --src IP --dst IP --qpns N,N,... [--count N] [--seed S]"""
import argparse
import random
import socket
import struct
import sys
import zlib

ROCE_PORT = 4791
PROBE_QPN = 0xABCDE  # no device allocates QP numbers this high this early

# Opcode -> extension headers after the BTH, in wire order.
R, A, AT, AA, D, I, IE, F = "reth", "aeth", "atomic", "atomic_ack", "deth", "imm", "ieth", "feth"
LAYOUT = {
    0x00: [], 0x01: [], 0x02: [], 0x03: [I], 0x04: [], 0x05: [I],
    0x06: [R], 0x07: [], 0x08: [], 0x09: [I], 0x0A: [R], 0x0B: [R, I],
    0x0C: [R], 0x0D: [A], 0x0E: [], 0x0F: [A], 0x10: [A], 0x11: [A], 0x12: [A, AA],
    0x13: [AT], 0x14: [AT], 0x16: [IE], 0x17: [IE], 0x1C: [F, R], 0x1D: [R],
    0x20: [], 0x21: [], 0x22: [], 0x23: [I], 0x24: [], 0x25: [I],
    0x26: [R], 0x27: [], 0x28: [], 0x29: [I], 0x2A: [R], 0x2B: [R, I],
    0x64: [D], 0x65: [D, I],
    0x81: [],
}
SIZES = {R: 16, A: 4, AT: 28, AA: 8, D: 8, I: 4, IE: 4, F: 4}


def ext(kind, rng, qkeys):
    """Random bytes for one extension header, with fields a peer might send."""
    if kind == R:
        va = rng.choice([0, rng.getrandbits(64), rng.getrandbits(32) << 12])
        length = rng.choice([0, 1, 8, 4096, 65536, rng.getrandbits(32)])
        return struct.pack(">QII", va, rng.getrandbits(32), length)
    if kind == A:
        syndrome = rng.choice([0x00, 0x1F, 0x20, 0x60, 0x61, 0x62, 0x63, 0x64, rng.getrandbits(8)])
        return struct.pack(">I", syndrome << 24 | rng.getrandbits(24))
    if kind == AT:
        va = rng.choice([rng.getrandbits(64), rng.getrandbits(64) & ~7])
        return struct.pack(">QIQQ", va, rng.getrandbits(32), rng.getrandbits(64),
                           rng.getrandbits(64))
    if kind == D:
        return struct.pack(">II", rng.choice(qkeys + [rng.getrandbits(32)]), rng.getrandbits(24))
    return rng.randbytes(SIZES[kind])


def roce_packet(rng, qpn, qkeys):
    """BTH + extension headers + payload + pad for a random opcode (ICRC not yet added)."""
    if rng.random() < 0.05:
        opcode = rng.getrandbits(8)  # anything, reserved values included
    else:
        opcode = rng.choice(list(LAYOUT))
    layout = LAYOUT.get(opcode, [])
    # At most what fits a 1500-byte link with the largest headers (a raw socket does not
    # fragment a DF packet); 1100..1400 is still more than the victims' path MTU of 1024.
    payload_len = rng.choice([0, 0, 1, 4, 8, 100, 1024, 1400, rng.randrange(0, 1400)])
    pad = (-payload_len) % 4 if rng.random() < 0.9 else rng.getrandbits(2)
    flags = rng.getrandbits(1) << 7 | rng.getrandbits(1) << 6 | pad << 4  # SE, M, PadCnt, TVer 0
    pkey = 0xFFFF if rng.random() < 0.9 else rng.getrandbits(16)
    psn = rng.getrandbits(24)
    ack_req = rng.getrandbits(1)
    bth = struct.pack(">BBHII", opcode, flags, pkey, qpn & 0xFFFFFF, ack_req << 31 | psn)
    body = b"".join(ext(k, rng, qkeys) for k in layout)
    body += rng.randbytes(min(payload_len, 64))
    body += b"\x5a" * max(0, payload_len - 64)
    body += bytes(pad)
    if rng.random() < 0.03:
        body = body[:rng.randrange(0, max(1, len(body)))]  # cut anywhere, headers included
    return bth + body


def icrc(ip_hdr, udp_hdr, roce):
    """The RoCEv2 ICRC of an IPv4 packet, as its 4 wire bytes."""
    ip = bytearray(ip_hdr)
    ip[1] = 0xFF  # TOS
    ip[8] = 0xFF  # TTL
    ip[10:12] = b"\xff\xff"  # header checksum
    udp = bytearray(udp_hdr)
    udp[6:8] = b"\xff\xff"  # UDP checksum
    bth = bytearray(roce[:12])
    if len(bth) == 12:
        bth[4] = 0xFF  # FECN, BECN, reserved
    crc = zlib.crc32(b"\xff" * 8 + bytes(ip) + bytes(udp) + bytes(bth) + roce[12:])
    return struct.pack("<I", crc)


def datagram(rng, src, dst, roce, good_icrc=True):
    """The whole IPv4 packet (the kernel keeps the header as given: ID non-zero)."""
    udp_len = 8 + len(roce) + 4
    total = 20 + udp_len
    ip_id = rng.randrange(1, 0x10000)
    ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, total, ip_id, 0x4000, 64, socket.IPPROTO_UDP, 0,
                     socket.inet_aton(src), socket.inet_aton(dst))
    udp = struct.pack(">HHHH", rng.randrange(49152, 65536), ROCE_PORT, udp_len, 0)
    crc = icrc(ip, udp, roce)
    if not good_icrc:
        crc = bytes(b ^ 0xFF for b in crc)
    return ip + udp + roce + crc


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--src", required=True, help="source IPv4 address (the victims' peer)")
    p.add_argument("--dst", required=True, help="destination IPv4 address (the victims' host)")
    p.add_argument("--qpns", default="", help="QP numbers to aim at, comma separated")
    p.add_argument("--qkeys", default="", help="Q_Keys to use in DETHs, comma separated")
    p.add_argument("--count", type=int, default=100000, help="fuzzed packets (default 100000)")
    p.add_argument("--probe", type=int, default=20, help="well-formed packets to no QP")
    p.add_argument("--bad-icrc", type=int, default=20, help="packets with a wrong ICRC")
    p.add_argument("--seed", type=int, default=None)
    a = p.parse_args()
    seed = a.seed if a.seed is not None else random.randrange(1 << 32)
    print("# seed %d" % seed, flush=True)
    rng = random.Random(seed)
    qpns = [int(q, 0) for q in a.qpns.split(",") if q]
    qkeys = [int(q, 0) for q in a.qkeys.split(",") if q] or [0]
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    dst = (a.dst, 0)

    def send(pkt):
        while True:
            try:
                s.sendto(pkt, dst)
                return
            except BlockingIOError:
                continue
            except OSError as ex:
                if ex.errno == 105:  # ENOBUFS: the qdisc is full, try again
                    continue
                raise

    for _ in range(a.probe):
        # A Send Only to nobody: a valid packet the device must count as for no QP.
        roce = struct.pack(">BBHII", 0x04, 0, 0xFFFF, PROBE_QPN, 0) + b"probe!!!"
        send(datagram(rng, a.src, a.dst, roce))
    for _ in range(a.bad_icrc):
        roce = roce_packet(rng, rng.choice(qpns or [PROBE_QPN]), qkeys)
        send(datagram(rng, a.src, a.dst, roce, good_icrc=False))
    for i in range(a.count):
        qpn = rng.choice(qpns) if qpns and rng.random() < 0.85 else rng.getrandbits(24)
        send(datagram(rng, a.src, a.dst, roce_packet(rng, qpn, qkeys)))
    print("sent %d probe %d bad_icrc %d" % (a.count, a.probe, a.bad_icrc), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
