"""Shared by the pyverbs tests: a device side (context, PD, MR) and QPs over the veth pair, with
stock pyverbs only: RC or UC QPs connected to each other, UD QPs brought to RTS."""
import ipaddress
import os
import select
import subprocess
import sys
import time

import pyverbs.enums as e
from pyverbs.addr import AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import SGE, RecvWR, SendWR

ACCESS = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
# The Local ACK Timeout exponent of the QPs made here (4.096 us * 2^14 = 67 ms, as the stock
# tools use); a slower kernel (the debug variant) sets a longer one.
ACK_TIMEOUT = int(os.environ.get("RVRDMA_ACK_TIMEOUT", "14"))


# ibv_wc_status names, for messages ("RETRY_EXC_ERR" rather than 12).
STATUS_NAMES = ("SUCCESS", "LOC_LEN_ERR", "LOC_QP_OP_ERR", "LOC_EEC_OP_ERR", "LOC_PROT_ERR",
                "WR_FLUSH_ERR", "MW_BIND_ERR", "BAD_RESP_ERR", "LOC_ACCESS_ERR",
                "REM_INV_REQ_ERR", "REM_ACCESS_ERR", "REM_OP_ERR", "RETRY_EXC_ERR",
                "RNR_RETRY_EXC_ERR", "LOC_RDD_VIOL_ERR", "REM_INV_RD_REQ_ERR", "REM_ABORT_ERR",
                "INV_EECN_ERR", "INV_EEC_STATE_ERR", "FATAL_ERR", "RESP_TIMEOUT_ERR",
                "GENERAL_ERR")


def status_name(s):
    for n in STATUS_NAMES:
        if getattr(e, "IBV_WC_" + n, None) == s:
            return n
    return str(s)


def gid_index(dev, port, addr):
    """Index of the RoCE v2 GID of IPv4 `addr` on `dev`'s `port` (from sysfs), or None."""
    want = ipaddress.IPv6Address("::ffff:" + addr).exploded
    base = "/sys/class/infiniband/%s/ports/%d/" % (dev, port)
    try:
        names = sorted(os.listdir(base + "gids"), key=int)
    except OSError:
        return None
    for i in names:
        try:
            with open(base + "gid_attrs/types/" + i) as f:
                if f.read().strip() != "RoCE v2":
                    continue
            with open(base + "gids/" + i) as f:
                if f.read().strip() == want:
                    return int(i)
        except OSError:
            continue
    return None


def link_counters(dev, port=1):
    """The port's counters (`rdma statistic show link DEV/PORT`) as a dict; empty when the tool
    fails, so a caller's check reports the missing counter."""
    try:
        out = subprocess.run(["rdma", "statistic", "show", "link", "%s/%d" % (dev, port)],
                             capture_output=True, text=True, timeout=30).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return {}
    return {k: int(v) for k, v in zip(out, out[1:]) if v.isdigit() and not k.isdigit()}


def event_fds():
    """The async event fds ("[infinibandevent]") this process has open."""
    fds = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            if "infinibandevent" in os.readlink("/proc/self/fd/" + fd):
                fds.add(int(fd))
        except OSError:
            pass
    return fds


def check(ok, what):
    """Prints one result line; exits 1 on failure."""
    print(("ok: " if ok else "FAILED: ") + what)
    if not ok:
        sys.exit(1)


def point(ok, desc, why=""):
    """One test point for run_points (lib.sh): "ok DESC" or "not ok DESC: WHY"."""
    print(("ok " + desc) if ok else "not ok %s: %s" % (desc, why), flush=True)


class Dev:
    """An opened device with a PD and an MR (64 KiB unless `mr_size` says otherwise); `gid_index`
    names the port-1 GID its QPs use."""

    def __init__(self, name, gid_index, access=ACCESS, mr_size=65536):
        before = event_fds()
        self.ctx = Context(name=name)
        fds = event_fds() - before
        # The context's async event fd (pyverbs does not expose it), to wait with a timeout.
        self.evfd = fds.pop() if len(fds) == 1 else None
        self.gid_index = gid_index
        self.gid = self.ctx.query_gid(1, gid_index)
        self.pd = PD(self.ctx)
        self.mr = MR(self.pd, mr_size, access)

    def events(self, n):
        """The next `n` async event types (already queued, so the call does not block; if one
        never comes the caller's timeout fails the test)."""
        got = []
        for _ in range(n):
            ev = self.ctx.get_async_event()
            got.append(ev.event_type)
            ev.ack()
        return got

    def event_pending(self, secs):
        """Whether an async event is queued, waiting up to `secs` for one."""
        if self.evfd is None:
            raise RuntimeError("the async event fd of this context is unknown")
        return bool(select.select([self.evfd], [], [], secs)[0])

    def event(self, want, what):
        """Checks that the next async event is `want`."""
        got = self.events(1)[0]
        check(got == want, "%s: event %d (want %d)" % (what, got, want))


