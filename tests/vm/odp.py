"""On-demand paging (IBV_ACCESS_ON_DEMAND) between two devices, data-checked, with the buffers'
pages taken away between transfers: madvise(MADV_DONTNEED) and munmap + mmap at the same address.

usage: odp.py DEV_A GID_A DEV_B GID_B

DEV_A (the client) and DEV_B (the server) each register an ODP MR over a 64 KiB anonymous
mapping of their own; RC QPs connect them. Each transfer is checked byte for byte through the
mapping itself (ctypes), so a write that went to a page the kernel had already taken away, or a
read of one, shows as wrong bytes. ibv_advise_mr is called through libibverbs' ibv_cmd_advise_mr
(rdma-core 44's rxe provider does not wire ibv_advise_mr up): a prefetch for writing must make the
pages resident in the process (mincore), one without faults must not.
Prints one "ok"/"not ok" line per test point (POINTS of them)."""
import ctypes
import os
import sys

import pyverbs.enums as e
from pyverbs.mr import MR
from pyverbs.wr import SGE, RecvWR, SendWR

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rcpair import Dev, Qp  # noqa: E402

POINTS = 10
SIZE = 65536
MSG = 8192
ODP = (e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ |
       e.IBV_ACCESS_REMOTE_ATOMIC | e.IBV_ACCESS_ON_DEMAND)
PROT_RW, MAP_PRIVATE, MAP_ANONYMOUS, MAP_FIXED, MADV_DONTNEED = 3, 0x02, 0x20, 0x10, 4

libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                      ctypes.c_long]
libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]

points = 0


def point(ok, desc, why=""):
    global points
    points += 1
    print(("ok " + desc) if ok else "not ok %s: %s" % (desc, why))


def amap(addr=0):
    """A fresh anonymous private mapping of SIZE bytes (at `addr` exactly, if given)."""
    flags = MAP_PRIVATE | MAP_ANONYMOUS | (MAP_FIXED if addr else 0)
    p = libc.mmap(addr or None, SIZE, PROT_RW, flags, -1, 0)
    if p in (None, ctypes.c_void_p(-1).value):
        raise OSError(ctypes.get_errno(), "mmap")
    return p


def dontneed(addr):
    if libc.madvise(addr, SIZE, MADV_DONTNEED) != 0:
        raise OSError(ctypes.get_errno(), "madvise")


def put(addr, data):
    ctypes.memmove(addr, data, len(data))


def get(addr, n):
    return ctypes.string_at(addr, n)


def pattern(seed, n=MSG):
    """`n` bytes no two 256-byte blocks of which are alike (up to 64 KiB): a wrong page, or any
    offset error, shows."""
    return bytes((i * 31 + seed * 7 + 1 + (i >> 8) * 0x9D) & 0xFF for i in range(n))


def diff(got, want):
    for i, (a, b) in enumerate(zip(got, want)):
        if a != b:
            return "first difference at byte %d: %#x, want %#x" % (i, a, b)
    return "lengths %d and %d" % (len(got), len(want))


