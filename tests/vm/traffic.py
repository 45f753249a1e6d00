#!/usr/bin/python3
"""traffic.py: RC, UC or UD traffic between two RDMA devices, with every byte and every completion
checked.

One process opens both devices (they may sit in different network namespaces: RDMA devices are
visible from every namespace in the default "shared" rdma netns mode), connects QP pairs between
them (RC by default, --qp-type) and runs a shuffled mix of operations, several WRs in flight, in
one direction or both. It checks:

  data        every byte an operation delivers: Send, Send with Immediate, Send with Invalidate,
              RDMA Write, RDMA Write with Immediate, RDMA Read, Fetch&Add, Compare&Swap;
  canaries    no byte outside the target moved: each buffer sits at a random offset of a large
              MR, split into 1..max_sge SGEs with gaps between them; the gaps, 64 bytes on each
              side and the unused tail of receive buffers hold random bytes that must survive,
              sources must stay unchanged, and at the end each MR is compared whole with a model
              of what it must hold;
  completions status, opcode, wr_id, qp_num, byte_len (receives, Reads, atomics), wc_flags
              (WITH_IMM, WITH_INV), the immediate and the invalidated R_Key, receives consumed
              in posting order (RQ; src_qp is defined for UD only and not looked at);
  atomics     the original value returned and the target afterwards, with Compare&Swaps whose
              compare fails (the target must keep its value);
  invalidate  Send with Invalidate names a type 2 memory window of the receiver that an RDMA Write
              just used: the receive completion carries IBV_WC_WITH_INV and that R_Key, and a
              second Write through it must fail with a remote error and leave memory unchanged
              (needs memory windows on the receiving device; run on a QP pair of its own).

--qp-type uc: Send, Send with Immediate, RDMA Write and RDMA Write with Immediate (UC has no
Reads, atomics or Send with Invalidate: asking for them is a usage error), checked as above. A
plain RDMA Write has no completion at the responder: its target is checked until it holds the
data, or --timeout passes.

--qp-type ud: Send and Send with Immediate of at most the ports' active MTU (a UD message is one
packet; sizes may name "mtu", which is that MTU here, and --mtu does not apply), from --qps UD
QPs of the requester to --qps of the responder, each message from a random QP to a random QP
through one address handle per side. Each receive buffer starts with the 40-byte GRH area. A
receive completion is matched to the message it carries (by src_qp, byte_len, the immediate and
the bytes; UD does not promise order between QPs) and must have IBV_WC_GRH, src_qp the sender's
QPN, byte_len the payload + 40, pkey_index 0 (RoCE ports have one P_Key) and sl 0 (RoCE carries
no SL on the wire); the GRH area must hold the IP header the message came with: for IPv4 GIDs
its last 20 bytes are an IPv4 header (version 4, UDP, a valid checksum, the total length of this
packet, the sender's and receiver's addresses; its first 20 bytes are not defined), for IPv6 the
IPv6 header (UDP, payload length, both GIDs). Receive WRs must complete in posting order on each
QP (without --srq).

Loss (UC, UD): these transports do not retransmit, so a message lost on the wire is a receive
completion that never comes (or a Write that never lands; on UC, a receive WR that gets the
next message instead). The tool treats every loss as a failure: on a clean link nothing may be
lost. It waits --timeout seconds without any completion before it calls a message lost, names
it, and stops. Nor do they have flow control: a UC or UD message counts against --window until
its receive completion comes (or its Write landed), so window x largest size bounds what is in
flight; more than the receiving CPU's backlog holds (net.core.netdev_max_backlog, 1000 packets
by default, when the peer lags) is dropped by the host, not by the link.

Errors: an error completion stops the run (what completed so far is checked, the MRs are not
compared whole). With --isolate (RC) it stops only its QP pair, while the other pairs go on and
are checked to the end, the MRs whole too but for the buffers of the stopped pair's unfinished
operations: for a run whose peers may legitimately move a QP to the error state (a forged
packet, a hostile wire).

usage: traffic.py DEV_A DEV_B [options]      (--help lists the options)

  traffic.py rvr0 rvr1 --gid-a 10.77.0.1 --gid-b 10.77.0.2
  traffic.py rvr0 rxe1 --ops write,read,cmp_swap --sizes 1,mtu-1,mtu,mtu+1,1M --mtu 4096
  traffic.py rvr0 rvr1 --srq --qps 4 --seed 1234       (replays the run of seed 1234)
  traffic.py rvr0 rxe1 --qp-type ud --qps 4 --sizes 1,63,mtu-1,mtu
  traffic.py rvr0 rvr1 --qp-type uc --sizes 1,mtu,3*mtu+7,1M

Sizes may be written as bytes (4096, 64K, 1M) or relative to the path MTU (mtu, mtu-1, 3*mtu+7).
The seed is printed first; --seed replays the same operations and data, at the same offsets
(unless a buffer still in flight holds one: completions come when they come). Every failure is
one "FAIL" line naming the operation, its size, its buffers' offsets, the seed and the first bad
byte or completion field. The last line is the summary. Exit status: 0 when every byte and every
completion checked was as expected, 1 when anything failed, 2 on a usage or set-up error.
Needs rdma-core's pyverbs (python3-pyverbs) and rcpair.py from the same directory."""
import argparse
import collections
import ipaddress
import operator
import os
import random
import re
import sys
import time

import pyverbs.enums as e
from pyverbs.addr import AH, AHAttr, GlobalRoute
from pyverbs.device import Context
from pyverbs.mr import MW, MWBindInfo
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsError
from pyverbs.srq import SRQ, SrqAttr, SrqInitAttr
from pyverbs.wr import SGE, RecvWR, SendWR

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rcpair import Dev, Qp, status_name  # noqa: E402

OPS = ("send", "send_imm", "send_inv", "write", "write_imm", "read", "fetch_add", "cmp_swap")
SEND_OPS = ("send", "send_imm", "send_inv")
ATOMIC_OPS = ("fetch_add", "cmp_swap")
RECV_OPS = SEND_OPS + ("write_imm",)
# What each transport has (IBA 9.7: UC has no Reads, atomics or Send with Invalidate; UD only
# Sends).
QP_OPS = {
    "rc": OPS,
    "uc": ("send", "send_imm", "write", "write_imm"),
    "ud": ("send", "send_imm"),
}
QP_TYPES = {"rc": e.IBV_QPT_RC, "uc": e.IBV_QPT_UC, "ud": e.IBV_QPT_UD}
GRH_LEN = 40  # the GRH area in front of every UD receive buffer
ARP_TRIES = 5  # tries of a connect or an address handle (see Traffic.retry_arp)
# Tries while the peer is unreachable: on a link that flaps every 0.5 s a try can land in a down
# phase, or before the route is back, several times in a row.
DOWN_TRIES = 15
WR_OPCODE = {
    "send": e.IBV_WR_SEND,
    "send_imm": e.IBV_WR_SEND_WITH_IMM,
    "send_inv": e.IBV_WR_SEND_WITH_INV,
    "write": e.IBV_WR_RDMA_WRITE,
    "write_imm": e.IBV_WR_RDMA_WRITE_WITH_IMM,
    "read": e.IBV_WR_RDMA_READ,
    "fetch_add": e.IBV_WR_ATOMIC_FETCH_AND_ADD,
    "cmp_swap": e.IBV_WR_ATOMIC_CMP_AND_SWP,
}
WC_OPCODE = {
    "send": e.IBV_WC_SEND,
    "send_imm": e.IBV_WC_SEND,
    "send_inv": e.IBV_WC_SEND,
    "write": e.IBV_WC_RDMA_WRITE,
    "write_imm": e.IBV_WC_RDMA_WRITE,
    "read": e.IBV_WC_RDMA_READ,
    "fetch_add": e.IBV_WC_FETCH_ADD,
    "cmp_swap": e.IBV_WC_COMP_SWAP,
}
MTUS = {256: e.IBV_MTU_256, 512: e.IBV_MTU_512, 1024: e.IBV_MTU_1024, 2048: e.IBV_MTU_2048,
        4096: e.IBV_MTU_4096}
ACCESS = (e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ |
          e.IBV_ACCESS_REMOTE_ATOMIC)
# "Invalidated" in a receive completion: libibverbs calls it IBV_WC_WITH_INV (1 << 3); providers
# of the rxe user ABI (rdma_rxe, rvrdma) hand over the kernel's IB_WC_WITH_INVALIDATE (1 << 2)
# unchanged, a bit libibverbs names IBV_WC_IP_CSUM_OK. A Send with Invalidate must set one of
# them; other receives must not set IBV_WC_WITH_INV (bit 2 may be a checksum flag there).
WC_INV_ANY = e.IBV_WC_WITH_INV | (1 << 2)
# An R_Key that is not (or no longer) valid: IBA says Remote Access Error; some responders
# answer Invalid Request. Either is a correct refusal, success or a timeout is not.
REFUSED = (e.IBV_WC_REM_ACCESS_ERR, e.IBV_WC_REM_INV_REQ_ERR)
GUARD = 64  # canary bytes checked on each side of every buffer
GAP_MAX = 64  # largest gap between two SGE pieces
SLACK_MAX = 64  # largest unused tail of a receive buffer
MAX_FAIL_LINES = 40
DEFAULT_SIZES = "1,2,63,mtu-1,mtu,mtu+1,2*mtu,3*mtu+7,65536,1M"
DEFAULT_SIZES_UD = "1,2,63,mtu-1,mtu"
INJECT_KINDS = ("data", "canary", "byte_len", "imm", "old", "rkey")
COMPLEMENT = bytes(255 - i for i in range(256))
MASK64 = (1 << 64) - 1