class Qp:
    """A QP (RC unless `qp_type` says otherwise) with its own CQ (send and receive), `depth` WRs
    deep on each queue, with up to `send_sge` / `recv_sge` SGEs per WR; with `sig_all` False
    only send WRs flagged IBV_SEND_SIGNALED complete visibly."""

    def __init__(self, dev, cqe=64, srq=None, depth=16, send_sge=1, recv_sge=1,
                 qp_type=e.IBV_QPT_RC, sig_all=True):
        self.dev = dev
        self.qp_type = qp_type
        self.cq = CQ(dev.ctx, cqe)
        cap = QPCap(max_send_wr=depth, max_recv_wr=depth, max_send_sge=send_sge,
                    max_recv_sge=recv_sge)
        kw = dict(qp_type=qp_type, scq=self.cq, rcq=self.cq, cap=cap,
                  sq_sig_all=1 if sig_all else 0)
        if srq is not None:
            kw["srq"] = srq
        self.qp = QP(dev.pd, QPInitAttr(**kw))

    def to_init(self, access=ACCESS, qkey=None, pkey_index=0):
        """Reset -> Init on port 1; a UD QP takes `qkey` instead of `access`."""
        a = QPAttr()
        a.qp_state = e.IBV_QPS_INIT
        a.pkey_index = pkey_index
        a.port_num = 1
        mask = e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT
        if self.qp_type == e.IBV_QPT_UD:
            a.qkey = qkey
            mask |= e.IBV_QP_QKEY
        else:
            a.qp_access_flags = access
            mask |= e.IBV_QP_ACCESS_FLAGS
        self.qp.modify(a, mask)

    def open_ud(self, qkey, pkey_index=0):
        """A UD QP: Reset -> Init (Q_Key `qkey`) -> RTR -> RTS."""
        self.to_init(qkey=qkey, pkey_index=pkey_index)
        a = QPAttr()
        a.qp_state = e.IBV_QPS_RTR
        self.qp.modify(a, e.IBV_QP_STATE)
        a = QPAttr()
        a.qp_state = e.IBV_QPS_RTS
        a.sq_psn = 0
        self.qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_SQ_PSN)

    def to_rtr(self, peer, min_rnr_timer=12, extra=None, mtu=e.IBV_MTU_1024):
        """Init -> RTR on port 1 towards `peer` with path MTU `mtu` (an IBV_MTU_* value);
        `extra(attr)` may set more attributes and returns their mask bits."""
        a = QPAttr()
        a.qp_state = e.IBV_QPS_RTR
        a.path_mtu = mtu
        a.dest_qp_num = peer.qp.qp_num
        a.rq_psn = 0
        a.max_dest_rd_atomic = 4
        a.min_rnr_timer = min_rnr_timer
        gr = GlobalRoute(dgid=peer.dev.gid, sgid_index=self.dev.gid_index)
        a.ah_attr = AHAttr(gr=gr, is_global=1, port_num=1)
        mask = (e.IBV_QP_STATE | e.IBV_QP_AV | e.IBV_QP_PATH_MTU | e.IBV_QP_DEST_QPN |
                e.IBV_QP_RQ_PSN)
        if self.qp_type != e.IBV_QPT_UC:
            # UC has no RDMA Reads or RNR NAKs: ib_core refuses these attributes on it.
            mask |= e.IBV_QP_MAX_DEST_RD_ATOMIC | e.IBV_QP_MIN_RNR_TIMER
        self.qp.modify(a, mask | (extra(a) if extra else 0))

    def to_rts(self, timeout=None, retry_cnt=7, rnr_retry=7, extra=None):
        """RTR -> RTS; `extra` as for `to_rtr`. `timeout` is the Local ACK Timeout exponent
        (default: $RVRDMA_ACK_TIMEOUT, else 14 = 67 ms)."""
        a = QPAttr()
        a.qp_state = e.IBV_QPS_RTS
        a.timeout = ACK_TIMEOUT if timeout is None else timeout
        a.retry_cnt = retry_cnt
        a.rnr_retry = rnr_retry
        a.sq_psn = 0
        a.max_rd_atomic = 4
        mask = e.IBV_QP_STATE | e.IBV_QP_SQ_PSN
        if self.qp_type != e.IBV_QPT_UC:
            # UC: no acknowledgements, so no timeout, retries or Reads in flight.
            mask |= (e.IBV_QP_TIMEOUT | e.IBV_QP_RETRY_CNT | e.IBV_QP_RNR_RETRY |
                     e.IBV_QP_MAX_QP_RD_ATOMIC)
        self.qp.modify(a, mask | (extra(a) if extra else 0))

    def connect(self, peer, mtu=e.IBV_MTU_1024, access=ACCESS, **rts):
        """Reset -> Init -> RTR -> RTS towards `peer`; `access` is the QP's remote access,
        `rts` goes to `to_rts`."""
        self.to_init(access)
        self.to_rtr(peer, mtu=mtu)
        self.to_rts(**rts)

    def close(self):
        """Destroys the QP, then its CQ."""
        self.qp.close()
        self.cq.close()

    def recv(self, n=1, length=4096):
        for _ in range(n):
            self.qp.post_recv(RecvWR(num_sge=1,
                                     sg=[SGE(self.dev.mr.buf, length, self.dev.mr.lkey)]))

    def send_wr(self, length=64):
        return SendWR(opcode=e.IBV_WR_SEND, num_sge=1,
                      sg=[SGE(self.dev.mr.buf, length, self.dev.mr.lkey)])

    def send(self, n=1, length=64):
        for _ in range(n):
            self.qp.post_send(self.send_wr(length))

    def write(self, rkey, addr, n=1):
        for _ in range(n):
            wr = SendWR(opcode=e.IBV_WR_RDMA_WRITE, num_sge=1,
                        sg=[SGE(self.dev.mr.buf, 64, self.dev.mr.lkey)])
            wr.set_wr_rdma(rkey, addr)
            self.qp.post_send(wr)

    def poll(self, secs=5.0):
        """The next completion, or None after `secs`."""
        end = time.time() + secs
        while time.time() < end:
            n, wcs = self.cq.poll()
            if n:
                return wcs[0]
            time.sleep(0.001)
        return None