def resident_kb(addr):
    """How many kB of [addr, addr + SIZE) are resident in the process (mincore)."""
    vec = (ctypes.c_ubyte * (SIZE // 4096))()
    if libc.mincore(addr, SIZE, vec) != 0:
        raise OSError(ctypes.get_errno(), "mincore")
    return 4 * sum(b & 1 for b in vec)


class Side:
    """A device with an ODP MR over its own mapping, and one RC QP."""

    def __init__(self, name, gid_index):
        self.dev = Dev(name, gid_index, mr_size=4096)
        self.buf = amap()
        self.mr = MR(self.dev.pd, SIZE, ODP, address=self.buf)
        self.qp = Qp(self.dev, depth=16)

    def poll(self, what):
        wc = self.qp.poll(20.0)
        if wc is None:
            raise RuntimeError("%s: no completion within 20 s" % what)
        return wc


def send(c, s, want, what):
    s.qp.qp.post_recv(RecvWR(num_sge=1, sg=[SGE(s.buf, MSG, s.mr.lkey)]))
    c.qp.qp.post_send(SendWR(opcode=e.IBV_WR_SEND, num_sge=1, sg=[SGE(c.buf, MSG, c.mr.lkey)]))
    wc, wr = c.poll(what), s.poll(what)
    got = get(s.buf, MSG)
    ok = wc.status == 0 and wr.status == 0 and got == want
    point(ok, what, "send %d, recv %d, %s" % (wc.status, wr.status, diff(got, want)))


def rdma(c, s, opcode, what):
    wr = SendWR(opcode=opcode, num_sge=1, sg=[SGE(c.buf, MSG, c.mr.lkey)])
    wr.set_wr_rdma(s.mr.rkey, s.buf)
    c.qp.qp.post_send(wr)
    return c.poll(what)


def held_points(c, s):
    """A Send and an RDMA Write from pinned memory (which rvrdma sends by reference to its pages
    when the shell turned tx_paged on) into ODP memory whose pages went: the receiver copies
    such a payload from the packet's fragments, faulting the target in first."""
    pinned = MR(c.dev.pd, MSG, e.IBV_ACCESS_LOCAL_WRITE)
    pinned.write(pattern(5), MSG)
    # New QPs: one whose payloads came from ODP memory copies its next ones without trying.
    qc, qs = Qp(c.dev, depth=16), Qp(s.dev, depth=16)
    qp_access = ODP & ~e.IBV_ACCESS_ON_DEMAND
    qc.connect(qs, access=qp_access)
    qs.connect(qc, access=qp_access)
    dontneed(s.buf)
    qs.qp.post_recv(RecvWR(num_sge=1, sg=[SGE(s.buf, MSG, s.mr.lkey)]))
    qc.qp.post_send(SendWR(opcode=e.IBV_WR_SEND, num_sge=1, sg=[SGE(pinned.buf, MSG, pinned.lkey)]))
    wc, wr = qc.poll(20.0), qs.poll(20.0)
    if wc is None or wr is None:
        raise RuntimeError("pinned send: no completion within 20 s")
    got_send = get(s.buf, MSG)
    pinned.write(pattern(6), MSG)
    dontneed(s.buf)
    w = SendWR(opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(pinned.buf, MSG, pinned.lkey)])
    w.set_wr_rdma(s.mr.rkey, s.buf)
    qc.qp.post_send(w)
    wc2 = qc.poll(20.0)
    if wc2 is None:
        raise RuntimeError("pinned write: no completion within 20 s")
    got_write = get(s.buf, MSG)
    ok = (wc.status == 0 and wr.status == 0 and got_send == pattern(5) and wc2.status == 0 and
          got_write == pattern(6))
    point(ok, "Send and RDMA Write of 8 KiB from pinned memory into ODP memory after "
          "MADV_DONTNEED of the target", "send %d/%d %s; write %d %s" %
          (wc.status, wr.status, diff(got_send, pattern(5)), wc2.status,
           diff(got_write, pattern(6))))
    pinned.close()


def caps(c):
    odp = c.dev.ctx.query_device_ex().odp_caps
    rc_want = (e.IBV_ODP_SUPPORT_SEND | e.IBV_ODP_SUPPORT_RECV | e.IBV_ODP_SUPPORT_WRITE |
               e.IBV_ODP_SUPPORT_READ | e.IBV_ODP_SUPPORT_ATOMIC | e.IBV_ODP_SUPPORT_SRQ_RECV)
    ud_want = e.IBV_ODP_SUPPORT_SEND | e.IBV_ODP_SUPPORT_RECV
    ok = (odp.general_caps & e.IBV_ODP_SUPPORT and odp.rc_odp_caps & rc_want == rc_want and
          odp.ud_odp_caps & ud_want == ud_want)
    point(bool(ok), "odp_caps: general IBV_ODP_SUPPORT, RC send/recv/write/read/atomic/srq, UD "
          "send/recv", "general %#x rc %#x ud %#x" % (odp.general_caps, odp.rc_odp_caps,
                                                      odp.ud_odp_caps))


class Advise:
    """libibverbs through ctypes, for ibv_cmd_advise_mr: its own context, PD and ODP MR."""

    class Sge(ctypes.Structure):
        _fields_ = [("addr", ctypes.c_uint64), ("length", ctypes.c_uint32),
                    ("lkey", ctypes.c_uint32)]

    def __init__(self, name):
        v = ctypes.CDLL("libibverbs.so.1", use_errno=True)
        for f, res in (("ibv_get_device_list", ctypes.c_void_p), ("ibv_open_device",
                       ctypes.c_void_p), ("ibv_alloc_pd", ctypes.c_void_p),
                       ("ibv_reg_mr", ctypes.c_void_p), ("ibv_get_device_name",
                       ctypes.c_char_p)):
            getattr(v, f).restype = res
        v.ibv_get_device_list.argtypes = [ctypes.c_void_p]
        v.ibv_get_device_name.argtypes = [ctypes.c_void_p]
        v.ibv_open_device.argtypes = [ctypes.c_void_p]
        v.ibv_alloc_pd.argtypes = [ctypes.c_void_p]
        v.ibv_reg_mr.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        v.ibv_cmd_advise_mr.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32,
                                        ctypes.c_void_p, ctypes.c_uint32]
        self.v = v
        n = ctypes.c_int(0)
        lst = ctypes.cast(v.ibv_get_device_list(ctypes.byref(n)), ctypes.POINTER(ctypes.c_void_p))
        devs = [lst[i] for i in range(n.value)]
        dev = next(d for d in devs if v.ibv_get_device_name(d).decode() == name)
        self.ctx = v.ibv_open_device(dev)
        self.pd = v.ibv_alloc_pd(self.ctx)
        self.buf = amap()
        self.mr = v.ibv_reg_mr(self.pd, self.buf, SIZE, ODP)
        if not self.mr:
            raise OSError(ctypes.get_errno(), "ibv_reg_mr")
        # struct ibv_mr: context, pd, addr, length (8 bytes each), handle, lkey.
        self.lkey = ctypes.c_uint32.from_address(self.mr + 36).value

    def advise(self, advice, flags, addr, length, lkey=None):
        sge = Advise.Sge(addr, length, self.lkey if lkey is None else lkey)
        return abs(self.v.ibv_cmd_advise_mr(self.pd, advice, flags, ctypes.byref(sge), 1))