class SetupError(Exception):
    """A usage or set-up problem (exit status 2), not a failed check."""


def u64(b):
    return int.from_bytes(b, sys.byteorder)


def u64_bytes(v):
    return v.to_bytes(8, sys.byteorder)


def first_diff(a, b):
    """Index of the first byte where `a` and `b` differ (same length), and how many differ
    (counted in the first 1 MiB from there: enough to tell one bad byte from a bad block)."""
    n = len(a)
    step = 4096
    for i in range(0, n, step):
        if a[i:i + step] != b[i:i + step]:
            j = i
            while a[j] == b[j]:
                j += 1
            end = min(n, j + (1 << 20))
            return j, sum(map(operator.ne, a[j:end], b[j:end]))
    return -1, 0


def parse_size(tok, mtu):
    t = tok.strip().lower()
    m = re.fullmatch(r"(?:(\d+)\*)?mtu([+-]\d+)?", t)
    if m:
        v = int(m.group(1) or 1) * mtu + int(m.group(2) or 0)
    else:
        m = re.fullmatch(r"(\d+)([km]?)", t)
        if not m:
            raise SetupError("bad size %r (bytes, 64K, 1M, mtu, mtu-1, 3*mtu+7)" % tok)
        v = int(m.group(1)) << {"": 0, "k": 10, "m": 20}[m.group(2)]
    if not 1 <= v <= 1 << 30:
        raise SetupError("size %r = %d is outside 1 B .. 1 GiB" % (tok, v))
    return v


def default_mr_size(big):
    """Room for a window (16) of the largest buffers with their guards and gaps, as a power of
    two from 8 MiB to 64 MiB: with the mix of sizes a run has, most of it stays free, so a random
    placement rarely collides (one that does waits for a completion). Filling, registering and
    comparing a 64 MiB MR costs a TCG guest seconds a run."""
    need = 16 * (big + 2 * GUARD + 32 * GAP_MAX)
    size = 8 << 20
    while size < need and size < 64 << 20:
        size <<= 1
    return size


def parse_bytes(tok):
    m = re.fullmatch(r"(\d+)([kmg]?)", tok.strip().lower())
    if not m:
        raise argparse.ArgumentTypeError("bad size %r" % tok)
    return int(m.group(1)) << {"": 0, "k": 10, "m": 20, "g": 30}[m.group(2)]


def sysfs_port(dev):
    return "/sys/class/infiniband/%s/ports/1/" % dev


def gid_index(dev, spec):
    """The port-1 GID index `spec` names: an index, an IP address (its RoCE v2 GID) or None
    (the first RoCE v2 GID of an IPv4 address)."""
    if spec is not None and spec.isdigit():
        return int(spec)
    want = None
    if spec is not None:
        try:
            a = ipaddress.ip_address(spec)
        except ValueError:
            raise SetupError("--gid: %r is neither a GID index nor an IP address" % spec)
        if a.version == 4:
            a = ipaddress.IPv6Address("::ffff:" + spec)
        want = a.exploded
    base = sysfs_port(dev)
    try:
        idx = sorted(os.listdir(base + "gids"), key=int)
    except OSError as ex:
        raise SetupError("cannot read the GID table of %s: %s" % (dev, ex))
    for i in idx:
        try:
            with open(base + "gid_attrs/types/" + i) as f:
                if f.read().strip() != "RoCE v2":
                    continue
            with open(base + "gids/" + i) as f:
                g = f.read().strip()
        except OSError:
            continue
        if (want is None and g.startswith("0000:0000:0000:0000:0000:ffff:")) or g == want:
            return int(i)
    raise SetupError("%s has no RoCE v2 GID for %s" % (dev, spec or "an IPv4 address"))


def mw_type2(name):
    """None when `name` can allocate a type 2 memory window, else why not."""
    ctx = Context(name=name)
    try:
        pd = PD(ctx)
        try:
            MW(pd, e.IBV_MW_TYPE_2).close()
            return None
        except PyverbsError as ex:
            return "ibv_alloc_mw(type 2) failed: %s" % str(ex).strip().splitlines()[-1]
        finally:
            pd.close()
    finally:
        ctx.close()