def advise_points(name):
    a = Advise(name)
    before = resident_kb(a.buf)
    rc_nf = a.advise(e._IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT, e._IBV_ADVISE_MR_FLAG_FLUSH,
                     a.buf, SIZE)
    after_nf = resident_kb(a.buf)
    # Without FLUSH the prefetch is a best effort (rdma_rxe does it later, rvrdma at once); with
    # FLUSH the pages are in when the call returns.
    rc_async = a.advise(e._IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, 0, a.buf, SIZE // 2)
    rc_w = a.advise(e._IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, e._IBV_ADVISE_MR_FLAG_FLUSH, a.buf,
                    SIZE)
    after_w = resident_kb(a.buf)
    point(rc_nf == 0 and rc_async == 0 and rc_w == 0 and before == 0 and after_nf == 0 and
          after_w == SIZE // 1024,
          "advise_mr: PREFETCH_NO_FAULT faults nothing in, PREFETCH_WRITE makes the whole MR "
          "resident", "rc %d/%d/%d, resident %s -> %s -> %s kB" %
          (rc_nf, rc_async, rc_w, before, after_nf, after_w))
    bad_key = a.advise(e._IBV_ADVISE_MR_ADVICE_PREFETCH, e._IBV_ADVISE_MR_FLAG_FLUSH, a.buf, 64,
                       lkey=a.lkey ^ 0x80)
    past_end = a.advise(e._IBV_ADVISE_MR_ADVICE_PREFETCH, e._IBV_ADVISE_MR_FLAG_FLUSH,
                        a.buf + SIZE - 32, 64)
    point(bad_key == 22 and past_end == 22,
          "advise_mr: an unknown lkey and a range past the MR's end are EINVAL",
          "errno %d and %d" % (bad_key, past_end))


def main():
    dev_a, gid_a, dev_b, gid_b = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    c, s = Side(dev_a, gid_a), Side(dev_b, gid_b)
    qp_access = ODP & ~e.IBV_ACCESS_ON_DEMAND
    c.qp.connect(s.qp, access=qp_access)
    s.qp.connect(c.qp, access=qp_access)
    caps(c)

    put(c.buf, pattern(1))
    send(c, s, pattern(1), "Send of 8 KiB from ODP memory into ODP memory, first touch")

    # The client's source pages go; the new ones hold new bytes.
    dontneed(c.buf)
    put(c.buf, pattern(2))
    send(c, s, pattern(2), "Send after MADV_DONTNEED of the source and new contents: the new "
         "bytes go")

    # The server's target pages go (they read as zeros now); an RDMA Write must land in the
    # pages the process sees.
    dontneed(s.buf)
    put(c.buf, pattern(3))
    wc = rdma(c, s, e.IBV_WR_RDMA_WRITE, "write")
    got = get(s.buf, MSG)
    point(wc.status == 0 and got == pattern(3), "RDMA Write after MADV_DONTNEED of the target "
          "lands in the target's new pages", "status %d, %s" % (wc.status, diff(got, pattern(3))))

    # munmap + mmap at the same address: a different mapping under the same MR range.
    libc.munmap(s.buf, SIZE)
    if amap(s.buf) != s.buf:
        raise RuntimeError("mmap did not return the same address")
    put(s.buf, pattern(4))
    dontneed(c.buf)
    wc = rdma(c, s, e.IBV_WR_RDMA_READ, "read")
    got = get(c.buf, MSG)
    point(wc.status == 0 and got == pattern(4), "RDMA Read of a target unmapped and mapped again "
          "(new contents) into a local buffer after MADV_DONTNEED", "status %d, %s" %
          (wc.status, diff(got, pattern(4))))

    dontneed(s.buf)
    dontneed(c.buf)
    put(s.buf, (40).to_bytes(8, "little"))
    wr = SendWR(opcode=e.IBV_WR_ATOMIC_FETCH_AND_ADD, num_sge=1, sg=[SGE(c.buf, 8, c.mr.lkey)])
    wr.set_wr_atomic(s.mr.rkey, s.buf, 2, 0)
    c.qp.qp.post_send(wr)
    wc = c.poll("atomic")
    old, now = int.from_bytes(get(c.buf, 8), "little"), int.from_bytes(get(s.buf, 8), "little")
    point(wc.status == 0 and old == 40 and now == 42, "Fetch-and-add on ODP memory after "
          "MADV_DONTNEED of both sides", "status %d, old %d, now %d" % (wc.status, old, now))

    held_points(c, s)
    advise_points(dev_a)

    # Gone for good: the fault-in fails, and the access is a remote access error.
    libc.munmap(s.buf, SIZE)
    wc = rdma(c, s, e.IBV_WR_RDMA_WRITE, "write to unmapped")
    point(wc.status == e.IBV_WC_REM_ACCESS_ERR, "RDMA Write into an unmapped ODP range completes "
          "with IBV_WC_REM_ACCESS_ERR", "status %d" % wc.status)
    print("# %d points" % points)
    return 0 if points == POINTS else 1


if __name__ == "__main__":
    sys.exit(main())