class Side:
    """One device: context, PD, one large MR, the model of what the MR holds (`shadow`) and
    the ranges of it that operations in flight own."""

    def __init__(self, tag, name, gid, args, need_mw):
        self.tag, self.name = tag, name
        access = ACCESS | (e.IBV_ACCESS_MW_BIND if need_mw else 0)
        self.dev = Dev(name, gid, access=access, mr_size=args.mr_size)
        self.ctx, self.pd, self.mr = self.dev.ctx, self.dev.pd, self.dev.mr
        self.size = args.mr_size
        a = self.ctx.query_device()
        cap = args.max_sge or a.max_sge
        self.max_sge = max(1, min(a.max_sge, cap))
        self.max_sge_rd = max(1, min(self.max_sge, a.max_sge_rd or self.max_sge))
        self.max_recv_sge = self.max_sge
        if args.srq:
            self.max_recv_sge = max(1, min(self.max_sge, a.max_srq_sge))
        self.atomics = a.atomic_caps != e.IBV_ATOMIC_NONE
        self.active_mtu = self.ctx.query_port(1).active_mtu
        self.srq = None
        if args.srq:
            self.srq = SRQ(self.pd, SrqInitAttr(attr=SrqAttr(max_wr=args.window + 4,
                                                             max_sge=self.max_recv_sge)))
        self.busy = {}
        self.next_key = 0
        self.shadow = None
        self.gid = ipaddress.IPv6Address(str(self.ctx.query_gid(1, self.dev.gid_index)))
        self.ah = None  # UD: the address handle of the peer

    def fill(self, rng):
        """Random bytes all over the MR (a prime-length random block repeated: random enough
        for a background, and fast), recorded in the model."""
        block = rng.randbytes(65521)
        # The model built in place and copied once: a TCG guest copies tens of MiB slowly.
        shadow = bytearray(block) * (self.size // len(block) + 1)
        del shadow[self.size:]
        self.mr.write(shadow, self.size, 0)
        self.shadow = shadow

    def alloc(self, size, rng, align=1):
        """A random free range of `size` bytes starting at a multiple of `align`; None when
        none was found (operations in flight hold too much of the MR)."""
        if size > self.size:
            raise SetupError("a buffer of %d bytes does not fit %s's %d-byte MR (--mr-size)" %
                             (size, self.name, self.size))
        for _ in range(64):
            start = rng.randrange(0, self.size - size + 1)
            start -= start % align
            end = start + size
            if all(end <= s or start >= t for s, t in self.busy.values()):
                self.next_key += 1
                self.busy[self.next_key] = (start, end)
                return self.next_key, start
        return None

    def label(self):
        return "%s (%s)" % (self.tag.upper(), self.name)


class Region:
    """A buffer at a random offset of a side's MR: a guard, `lengths` pieces with random gaps
    between them, a guard. `pre` is what the range holds before the operation, `want` what it
    must hold after it."""

    def __init__(self, side, key, start, lengths, gaps, role):
        self.side, self.key, self.start, self.role = side, key, start, role
        self.pieces = []
        pos = start + GUARD
        for i, n in enumerate(lengths):
            self.pieces.append((pos, n))
            pos += n + (gaps[i] if i < len(gaps) else 0)
        self.end = pos + GUARD
        self.size = self.end - start
        self.capacity = sum(lengths)
        self.pre = self.want = None

    def sges(self):
        mr = self.side.mr
        return [SGE(mr.buf + off, n, mr.lkey) for off, n in self.pieces]

    def overlay(self, data):
        """`pre` with `data` scattered over the pieces from their start."""
        out = bytearray(self.pre)
        pos = 0
        for off, n in self.pieces:
            k = min(n, len(data) - pos)
            if k <= 0:
                break
            o = off - self.start
            out[o:o + k] = data[pos:pos + k]
            pos += k
        return out

    def gather(self, n):
        """The first `n` bytes the pieces hold now (read from the MR)."""
        out = bytearray()
        for off, k in self.pieces:
            k = min(k, n - len(out))
            if k <= 0:
                break
            out += self.side.mr.read(k, off)
        return bytes(out)

    def offset_of(self, i):
        """The MR offset of byte `i` of the pieces."""
        for off, k in self.pieces:
            if i < k:
                return off + i
            i -= k
        return self.pieces[-1][0] + self.pieces[-1][1] - 1

    def where(self, i, msg_len):
        """What byte `i` of the range is, in words."""
        rel = self.start + i
        if i < GUARD:
            return "guard before the buffer (byte %d of %d)" % (i, GUARD)
        pos = 0
        for k, (off, n) in enumerate(self.pieces):
            if off <= rel < off + n:
                m = pos + rel - off
                what = "message byte %d" % m if m < msg_len else "unused receive space"
                return "SGE %d/%d byte %d (%s)" % (k + 1, len(self.pieces), rel - off, what)
            pos += n
            if k + 1 < len(self.pieces) and off + n <= rel < self.pieces[k + 1][0]:
                return "gap after SGE %d (byte %d)" % (k + 1, rel - off - n)
        return "guard after the buffer (byte %d of %d)" % (rel - (self.end - GUARD), GUARD)

    def describe(self):
        return "%s %s@0x%x/%d SGE%s" % (self.side.tag.upper(), self.role,
                                       self.pieces[0][0], len(self.pieces),
                                       "" if len(self.pieces) == 1 else "s")


class RecvBuf:
    """A posted receive WR and its buffer."""

    def __init__(self, wr_id, region, op):
        self.wr_id, self.region, self.op = wr_id, region, op


class Op:
    """One operation: its WR(s), buffers and what its completions must say."""

    def __init__(self, n, kind, size, req, resp, qreq, qresp, seed):
        self.n, self.kind, self.size = n, kind, size
        self.req, self.resp, self.qreq, self.qresp = req, resp, qreq, qresp
        # Each op draws from its own generator: a replay gets the same data and layout
        # whatever the timing of the completions.
        self.seed = seed
        self._rng = None  # made at first use: a long run builds its operations up front
        self.regions = []  # (Region, owned by this op)
        self.recv = None  # the RecvBuf this op's message consumed
        self.posted_recv = None  # the RecvBuf posted for it (RQ)
        self.data = b""
        self.imm = None
        self.inv_rkey = None
        self.expect_refusal = False
        self.waiting = 0  # completions still to come
        self.sent = False  # the send completion came
        self.deadline = None  # UC Write: when to stop waiting for its data to land
        self.note = ""

    @property
    def rng(self):
        """The op's own generator, seeded with its seed."""
        if self._rng is None:
            self._rng = random.Random(self.seed)
        return self._rng

    @rng.setter
    def rng(self, value):
        self._rng = value

    def describe(self):
        parts = ["op#%d %s %s->%s size=%d" % (self.n, self.kind, self.req.tag, self.resp.tag,
                                             self.size)]
        parts += [r.describe() for r, _ in self.regions]
        rb = self.recv or self.posted_recv
        if rb is not None:
            parts.append(rb.region.describe())
        if self.note:
            parts.append(self.note)
        return " ".join(parts)


class Traffic:
    """The run: both sides, the QP pairs, the operations in flight and the tally."""

    def __init__(self, args, seed):
        self.args, self.seed = args, seed
        self.rng = random.Random(seed)
        self.failures = 0
        self.status_failures = 0  # of them, error completions (see `error_completion`)
        self.fatal = False
        self.dead = set()  # --isolate: the QPs of pairs stopped at an error completion
        self.why_dead = set()  # of them, those with an error completion other than a flush
        self.abandoned = []  # operations of stopped pairs, never checked (see `whole`)
        self.unposted = 0  # operations of stopped pairs left unposted
        self.inv_running = False  # run_inv is between the steps of one Send with Invalidate
        self.wrs = {}  # wr_id -> ("send" | "recv" | "bind", object)
        self.next_wr = 1
        self.outstanding = set()
        self.rq_order = collections.defaultdict(collections.deque)
        self.qps = []
        self.pairs = []
        self.counts = collections.Counter()
        self.moved = 0
        self.checked = 0
        self.max_inflight = 0
        self.inject = set(args.inject)
        self.opno = 0
        self.ud = args.qp_type == "ud"
        self.qkey = None
        self.ud_posted = collections.defaultdict(collections.deque)  # (tag, qpn) -> RecvBufs
        self.landing = []  # UC RDMA Writes whose target is not yet seen to hold the data

    # ---- reporting ----

    def fail(self, op, what):
        self.failures += 1
        if self.failures <= MAX_FAIL_LINES:
            where = op.describe() if op is not None else "-"
            print("FAIL %s seed=%d: %s" % (where, self.seed, what), flush=True)
        elif self.failures == MAX_FAIL_LINES + 1:
            print("FAIL ... (further failures counted, not shown)", flush=True)

    def info(self, what):
        print("traffic: " + what, flush=True)

    # ---- set-up ----

    def setup(self, devs, gids, ops, dirs):
        need_mw = {"a": False, "b": False}
        if "send_inv" in ops:
            for d in dirs:
                need_mw[d[2]] = True
        self.a = Side("a", devs[0], gids[0], self.args, need_mw["a"])
        self.b = Side("b", devs[1], gids[1], self.args, need_mw["b"])
        mtu = self.args.mtu
        for s in (self.a, self.b):
            if MTUS[mtu] > s.active_mtu:
                raise SetupError("path MTU %d is above %s's active MTU (%d): raise the netdev "
                                 "MTU or pick a smaller --mtu" %
                                 (mtu, s.name, [k for k, v in MTUS.items()
                                                if v == s.active_mtu][0]))
        for s in (self.a, self.b):
            s.fill(self.rng)
            self.info("%s: %s GID %d (%s) max_sge %d (read %d, recv %d) atomics %s" %
                      (s.tag.upper(), s.name, s.dev.gid_index, s.gid, s.max_sge, s.max_sge_rd,
                       s.max_recv_sge, "yes" if s.atomics else "no"))
        if self.ud:
            self.setup_ud()
        else:
            for _ in range(self.args.qps):
                self.pairs.append(self.new_pair())
        sges = max(s.max_sge for s in (self.a, self.b))
        # The random bytes every buffer's contents are cut from.
        self.pool = self.rng.randbytes(max(1 << 20, 2 * (self.big + 2 * GUARD + sges * GAP_MAX)))

    def new_qp(self, s):
        w = self.args.window
        q = Qp(s.dev, cqe=4 * w + 16, srq=s.srq, depth=w + 4, send_sge=s.max_sge,
               recv_sge=s.max_recv_sge, qp_type=QP_TYPES[self.args.qp_type])
        q.tag = s.tag
        return q

    def new_pair(self):
        """Two QPs, one on each side, connected to each other (RC or UC)."""
        access = ACCESS if self.args.qp_type == "rc" else \
            e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE
        for attempt in range(1, DOWN_TRIES + 1):
            qs = [self.new_qp(s) for s in (self.a, self.b)]
            qa, qb = qs
            try:
                qa.connect(qb, mtu=MTUS[self.args.mtu], access=access)
                qb.connect(qa, mtu=MTUS[self.args.mtu], access=access)
                break
            except PyverbsError as ex:
                for q in qs:
                    q.close()
                self.retry_arp(ex, attempt, "connecting a QP pair")
        self.qps += qs
        return {"a": qa, "b": qb}

    def retry_arp(self, ex, attempt, what):
        """Modify QP to RTR and Create AH resolve the peer's MAC address: on a lossy link the
        ARP or neighbour solicitation may go unanswered (ETIMEDOUT), and while a flapping link
        is down there is no route to the peer (ENETUNREACH: a pair made for a Send with
        Invalidate step connects while the traffic runs). Returns to try again."""
        down = "Errno: 101" in str(ex)
        if not (down or "Errno: 110" in str(ex)) or attempt >= (DOWN_TRIES if down else ARP_TRIES):
            raise ex
        self.info("%s: %s; trying again" % (what, str(ex).strip()))
        if down:
            # Longer than a flap's down phase (65-link-flaps), and random: a fixed pause plus a
            # connect can add up to the flap cycle and meet every down phase in turn.
            time.sleep(random.uniform(0.6, 1.2))

    def setup_ud(self):
        """--qps UD QPs on each side, one Q_Key for all, an address handle of the peer on each
        side; every (A QP, B QP) combination is a "pair" an operation may pick."""
        self.qkey = self.rng.getrandbits(31)  # the top bit would mean "the QP's own Q_Key"
        for s, peer in ((self.a, self.b), (self.b, self.a)):
            gr = GlobalRoute(dgid=peer.dev.gid, sgid_index=s.dev.gid_index, hop_limit=64)
            for attempt in range(1, DOWN_TRIES + 1):
                try:
                    s.ah = AH(s.pd, attr=AHAttr(gr=gr, is_global=1, port_num=1))
                    break
                except PyverbsError as ex:
                    self.retry_arp(ex, attempt, "creating %s's address handle" % s.name)
        qs = {}
        for s in (self.a, self.b):
            qs[s.tag] = [self.new_qp(s) for _ in range(self.args.qps)]
            for q in qs[s.tag]:
                q.open_ud(self.qkey)
            self.qps += qs[s.tag]
        self.pairs = [{"a": qa, "b": qb} for qa in qs["a"] for qb in qs["b"]]
        self.info("UD: Q_Key 0x%08x, QPNs A %s, B %s" % (
            self.qkey, ",".join(str(q.qp.qp_num) for q in qs["a"]),
            ",".join(str(q.qp.qp_num) for q in qs["b"])))

    def close_pair(self, pair):
        for q in pair.values():
            self.qps.remove(q)
            self.rq_order.pop((q.tag, q.qp.qp_num), None)
            q.close()

    # ---- memory ----

    def chunk(self, rng, n):
        off = rng.randrange(0, len(self.pool) - n + 1)
        return self.pool[off:off + n]

    def split(self, rng, total, maxn):
        m = max(1, min(maxn, total))
        r = rng.random()
        k = 1 if r < 0.25 else m if r < 0.5 else rng.randint(1, m)
        if k == 1:
            return [total]
        cuts = sorted(rng.sample(range(1, total), k - 1))
        return [b - a for a, b in zip([0] + cuts, cuts + [total])]

    def region(self, op, side, lengths, role, fill=None, align=1, owned=True):
        """Places a buffer of `lengths` pieces in `side`'s MR and writes its `pre` contents:
        random bytes, with `fill` scattered over the pieces. None when the MR is full."""
        rng = op.rng
        gaps = [rng.randint(1, GAP_MAX) for _ in lengths[1:]]
        size = 2 * GUARD + sum(lengths) + sum(gaps)
        got = side.alloc(size, rng, align)
        if got is None:
            return None
        key, start = got
        r = Region(side, key, start, lengths, gaps, role)
        r.pre = bytearray(self.chunk(rng, size))
        if fill is not None:
            r.pre = r.overlay(fill)
        side.mr.write(bytes(r.pre), size, start)
        side.shadow[start:r.end] = r.pre
        r.want = r.pre
        op.regions.append((r, owned))
        return r

    def release(self, op):
        for r, owned in op.regions:
            if owned:
                del r.side.busy[r.key]
        op.regions = [(r, o) for r, o in op.regions if not o]
        if op.recv is not None:
            del op.recv.region.side.busy[op.recv.region.key]

    def verify(self, op, r, what, msg_len):
        """Compares a buffer with what it must hold; the model takes what is there."""
        side = r.side
        got = side.mr.read(r.size, r.start)
        self.checked += r.size
        if got != r.want:
            i, count = first_diff(got, r.want)
            extra = ""
            if op.kind in ATOMIC_OPS and r.role in ("target", "result"):
                off = r.pieces[0][0] - r.start
                extra = " (as u64: got 0x%016x, want 0x%016x)" % (
                    u64(got[off:off + 8]), u64(r.want[off:off + 8]))
            self.fail(op, "%s: %s, first bad byte at MR offset 0x%x, %s: got 0x%02x, want 0x%02x;"
                      " %d %s%s" %
                      (side.label(), what, r.start + i, r.where(i, msg_len), got[i], r.want[i],
                       count, "byte differs" if count == 1 else "bytes differ", extra))
        side.shadow[r.start:r.end] = got

    # ---- posting ----

    def wr_id(self, kind, obj):
        w = self.next_wr
        self.next_wr += 1
        self.wrs[w] = (kind, obj)
        return w

    def new_op(self, kind, size, d, pair=None):
        self.opno += 1
        req, resp = (self.a, self.b) if d == "a2b" else (self.b, self.a)
        if pair is None:
            pair = self.pairs[self.rng.randrange(len(self.pairs))]
        return Op(self.opno, kind, size, req, resp, pair[req.tag], pair[resp.tag],
                  self.seed * 1000003 + self.opno)

    def post_recv(self, op):
        """A receive WR on the responder's RQ (or SRQ) for `op`; False when the MR is full."""
        resp, rng = op.resp, op.rng
        if self.ud:
            # Any message of the flow may land in it: room for the largest, behind the GRH.
            cap, fill = GRH_LEN + self.srq_cap, None
        elif self.args.srq:
            cap, fill = self.srq_cap, None
        elif op.kind == "write_imm":
            cap, fill = rng.randint(1, SLACK_MAX), None
        else:
            slack = 0 if rng.random() < 0.4 else rng.randint(1, SLACK_MAX)
            cap, fill = op.size + slack, op.data.translate(COMPLEMENT)
        r = self.region(op, resp, self.split(rng, cap, resp.max_recv_sge), "recv", fill,
                        owned=False)
        if r is None:
            return False
        op.regions.pop()  # the buffer belongs to whichever message lands in it
        rb = RecvBuf(None, r, None if self.args.srq or self.ud else op)
        rb.wr_id = self.wr_id("recv", rb)
        wr = RecvWR(wr_id=rb.wr_id, num_sge=len(r.pieces), sg=r.sges())
        (resp.srq or op.qresp.qp).post_recv(wr)
        if self.ud and resp.srq is None:
            self.ud_posted[(resp.tag, op.qresp.qp.qp_num)].append(rb)
        op.posted_recv = rb
        return True

    def build(self, op, rkey=None, target=None):
        """Buffers and the send WR of `op`; None when the MR is full (nothing posted)."""
        k, rng, req, resp = op.kind, op.rng, op.req, op.resp
        wr = None
        if k in ATOMIC_OPS:
            old = rng.getrandbits(64)
            if k == "fetch_add":
                cmp_add, swap = rng.getrandbits(64), 0
                new = (old + cmp_add) & MASK64
            else:
                swap = rng.getrandbits(64)
                if rng.random() < 0.5:
                    cmp_add, new = old, swap
                    op.note = "compare=old"
                else:
                    cmp_add, new = old ^ (rng.getrandbits(64) | 1), old
                    op.note = "compare!=old"
            tgt = self.region(op, resp, [8], "target", u64_bytes(old), align=8)
            if tgt is None:
                return None
            tgt.want = tgt.overlay(u64_bytes(new))
            res = self.region(op, req, [8], "result", u64_bytes(old).translate(COMPLEMENT))
            if res is None:
                return None
            res.want = res.overlay(u64_bytes(old))
            op.data = u64_bytes(old)
            wr = SendWR(opcode=WR_OPCODE[k], num_sge=1, sg=res.sges(),
                        send_flags=e.IBV_SEND_SIGNALED)
            wr.set_wr_atomic(resp.mr.rkey, resp.mr.buf + tgt.pieces[0][0], cmp_add, swap)
            return wr
        op.data = data = self.chunk(rng, op.size)
        if k == "read":
            src = self.region(op, resp, [op.size], "source", data)
            if src is None:
                return None
            dst = self.region(op, req, self.split(rng, op.size, req.max_sge_rd), "local",
                              data.translate(COMPLEMENT))
            if dst is None:
                return None
            dst.want = dst.overlay(data)
            wr = SendWR(opcode=WR_OPCODE[k], num_sge=len(dst.pieces), sg=dst.sges(),
                        send_flags=e.IBV_SEND_SIGNALED)
            wr.set_wr_rdma(resp.mr.rkey, resp.mr.buf + src.pieces[0][0])
            return wr
        src = self.region(op, req, self.split(rng, op.size, req.max_sge), "local", data)
        if src is None:
            return None
        if k in ("write", "write_imm"):
            if target is None:
                target = self.region(op, resp, [op.size], "target",
                                     data.translate(COMPLEMENT))
                if target is None:
                    return None
            if op.expect_refusal:
                target.want = target.pre
            else:
                target.want = target.overlay(data)
        if k in RECV_OPS and not self.post_recv(op):
            return None
        if k in ("send_imm", "write_imm"):
            op.imm = rng.getrandbits(32)
        imm = op.inv_rkey if k == "send_inv" else op.imm
        wr = SendWR(opcode=WR_OPCODE[k], num_sge=len(src.pieces), sg=src.sges(),
                    send_flags=e.IBV_SEND_SIGNALED, imm_data=imm or 0)
        if target is not None:
            if "rkey" in self.inject and k == "write" and rkey is None:
                # An R_Key with the right index and the wrong key: a remote access error (seed
                # 001, class C), which moves the pair to the error state.
                self.inject.discard("rkey")
                self.info("injecting a wrong R_Key into op#%d, a Write" % op.n)
                rkey = resp.mr.rkey ^ 0xFF
                op.note = "wrong R_Key 0x%08x (injected)" % rkey
            wr.set_wr_rdma(rkey if rkey is not None else resp.mr.rkey,
                           resp.mr.buf + target.pieces[0][0])
        if self.ud:
            wr.set_wr_ud(req.ah, op.qresp.qp.qp_num, self.qkey)
        return wr

    def post(self, op, **kw):
        """Builds and posts `op`; False when the MR has no room for it now."""
        try:
            wr = self.build(op, **kw)
        except PyverbsError as ex:
            self.fail(op, "posting the receive failed: %s" % ex)
            self.fatal = True
            return True
        if wr is None:
            # No room: undo, and start over from the same random state next time.
            for r, owned in op.regions:
                if owned:
                    del r.side.busy[r.key]
            op.regions = [(r, o) for r, o in op.regions if not o]
            op.rng = random.Random(op.seed)
            op.note = ""
            return False
        wr.wr_id = self.wr_id("send", op)
        op.waiting = 2 if op.kind in RECV_OPS else 1
        if op.kind in RECV_OPS:
            self.rq_order[(op.resp.tag, op.qresp.qp.qp_num)].append(op)
        try:
            op.qreq.qp.post_send(wr)
        except PyverbsError as ex:
            self.fail(op, "ibv_post_send failed: %s" % ex)
            self.fatal = True
            return True
        self.outstanding.add(op)
        self.max_inflight = max(self.max_inflight, len(self.outstanding))
        return True

    # ---- completions ----

    def poll(self):
        n = 0
        for q in list(self.qps):
            got, wcs = q.cq.poll(64)
            for wc in wcs:
                self.on_wc(q, wc)
            n += got
        return n

    def on_wc(self, q, wc):
        ent = self.wrs.pop(wc.wr_id, None)
        if ent is None:
            self.fail(None, "%s: completion for unknown wr_id %d (status %s, opcode %d)" %
                      (q.dev.ctx.name, wc.wr_id, status_name(wc.status), wc.opcode))
            return
        kind, obj = ent
        if kind == "send":
            self.on_send_wc(obj, q, wc)
        elif kind == "recv":
            self.on_recv_wc(obj, q, wc)
        else:
            obj.append(wc)

    def on_send_wc(self, op, q, wc):
        if wc.qp_num != op.qreq.qp.qp_num or q is not op.qreq:
            self.fail(op, "send completion qp_num %d, want %d" % (wc.qp_num, op.qreq.qp.qp_num))
        # A refused Write that ran out of retries lost its NAK: a remote access error is a class
        # C error of the responder's (seed 001), whose QP goes to the error state as it sends the
        # NAK and drops the retries. On a link that loses packets (--lossy) that is a refusal
        # too; elsewhere it is a retry-exceeded completion like any other WR's (a path that lost
        # packets for longer than the retry budget), and reported as one.
        lost_nak = self.args.lossy and wc.status == e.IBV_WC_RETRY_EXC_ERR
        if op.expect_refusal and (wc.status != e.IBV_WC_RETRY_EXC_ERR or lost_nak):
            if wc.status not in REFUSED and not lost_nak:
                self.fail(op, "the Write through an invalidated R_Key completed with status %s,"
                          " want REM_ACCESS_ERR or REM_INV_REQ_ERR" % status_name(wc.status))
            self.step(op)
            return
        if wc.status != e.IBV_WC_SUCCESS:
            self.error_completion(op, wc, "send")
            self.step(op)
            return
        op.sent = True
        if wc.opcode != WC_OPCODE[op.kind]:
            self.fail(op, "send completion opcode %d, want %d" % (wc.opcode, WC_OPCODE[op.kind]))
        want_len = 8 if op.kind in ATOMIC_OPS else op.size if op.kind == "read" else None
        # byte_len of a send completion is defined for Reads and atomics only.
        if want_len is not None and wc.byte_len != want_len:
            self.fail(op, "send completion byte_len %d, want %d" % (wc.byte_len, want_len))
        self.step(op)

    def gone(self, op):
        """Whether `op` is past checking: the run stopped, or (--isolate) its QP pair did."""
        return self.fatal or op.qreq in self.dead or op.qresp in self.dead

    def error_completion(self, op, wc, what):
        """An error completion of `op` (RC or UC): its QP pair is in the error state, and the
        flushes that follow are expected. With --isolate only that pair stops: its other
        operations are not posted, and what its unfinished ones may have written is left out of
        the checks. Otherwise the run stops.

        With --isolate a flush is not counted as a failure even when it comes first: the QP at
        the other end may be flushed before the error completion that says why is polled (a
        responder's QP enters the error state as it NAKs). That error completion must come,
        though (see `run`)."""
        flush = wc.status == e.IBV_WC_WR_FLUSH_ERR
        if not (flush and (self.gone(op) or self.args.isolate)):
            self.status_failures += 1
            self.fail(op, "%s completion status %s (vendor_err 0x%x)" %
                      (what, status_name(wc.status), wc.vendor_err))
        if not self.args.isolate:
            self.fatal = True
            return
        if not self.gone(op):
            self.info("op#%d's QP pair (QPs %d and %d) is in the error state: its other "
                      "operations are not posted" % (op.n, op.qreq.qp.qp_num,
                                                     op.qresp.qp.qp_num))
        self.dead.update((op.qreq, op.qresp))
        if not flush:
            self.why_dead.update((op.qreq, op.qresp))

    def on_recv_wc(self, rb, q, wc):
        if self.ud:
            self.on_ud_recv_wc(rb, q, wc)
            return
        side = rb.region.side
        order = self.rq_order[(side.tag, wc.qp_num)]
        if not order:
            self.fail(None, "%s: receive completion (wr_id %d, qp_num %d, status %s) with no "
                      "message outstanding on that QP" %
                      (side.label(), wc.wr_id, wc.qp_num, status_name(wc.status)))
            del side.busy[rb.region.key]
            return
        if self.args.qp_type == "uc" and self.uc_lost(order, wc):
            return
        op = order.popleft()
        if rb.op is not None and rb.op is not op:
            self.fail(op, "the receive completed was wr_id %d (posted for op#%d), want wr_id %d"
                      ": receive WRs consumed out of order" %
                      (wc.wr_id, rb.op.n, op.posted_recv.wr_id))
        op.recv = rb
        if wc.qp_num != op.qresp.qp.qp_num or q is not op.qresp:
            self.fail(op, "receive completion qp_num %d on the CQ of QP %d, want %d" %
                      (wc.qp_num, q.qp.qp_num, op.qresp.qp.qp_num))
        if wc.status != e.IBV_WC_SUCCESS:
            self.error_completion(op, wc, "receive")
            self.step(op)
            return
        byte_len, imm = wc.byte_len, wc.imm_data
        if "byte_len" in self.inject:
            self.inject.discard("byte_len")
            self.info("injecting a wrong byte_len into op#%d's receive completion" % op.n)
            byte_len += 1
        want_op = e.IBV_WC_RECV_RDMA_WITH_IMM if op.kind == "write_imm" else e.IBV_WC_RECV
        if wc.opcode != want_op:
            self.fail(op, "receive completion opcode %d, want %d" % (wc.opcode, want_op))
        if byte_len != op.size:
            self.fail(op, "receive completion byte_len %d, want %d" % (byte_len, op.size))
        flags = wc.wc_flags
        if bool(flags & e.IBV_WC_WITH_IMM) != (op.imm is not None):
            self.fail(op, "receive completion wc_flags 0x%x: WITH_IMM %s" %
                      (flags, "missing" if op.imm is not None else "set"))
        if op.kind == "send_inv" and not flags & WC_INV_ANY:
            self.fail(op, "receive completion wc_flags 0x%x: no WITH_INV (0x%x, or the kernel's "
                      "0x4 from an rxe-ABI provider)" % (flags, e.IBV_WC_WITH_INV))
        if op.kind != "send_inv" and flags & e.IBV_WC_WITH_INV:
            self.fail(op, "receive completion wc_flags 0x%x: WITH_INV set" % flags)
        if op.imm is not None:
            if "imm" in self.inject:
                self.inject.discard("imm")
                self.info("injecting a wrong immediate into op#%d's receive completion" % op.n)
                imm ^= 0x80
            if imm != op.imm:
                self.fail(op, "receive completion imm_data 0x%08x, want 0x%08x" % (imm, op.imm))
        if op.kind == "send_inv" and imm != op.inv_rkey:
            self.fail(op, "receive completion invalidated R_Key 0x%08x, want 0x%08x" %
                      (imm, op.inv_rkey))
        r = rb.region
        r.want = r.overlay(op.data) if op.kind in SEND_OPS else r.pre
        if op.kind in SEND_OPS and op.size > r.capacity:
            self.fail(op, "a %d-byte message completed into a %d-byte receive buffer" %
                      (op.size, r.capacity))
        self.step(op)

    @staticmethod
    def carries(op, wc):
        """Whether receive completion `wc` may be `op`'s: opcode, length and immediate."""
        imm = wc.imm_data if wc.wc_flags & e.IBV_WC_WITH_IMM else None
        want_op = e.IBV_WC_RECV_RDMA_WITH_IMM if op.kind == "write_imm" else e.IBV_WC_RECV
        return wc.opcode == want_op and wc.byte_len == op.size and imm == op.imm

    def uc_lost(self, order, wc):
        """UC: when a message is lost its receive WR takes the next message. A successful
        completion that is not the oldest message's but a later one's says so: the ones before
        it were lost (reported, and the run stops)."""
        if wc.status != e.IBV_WC_SUCCESS or self.carries(order[0], wc):
            return False
        later = next((i for i, o in enumerate(order) if i and self.carries(o, wc)), None)
        if later is None:
            return False
        lost = [order[i] for i in range(later)]
        for op in lost:
            self.fail(op, "lost: UC dropped it (its receive WR got a later message, op#%d's: "
                      "UC drops a message when one of its packets is lost)" % order[later].n)
        self.fatal = True
        return True

    def on_ud_recv_wc(self, rb, q, wc):
        """A UD receive: the message it carries is found among those in flight to this QP
        (UD does not order messages from different QPs), then checked as any receive, plus
        src_qp, pkey_index, sl, IBV_WC_GRH and the GRH area."""
        side = rb.region.side
        if wc.qp_num != q.qp.qp_num:
            self.fail(None, "%s: receive completion qp_num %d on the CQ of QP %d" %
                      (side.label(), wc.qp_num, q.qp.qp_num))
        posted = self.ud_posted.get((side.tag, q.qp.qp_num))
        if posted is not None:
            if posted and posted[0] is rb:
                posted.popleft()
            else:
                self.fail(None, "%s: QP %d completed receive wr_id %d, want wr_id %s: receive "
                          "WRs consumed out of order" % (side.label(), q.qp.qp_num, wc.wr_id,
                                                         posted[0].wr_id if posted else "none"))
                if rb in posted:
                    posted.remove(rb)
        order = self.rq_order[(side.tag, q.qp.qp_num)]
        if wc.status != e.IBV_WC_SUCCESS:
            op = order.popleft() if order else None
            if not (self.fatal and wc.status == e.IBV_WC_WR_FLUSH_ERR):
                self.fail(op, "%s: receive completion status %s (vendor_err 0x%x)" %
                          (side.label(), status_name(wc.status), wc.vendor_err))
            self.fatal = True
            if op is None:
                del side.busy[rb.region.key]
            else:
                op.recv = rb
                self.step(op)
            return
        imm = wc.imm_data if wc.wc_flags & e.IBV_WC_WITH_IMM else None
        # The message: from the QP src_qp names, best the one whose bytes are in the buffer
        # and whose size and immediate the completion gives, else the oldest.
        cands = [o for o in order if o.qreq.qp.qp_num == wc.src_qp]
        r = rb.region

        def score(o):
            n = min(o.size, r.capacity - GRH_LEN)
            return (r.gather(GRH_LEN + n)[GRH_LEN:] == o.data, o.imm == imm,
                    o.size + GRH_LEN == wc.byte_len)
        op = max(cands, key=score) if cands else None  # max keeps the first of equals
        if op is None:
            self.fail(None, "%s: receive completion (wr_id %d, QP %d, src_qp %d, byte_len %d, "
                      "imm %s, wc_flags 0x%x): src_qp is no QP with a message in flight to it "
                      "(%d in flight)" % (side.label(), wc.wr_id, q.qp.qp_num, wc.src_qp,
                                          wc.byte_len, "none" if imm is None else "0x%08x" % imm,
                                          wc.wc_flags, len(order)))
            del side.busy[r.key]
            self.fatal = True
            return
        order.remove(op)
        op.recv = rb
        byte_len = wc.byte_len
        if "byte_len" in self.inject:
            self.inject.discard("byte_len")
            self.info("injecting a wrong byte_len into op#%d's receive completion" % op.n)
            byte_len += 1
        if byte_len != op.size + GRH_LEN:
            self.fail(op, "receive completion byte_len %d, want %d (payload + 40)" %
                      (byte_len, op.size + GRH_LEN))
        if op.imm is not None and "imm" in self.inject:
            self.inject.discard("imm")
            self.info("injecting a wrong immediate into op#%d's receive completion" % op.n)
            imm ^= 0x80
        if imm != op.imm:
            self.fail(op, "receive completion immediate %s, want %s" %
                      ("none" if imm is None else "0x%08x" % imm,
                       "none" if op.imm is None else "0x%08x" % op.imm))
        if wc.opcode != e.IBV_WC_RECV:
            self.fail(op, "receive completion opcode %d, want %d" % (wc.opcode, e.IBV_WC_RECV))
        if not wc.wc_flags & e.IBV_WC_GRH:
            self.fail(op, "receive completion wc_flags 0x%x: no IBV_WC_GRH" % wc.wc_flags)
        if wc.wc_flags & e.IBV_WC_WITH_INV:
            self.fail(op, "receive completion wc_flags 0x%x: WITH_INV set" % wc.wc_flags)
        if wc.pkey_index != 0 or wc.sl != 0:
            self.fail(op, "receive completion pkey_index %d sl %d, want 0 and 0" %
                      (wc.pkey_index, wc.sl))
        grh = r.gather(GRH_LEN)
        self.check_grh(op, grh)
        r.want = r.overlay(grh + op.data)
        self.step(op)

    def check_grh(self, op, grh):
        """The GRH area of a UD receive: the network header of the packet (RoCEv2, Annex 17)."""
        src, dst = op.req.gid, op.resp.gid
        # RoCEv2 after the IP header: UDP 8, BTH 12, DETH 8, ImmDt 4, payload, pad, ICRC 4.
        ib_len = 8 + 12 + 8 + (4 if op.imm is not None else 0) + op.size + (-op.size % 4) + 4
        bad = []
        if src.ipv4_mapped is not None:
            ip = grh[20:]
            if ip[0] != 0x45:
                bad.append("version/IHL 0x%02x, want 0x45" % ip[0])
            if ip[9] != 17:
                bad.append("protocol %d, want 17 (UDP)" % ip[9])
            if int.from_bytes(ip[2:4], "big") != 20 + ib_len:
                bad.append("total length %d, want %d" % (int.from_bytes(ip[2:4], "big"),
                                                         20 + ib_len))
            csum = sum(int.from_bytes(ip[i:i + 2], "big") for i in range(0, 20, 2))
            while csum > 0xFFFF:
                csum = (csum & 0xFFFF) + (csum >> 16)
            if csum != 0xFFFF:
                bad.append("header checksum does not add up")
            for what, got, want in (("source", ip[12:16], src.ipv4_mapped),
                                    ("destination", ip[16:20], dst.ipv4_mapped)):
                if got != want.packed:
                    bad.append("%s %s, want %s" % (what, ipaddress.IPv4Address(got), want))
        else:
            if grh[0] >> 4 != 6:
                bad.append("IP version %d, want 6" % (grh[0] >> 4))
            if grh[6] != 17:
                bad.append("next header %d, want 17 (UDP)" % grh[6])
            if int.from_bytes(grh[4:6], "big") != ib_len:
                bad.append("payload length %d, want %d" % (int.from_bytes(grh[4:6], "big"),
                                                           ib_len))
            for what, got, want in (("source", grh[8:24], src), ("destination", grh[24:40],
                                                                   dst)):
                if got != want.packed:
                    bad.append("%s %s, want %s" % (what, ipaddress.IPv6Address(got), want))
        if bad:
            self.fail(op, "GRH area (%s): %s" % (grh.hex(), "; ".join(bad)))

    def step(self, op):
        op.waiting -= 1
        if op.waiting > 0:
            return
        self.outstanding.discard(op)
        if self.gone(op):
            # Its buffers stay taken: a stopped pair's packets may still land in them.
            self.abandoned.append(op)
            return
        self.finish(op)

    def finish(self, op):
        """Both completions are in: every buffer of the operation must hold what it should."""
        if self.args.qp_type == "uc" and op.kind == "write" and op.deadline is None:
            # No completion at the responder says when a UC Write landed: wait until its
            # target holds the data (or --timeout passes; `land` finishes it).
            op.deadline = time.monotonic() + self.args.timeout
            if not self.landed(op):
                self.landing.append(op)
                return
        self.counts["refused" if op.expect_refusal else op.kind] += 1
        if not op.expect_refusal:
            self.moved += op.size
        regions = [r for r, _ in op.regions]
        if op.recv is not None:
            regions.append(op.recv.region)
        if "data" in self.inject or "canary" in self.inject or "old" in self.inject:
            self.injected(op, regions)
        for r in regions:
            if r.role in ("local", "source") and r.want is r.pre:
                what = "source buffer changed"
            elif r.role == "result":
                what = "returned original value"
            elif r.role == "target" and op.kind in ATOMIC_OPS:
                what = "atomic target after the operation"
            elif op.expect_refusal and r.role == "target":
                what = "memory behind the invalidated R_Key changed"
            else:
                what = "%s buffer" % r.role
            self.verify(op, r, what, op.size)
        self.release(op)

    def landed(self, op):
        """Whether every target of `op` holds what it must."""
        return all(r.side.mr.read(r.size, r.start) == r.want
                   for r, _ in op.regions if r.role == "target")

    def land(self):
        """Finishes the UC Writes that landed, or whose time is up (they then fail)."""
        now = time.monotonic()
        if self.fatal:
            self.landing = []
            return False
        for op in list(self.landing):
            if self.landed(op) or now > op.deadline:
                self.landing.remove(op)
                if now > op.deadline:
                    op.note = "its target did not get the data in %.0f s (lost?)" % \
                        self.args.timeout
                self.finish(op)
        return bool(self.landing)

    def injected(self, op, regions):
        """--inject: corrupts what the checks are about to read, to show they catch it."""
        for r in regions:
            dst = r.want is not r.pre
            if "old" in self.inject and r.role == "result":
                kind, off = "old", r.pieces[0][0]
            elif "data" in self.inject and dst and r.role != "result":
                # A UD receive buffer's message starts behind the GRH area.
                kind, off = "data", r.offset_of(GRH_LEN if self.ud else 0)
            elif "canary" in self.inject and dst:
                kind, off = "canary", r.start
            else:
                continue
            self.inject.discard(kind)
            self.info("injecting: flipping MR byte 0x%x (%s) of op#%d before the check" %
                      (off, kind, op.n))
            b = r.side.mr.read(1, off)
            r.side.mr.write(bytes([b[0] ^ 0x10]), 1, off)
            return

    def drive(self, todo, inv=None):
        """Posts `todo` (list of Ops yet unposted) keeping up to --window in flight, and
        processes completions until all are done or something failed for good. With `inv` (a
        deque of Send with Invalidate specs), one of them runs every --inv-every seconds in
        between, until --until's file exists."""
        todo = collections.deque(todo)
        last = time.monotonic()
        next_inv = last + (self.args.inv_every or 0)
        idle = 0
        while (todo and not self.fatal) or self.outstanding or self.landing:
            if self.landing:
                self.land()
            if inv and not self.fatal and not self.stopping() and time.monotonic() >= next_inv:
                self.run_inv([inv.popleft()])
                last = next_inv = time.monotonic()
                next_inv += self.args.inv_every
                continue
            if todo and self.stopping() and not self.inv_running:
                self.info("%s exists: %d operations left unposted" % (self.args.until, len(todo)))
                todo.clear()
            while todo and not self.fatal and \
                    len(self.outstanding) + len(self.landing) < self.args.window:
                if self.gone(todo[0]):
                    todo.popleft()
                    self.unposted += 1
                    continue
                if not self.post(todo[0]):
                    if not self.outstanding and not self.landing:
                        raise SetupError("op#%d does not fit the MRs (--mr-size)" % todo[0].n)
                    break
                todo.popleft()
            if self.poll():
                last = time.monotonic()
                idle = 0
                continue
            if not self.outstanding and not (todo and not self.fatal):
                # Only UC Writes waiting to land (`land` ends each by its deadline).
                time.sleep(0.001)
                continue
            quiet = time.monotonic() - last
            limit = 2.0 if self.fatal else self.args.timeout
            if quiet > limit:
                if not self.fatal:
                    for op in sorted(self.outstanding, key=lambda o: o.n)[:5]:
                        if op.sent and self.args.qp_type != "rc":
                            self.fail(op, "lost: the send completed, no receive completion "
                                      "came in %.0f s (%s does not retransmit; on a clean "
                                      "link nothing may be lost)" %
                                      (quiet, self.args.qp_type.upper()))
                        else:
                            self.fail(op, "no completion for %.0f s (%d operations "
                                      "outstanding)" % (quiet, len(self.outstanding)))
                    self.fatal = True
                break
            idle += 1
            time.sleep(0.0002 if idle < 100 else 0.002)

    # ---- Send with Invalidate ----

    def wait_wc(self, box, what, op):
        """The first completion `on_wc` put in `box`, or None after --timeout."""
        end = time.monotonic() + self.args.timeout
        while not box and time.monotonic() < end:
            if not self.poll():
                time.sleep(0.001)
        if not box:
            self.fail(op, "%s: no completion" % what)
            self.fatal = True
            return None
        return box[0]

    def stopping(self):
        """Whether --until's file exists: post nothing new."""
        return bool(self.args.until) and os.path.exists(self.args.until)

    def run_inv(self, specs):
        """Send with Invalidate, one at a time on a fresh QP pair each: bind a type 2 MW of the
        responder, Write through it, Send with Invalidate naming it, Write through it again
        (must be refused), and drop the pair (the refusal leaves it in the error state)."""
        for size, d in specs:
            if self.fatal or self.stopping():
                return
            pair = self.new_pair()
            # A Send with Invalidate's steps belong together: --until waits for them.
            self.inv_running = True
            try:
                self.one_inv(size, d, pair)
            finally:
                self.inv_running = False
                self.close_pair(pair)

    def one_inv(self, size, d, pair):
        """One Send with Invalidate on `pair` (see `run_inv`)."""
        bind = self.new_op("write", size, d, pair)
        resp = bind.resp
        mwr = self.region(bind, resp, [size], "target", None, owned=False)
        if mwr is None:
            raise SetupError("the memory window does not fit %s's MR" % resp.name)
        # A new window each time: pyverbs cannot tell a window its R_Key changed on a bind, and
        # a second bind would name the stale one.
        mw = MW(resp.pd, e.IBV_MW_TYPE_2)
        try:
            self.inv_steps(bind, mwr, mw, pair)
        finally:
            del resp.busy[mwr.key]
            mw.close()

    def inv_steps(self, bind, mwr, mw, pair):
        resp, size, d = bind.resp, bind.size, "a2b" if bind.req is self.a else "b2a"
        box = []
        wr = SendWR(wr_id=self.wr_id("bind", box), opcode=e.IBV_WR_BIND_MW,
                    send_flags=e.IBV_SEND_SIGNALED)
        wr.set_bind_wr(mw, MWBindInfo(resp.mr, resp.mr.buf + mwr.pieces[0][0], size,
                                      e.IBV_ACCESS_REMOTE_WRITE))
        rkey = wr.rkey
        bind.note = "MW rkey 0x%08x" % rkey
        try:
            bind.qresp.qp.post_send(wr)
        except PyverbsError as ex:
            self.fail(bind, "posting the type 2 MW bind failed: %s" % ex)
            self.fatal = True
            return
        wc = self.wait_wc(box, "MW bind", bind)
        if wc is None:
            return
        if wc.status != e.IBV_WC_SUCCESS or wc.opcode != e.IBV_WC_BIND_MW:
            self.fail(bind, "MW bind completion status %s opcode %d" %
                      (status_name(wc.status), wc.opcode))
            self.fatal = True
            return
        # The window works: a Write through it lands.
        bind.regions = [(mwr, False)]
        if not self.post(bind, rkey=rkey, target=mwr):
            raise SetupError("op#%d does not fit the MRs (--mr-size)" % bind.n)
        self.drive([])
        if self.fatal:
            return
        inv = self.new_op("send_inv", size, d, pair)
        inv.inv_rkey = rkey
        inv.note = "invalidates 0x%08x" % rkey
        self.drive([inv])
        if self.fatal:
            return
        # Gone: the same Write is refused and leaves the window's memory as it was.
        probe = self.new_op("write", size, d, pair)
        probe.expect_refusal = True
        probe.note = "through invalidated rkey 0x%08x" % rkey
        mwr.pre = mwr.want = bytearray(resp.shadow[mwr.start:mwr.end])
        probe.regions = [(mwr, False)]
        if not self.post(probe, rkey=rkey, target=mwr):
            raise SetupError("op#%d does not fit the MRs (--mr-size)" % probe.n)
        self.drive([])

    # ---- the run ----

    def plan(self, ops, sizes, dirs):
        main, inv = [], []
        r = self.rng
        for _ in range(self.args.iters):
            for d in dirs:
                for k in ops:
                    for s in sizes:
                        size = 8 if k in ATOMIC_OPS else s
                        (inv if k == "send_inv" else main).append((k, size, d))
                for _ in range(self.args.random):
                    k = r.choice(ops)
                    size = 8 if k in ATOMIC_OPS else \
                        max(1, int(round(2 ** r.uniform(0, max(sizes).bit_length()))))
                    size = min(size, max(sizes))
                    (inv if k == "send_inv" else main).append((k, size, d))
        r.shuffle(main)
        return main, inv

    def run(self, devs, gids, ops, sizes, dirs):
        main, inv = self.plan(ops, sizes, dirs)
        recv_sizes = [s for k, s, _ in main + inv if k in SEND_OPS]
        self.srq_cap = (max(recv_sizes) if recv_sizes else 1) + SLACK_MAX
        self.big = max([s for _, s, _ in main + inv] + [self.srq_cap])
        if self.args.mr_size is None:
            self.args.mr_size = default_mr_size(self.big)
        self.setup(devs, gids, ops, dirs)
        # Built before the line below, which callers wait for as the start of the traffic: a
        # slow guest takes a minute to build a long --random run's operations.
        todo = [self.new_op(k, s, d) for k, s, d in main]
        self.info("%s, %s MTU %d, ops %s, sizes %s, dir %s, window %d, %d %s%s, "
                  "MR %d MiB, %d operations" %
                  (self.args.qp_type.upper(), "port" if self.ud else "path", self.args.mtu,
                   ",".join(ops), ",".join(str(s) for s in sizes),
                   "+".join(dirs), self.args.window, self.args.qps,
                   "QPs a side" if self.ud else "QP pair" if self.args.qps == 1 else
                   "QP pairs", ", receives on an SRQ" if self.args.srq
                   else "", self.args.mr_size >> 20, len(main) + len(inv)))
        t0 = time.monotonic()
        specs = collections.deque((s, d) for _, s, d in inv)
        self.drive(todo, specs if self.args.until and self.args.inv_every else None)
        if specs and not self.fatal:
            self.run_inv(specs)
        if not self.fatal:
            for s in (self.a, self.b):
                self.whole(s)
        else:
            self.info("a completion failed: the QPs are in the error state, stopped there")
        for q in sorted(self.dead - self.why_dead, key=lambda q: q.qp.qp_num):
            if q.tag == "a":
                self.fail(None, "QP %d (side A) and its peer were flushed without an error "
                          "completion to say why" % q.qp.qp_num)
        if self.args.isolate:
            self.info("isolated: %d of %d QP pairs stopped at an error completion, %d operations "
                      "left unposted, %d failures other than error completions" %
                      (len(self.dead) // 2, len(self.pairs), self.unposted,
                       self.failures - self.status_failures))
        self.wall = time.monotonic() - t0
        if self.inject:
            raise SetupError("--inject %s: no operation to inject into" % ",".join(self.inject))

    def whole(self, s):
        """The whole MR against the model: nothing wrote where no operation was aimed."""
        step = 4 << 20
        bad = 0
        # What a stopped pair's unfinished operations may have written is unknown: the model
        # takes what is there.
        for op in self.abandoned:
            regions = [r for r, _ in op.regions]
            regions += [b.region for b in (op.recv, op.posted_recv) if b is not None]
            for r in regions:
                if r.side is s:
                    s.shadow[r.start:r.end] = s.mr.read(r.size, r.start)
        model = memoryview(s.shadow)  # slices without copies
        for off in range(0, s.size, step):
            n = min(step, s.size - off)
            got = s.mr.read(n, off)
            self.checked += n
            if got != model[off:off + n]:
                i, count = first_diff(got, s.shadow[off:off + n])
                bad += count
                if bad == count:
                    self.fail(None, "%s: the MR changed where no operation wrote, first at "
                              "offset 0x%x: got 0x%02x, want 0x%02x" %
                              (s.label(), off + i, got[i], s.shadow[off + i]))
        if bad:
            self.fail(None, "%s: %d bytes of the MR changed outside every operation's buffers"
                      % (s.label(), bad))


def main():
    p = argparse.ArgumentParser(
        prog="traffic.py", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="RC, UC or UD traffic between two RDMA devices with every byte, canary "
        "and completion checked.", epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("dev_a", metavar="DEV_A", help="first device (side A)")
    p.add_argument("dev_b", metavar="DEV_B", help="second device (side B)")
    p.add_argument("--gid-a", metavar="IDX|ADDR", help="A's port-1 GID: an index, or an IP "
                   "address whose RoCE v2 GID to use (default: the first IPv4 RoCE v2 GID)")
    p.add_argument("--gid-b", metavar="IDX|ADDR", help="the same for B")
    p.add_argument("--qp-type", default="rc", choices=sorted(QP_TYPES),
                   help="the transport (default rc)")
    p.add_argument("--ops", default="auto",
                   help="comma-separated from %s (UC: %s; UD: %s); 'all'; or 'auto' (default): "
                   "every op the transport has and the responders support" %
                   (",".join(OPS), ",".join(QP_OPS["uc"]), ",".join(QP_OPS["ud"])))
    p.add_argument("--sizes",
                   help="message sizes, comma-separated (default %s; UD: %s); atomics are "
                   "always 8 bytes" % (DEFAULT_SIZES, DEFAULT_SIZES_UD))
    p.add_argument("--iters", type=int, default=1,
                   help="how many times each op runs with each size, per direction")
    p.add_argument("--random", type=int, default=0, metavar="N",
                   help="N more ops per iteration and direction, random op and size")
    p.add_argument("--mtu", type=int, choices=sorted(MTUS),
                   help="path MTU of RC and UC (default 1024); UD uses the ports' active MTU")
    p.add_argument("--dir", default="both", choices=("a2b", "b2a", "both"),
                   help="who is the requester: A (a2b), B (b2a) or both, interleaved")
    p.add_argument("--window", type=int, default=16, help="operations in flight (default 16)")
    p.add_argument("--qps", type=int, default=1,
                   help="QP pairs to spread the ops over (UD: QPs on each side)")
    p.add_argument("--srq", action="store_true",
                   help="the responders' receives go to a shared receive queue")
    p.add_argument("--max-sge", type=int, default=0,
                   help="at most this many SGEs per WR (default: the device maximum)")
    p.add_argument("--mr-size", type=parse_bytes, metavar="SIZE",
                   help="each side's MR (default: 16 of the largest buffers, 8M to 64M)")
    p.add_argument("--seed", type=int, help="replay the run of this seed")
    p.add_argument("--timeout", type=float, default=60.0,
                   help="seconds without any completion before giving up (default 60)")
    p.add_argument("--until", metavar="FILE",
                   help="stop posting once FILE exists (what is in flight completes and is "
                   "checked, and the MRs compared whole): a run as long as something else")
    p.add_argument("--inv-every", type=float, default=0, metavar="SECS",
                   help="with --until: one Send with Invalidate every SECS seconds while the "
                   "other operations run (else they all run after the others, and --until's "
                   "file, once it exists, ends them)")
    p.add_argument("--lossy", action="store_true",
                   help="the link loses packets: a Write through an invalidated R_Key may end in "
                   "RETRY_EXC_ERR (its NAK lost, the responder's QP in the error state), a refusal")
    p.add_argument("--isolate", action="store_true",
                   help="an error completion stops only its QP pair (its other operations are "
                   "not posted, what its unfinished ones may have written is left out of the "
                   "checks) while the other pairs go on; a last line counts the failures other "
                   "than error completions (RC without --srq)")
    p.add_argument("--inject", default="", metavar="KINDS",
                   help="self-test: corrupt what the checks read, once per kind (%s); the run "
                   "must then fail" % ",".join(INJECT_KINDS))
    args = p.parse_args()
    args.inject = [k for k in args.inject.split(",") if k]
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little")
    print("traffic: seed %d (replay with --seed %d)" % (seed, seed), flush=True)
    t = Traffic(args, seed)
    try:
        for k in args.inject:
            if k not in INJECT_KINDS:
                raise SetupError("--inject: unknown kind %r" % k)
        if args.isolate and (args.qp_type != "rc" or args.srq):
            raise SetupError("--isolate: RC QP pairs with receive queues of their own only")
        if args.window < 1 or args.qps < 1 or args.iters < 0 or args.random < 0:
            raise SetupError("--window and --qps must be at least 1")
        set_mtu(args)
        sizes = sorted(set(parse_size(s, args.mtu) for s in args.sizes.split(",") if s))
        if not sizes:
            raise SetupError("--sizes is empty")
        if args.qp_type == "ud" and sizes[-1] > args.mtu:
            raise SetupError("--sizes: a UD message is one packet, at most the ports' active "
                             "MTU (%d), not %d" % (args.mtu, sizes[-1]))
        dirs = ["a2b", "b2a"] if args.dir == "both" else [args.dir]
        gids = (gid_index(args.dev_a, args.gid_a), gid_index(args.dev_b, args.gid_b))
        ops = select_ops(args, dirs)
        t.run((args.dev_a, args.dev_b), gids, ops, sizes, dirs)
    except SetupError as ex:
        print("traffic: ERROR: %s" % ex, flush=True)
        sys.exit(2)
    except PyverbsError as ex:
        print("traffic: ERROR: %s" % ex, flush=True)
        sys.exit(2)
    counts = ", ".join("%s %d" % (k, t.counts[k]) for k in OPS + ("refused",) if t.counts[k])
    verdict = "PASS" if t.failures == 0 else "FAIL"
    print("traffic: %s: %s, %d operations (%s), %.1f MiB moved, %.1f MiB checked, up to %d in "
          "flight, %d failure%s, seed %d, %.1f s" %
          (verdict, args.qp_type.upper(), sum(t.counts.values()), counts or "none", t.moved / 2**20,
           t.checked / 2**20, t.max_inflight, t.failures, "" if t.failures == 1 else "s", seed,
           t.wall), flush=True)
    sys.exit(0 if t.failures == 0 else 1)


def set_mtu(args):
    """The MTU sizes are relative to: --mtu for RC and UC; for UD, which has no path MTU, the
    smaller of the two ports' active MTUs."""
    if args.qp_type != "ud":
        args.mtu = args.mtu or 1024
        args.sizes = args.sizes or DEFAULT_SIZES
        return
    if args.mtu is not None:
        raise SetupError("--mtu: UD has no path MTU (its messages are limited by the ports' "
                         "active MTU)")
    mtus = []
    for name in (args.dev_a, args.dev_b):
        ctx = Context(name=name)
        try:
            mtus.append(ctx.query_port(1).active_mtu)
        finally:
            ctx.close()
    args.mtu = [k for k, v in MTUS.items() if v == min(mtus)][0]
    args.sizes = args.sizes or DEFAULT_SIZES_UD


def select_ops(args, dirs):
    """The ops to run; 'auto' leaves out what a responder cannot do (and says so)."""
    names = {"a2b": args.dev_b, "b2a": args.dev_a}
    have = QP_OPS[args.qp_type]
    want = args.ops.split(",") if args.ops not in ("auto", "all") else list(have)
    for k in want:
        if k not in OPS:
            raise SetupError("--ops: unknown op %r (%s)" % (k, ",".join(OPS)))
        if k not in have:
            raise SetupError("--ops: %s has no %s (it has %s)" %
                             (args.qp_type.upper(), k, ",".join(have)))
    missing = {}
    if "send_inv" in want:
        for d in dirs:
            why = mw_type2(names[d])
            if why:
                missing["send_inv"] = "%s: %s" % (names[d], why)
    if any(k in want for k in ATOMIC_OPS):
        for d in dirs:
            ctx = Context(name=names[d])
            try:
                if ctx.query_device().atomic_caps == e.IBV_ATOMIC_NONE:
                    for k in ATOMIC_OPS:
                        missing[k] = "%s has no atomics" % names[d]
            finally:
                ctx.close()
    for k, why in missing.items():
        if k not in want:
            continue
        if args.ops != "auto":
            raise SetupError("%s cannot run: %s" % (k, why))
        print("traffic: %s left out: %s" % (k, why), flush=True)
        want.remove(k)
    if not want:
        raise SetupError("no op to run")
    return want


if __name__ == "__main__":
    main()
