#!/usr/bin/python3
"""Datagrams that must go nowhere, from stock pyverbs: UD QP A (on DEV_A) sends to UD QP B (on
DEV_B) over the veth pair. Each case checks what the sender and the receiver see, and that the
QPs are undisturbed: both stay in RTS and a good Send afterwards lands intact in B's first
receive WR.

  qkey     Sends whose DETH:Q_Key is not B's QP's Q_Key: the sender's completions succeed (a UD
           sender cannot know), B silently drops them (no receive WR consumed) and counts them:
           the port's Q_Key violation counter (PortInfo:Q_KeyViolations, ibv_query_port's
           qkey_viol_cntr; rdma_rxe counts there) goes up by as many;
  mtu      a Send one byte longer than the port's MTU (and one of 2 x MTU): IBA C10-93.1.1, "the
           CI shall not emit any packets for this message. Further, the CI shall not generate
           an error due to this condition" (rdma_rxe quotes it): a successful completion, nothing
           on the wire;
  noarp    an address handle for an address on the link that nobody answers ARP for: ib_core
           resolves an AH's MAC address when the AH is created, so the create fails (the errno
           and the time it took are printed);
  nohost   an address handle for an address whose MAC (a static neighbour entry, set up by the
           caller) nobody has: the Sends complete successfully and go nowhere;
  noroute  an address handle for an address reached through a route (via B) that is deleted
           after the AH was made: the Sends complete successfully and are lost (a route lookup
           bound to the netdev takes an address with no route as on-link, and its ARP goes
           unanswered; a lookup that failed would drop it too), and Sends through the good AH
           behind them still go;
  pkey     a UD QP on P_Key index 1: refused (a RoCE port has a P_Key table of one entry,
           0xFFFF), so a wrong P_Key cannot be put on the wire through the verbs.

Each case runs on fresh QPs. Prints "ok DESC" / "not ok DESC: WHY" per point (tests/vm/lib.sh
run_points; one before the cases, then qkey 4, mtu 6, noarp 1, nohost 3, noroute 2, pkey 1) and
"# ..." lines for what was seen.
usage: ud_bad.py DEV_A GID_INDEX_A DEV_B GID_INDEX_B NOARP_ADDR NOHOST_ADDR [CASE...]
(default: every case). noroute runs `ip` in the network namespace $UD_BAD_NETNS (default rvA) of
DEV_A's netdev ($UD_BAD_NETDEV, default veth0), with B's IPv4 address as the gateway."""
import errno
import ipaddress
import os
import subprocess
import sys
import time

import pyverbs.enums as e
from pyverbs.addr import AH, AHAttr, GID, GlobalRoute
from pyverbs.pyverbs_error import PyverbsError, PyverbsRDMAError
from pyverbs.wr import SGE, RecvWR, SendWR

from rcpair import Dev, Qp, link_counters

QKEY_A, QKEY_B = 0x1A2B3C4D, 0x0BADCAFE
RECV_LEN = 40 + 4096
MTU_BYTES = {e.IBV_MTU_256: 256, e.IBV_MTU_512: 512, e.IBV_MTU_1024: 1024,
             e.IBV_MTU_2048: 2048, e.IBV_MTU_4096: 4096}
failed = False


def point(ok, what, why=""):
    global failed
    print(("ok " if ok else "not ok ") + what + ("" if ok or not why else ": " + why),
          flush=True)
    failed |= not ok


def note(what):
    print("# " + what, flush=True)


def gid_of(addr):
    a = ipaddress.ip_address(addr)
    if a.version == 4:
        a = ipaddress.IPv6Address("::ffff:" + addr)
    return GID(a.exploded)


class Ud:
    """A UD QP of `dev` in RTS, with `nrecv` receive WRs of RECV_LEN bytes posted at the start
    of its MR (receive i at i * RECV_LEN) and a send buffer behind them."""

    def __init__(self, dev, qkey, nrecv=8):
        self.dev, self.qkey = dev, qkey
        self.q = Qp(dev, cqe=64, depth=32, qp_type=e.IBV_QPT_UD)
        self.q.open_ud(qkey)
        self.qpn = self.q.qp.qp_num
        self.next_recv = 0
        self.last_wc = None  # when the last completion came
        self.send_off = nrecv * RECV_LEN
        for i in range(nrecv):
            self.q.qp.post_recv(RecvWR(wr_id=1000 + i, num_sge=1, sg=[
                SGE(dev.mr.buf + i * RECV_LEN, RECV_LEN, dev.mr.lkey)]))

    def state(self):
        attr, _ = self.q.qp.query(e.IBV_QP_STATE)
        return attr.qp_state

    def send(self, ah, peer, qkey, data, wr_id):
        """Posts a signaled Send of `data`; None, or the post's errno."""
        self.dev.mr.write(data, len(data), self.send_off)
        wr = SendWR(wr_id=wr_id, opcode=e.IBV_WR_SEND, num_sge=1, send_flags=e.IBV_SEND_SIGNALED,
                    sg=[SGE(self.dev.mr.buf + self.send_off, len(data), self.dev.mr.lkey)])
        wr.set_wr_ud(ah, peer.qpn, qkey)
        try:
            self.q.qp.post_send(wr)
        except PyverbsRDMAError as ex:
            return ex.error_code
        return None

    def wcs(self, secs):
        """Every completion until `secs` pass without one."""
        got = []
        wc = self.q.poll(secs)
        while wc is not None:
            got.append(wc)
            self.last_wc = time.monotonic()
            wc = self.q.poll(secs)
        return got


def wc_str(wcs):
    return "; ".join("wr_id %d status %d opcode %d" % (w.wr_id, w.status, w.opcode)
                     for w in wcs) or "none"


def good_send(a, b, ah, what, n):
    """A Send with the right Q_Key lands intact in B's next receive WR, and both QPs are in
    RTS."""
    data = bytes((n * 37 + i * 11) & 0xFF for i in range(200))
    err = a.send(ah, b, b.qkey, data, 500 + n)
    sw = a.wcs(2.0)
    rw = b.wcs(2.0)
    i = b.next_recv
    got = b.dev.mr.read(len(data), i * RECV_LEN + 40)
    ok = (err is None and len(sw) == 1 and sw[0].status == e.IBV_WC_SUCCESS and len(rw) == 1 and
          rw[0].status == e.IBV_WC_SUCCESS and rw[0].wr_id == 1000 + i and
          rw[0].byte_len == 240 and rw[0].src_qp == a.qpn and got == data)
    if ok:
        b.next_recv += 1
    sa, sb = a.state(), b.state()
    point(ok and sa == sb == e.IBV_QPS_RTS,
          "%s: both QPs stay in RTS and a good Send afterwards lands intact in B's next receive "
          "WR" % what,
          "post %s, send completions: %s; receive completions: %s (want wr_id %d, byte_len "
          "240); data %s; QP states A %d B %d (RTS is %d)" %
          (err, wc_str(sw), wc_str(rw), 1000 + i, "intact" if got == data else "wrong", sa, sb,
           e.IBV_QPS_RTS))


def case_qkey(a, b, ah, env):
    dev_b = b.dev.ctx.name
    n = 4
    before = link_counters(dev_b)
    viol0 = b.dev.ctx.query_port(1).qkey_viol_cntr
    errs = [a.send(ah, b, b.qkey ^ 0x00FF0000, b"q" * 64, 100 + k) for k in range(n)]
    sw = a.wcs(1.0)
    point(errs == [None] * n and len(sw) == n and
          all(w.status == e.IBV_WC_SUCCESS for w in sw),
          "wrong Q_Key: the sender's %d Sends complete successfully" % n,
          "posts %s, completions: %s" % (errs, wc_str(sw)))
    rw = b.wcs(2.0)
    point(not rw, "wrong Q_Key: B drops them without a receive completion",
          "receive completions: %s" % wc_str(rw))
    after = link_counters(dev_b)
    viol = b.dev.ctx.query_port(1).qkey_viol_cntr - viol0
    moved = {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
    note("B (%s): qkey_viol_cntr +%d; rdma statistic changes: %s" %
         (dev_b, viol, " ".join("%s+%d" % kv for kv in sorted(moved.items())) or "none"))
    point(viol == n, "wrong Q_Key: B's port counts %d Q_Key violations (qkey_viol_cntr)" % n,
          "qkey_viol_cntr went up by %d" % viol)
    good_send(a, b, ah, "wrong Q_Key", 1)


def case_mtu(a, b, ah, env):
    mtu = MTU_BYTES[a.dev.ctx.query_port(1).active_mtu]
    for size in (mtu + 1, 2 * mtu):
        before = link_counters(a.dev.ctx.name)
        err = a.send(ah, b, b.qkey, bytes(size), 200 + size)
        sw = a.wcs(1.0)
        rw = b.wcs(1.5)
        sent = link_counters(a.dev.ctx.name).get("sent_pkts", 0) - before.get("sent_pkts", 0)
        note("UD Send of %d bytes (port MTU %d): post %s, send completions: %s, receive "
             "completions: %s, A's sent_pkts +%d" %
             (size, mtu, "ok" if err is None else errno.errorcode.get(err, err), wc_str(sw),
              wc_str(rw), sent))
        point(err is None and len(sw) == 1 and sw[0].status == e.IBV_WC_SUCCESS,
              "UD Send of %d bytes > port MTU %d: completes without an error (C10-93.1.1)" %
              (size, mtu), "post %s, completions: %s" % (err, wc_str(sw)))
        point(not rw and "sent_pkts" in before and sent == 0,
              "UD Send of %d bytes: no packet leaves A, nothing arrives at B" % size,
              "A's sent_pkts +%d, receive completions: %s" % (sent, wc_str(rw)))
        good_send(a, b, ah, "UD Send of %d bytes" % size, size)


def case_noarp(a, b, ah, env):
    addr = env["noarp"]
    gr = GlobalRoute(dgid=gid_of(addr), sgid_index=a.dev.gid_index, hop_limit=64)
    t0 = time.monotonic()
    try:
        AH(a.dev.pd, attr=AHAttr(gr=gr, is_global=1, port_num=1)).close()
        err = None
    except PyverbsError as ex:
        err = ex
    secs = time.monotonic() - t0
    code = getattr(err, "error_code", None)
    note("AH for %s (no ARP answer): %s after %.1f s" %
         (addr, "created" if err is None else "%s (%s)" % (
             errno.errorcode.get(code, code), str(err).strip().splitlines()[-1]), secs))
    point(err is not None and secs < 30,
          "AH for %s, which nobody answers ARP for: refused at creation" % addr,
          "created after %.1f s" % secs if err is None else "took %.1f s" % secs)


def case_nohost(a, b, ah_good, env):
    addr = env["nohost"]
    gr = GlobalRoute(dgid=gid_of(addr), sgid_index=a.dev.gid_index, hop_limit=64)
    try:
        ah = AH(a.dev.pd, attr=AHAttr(gr=gr, is_global=1, port_num=1))
    except PyverbsError as ex:
        point(False, "AH for %s (a MAC nobody has): created" % addr, str(ex).strip())
        point(False, "Sends through it complete successfully", "no AH")
        good_send(a, b, ah_good, "AH for a MAC nobody has", 3)
        return
    point(True, "AH for %s (a MAC nobody has): created" % addr)
    n = 3
    errs = [a.send(ah, b, b.qkey, b"n" * 100, 300 + k) for k in range(n)]
    sw = a.wcs(2.0)
    rw = b.wcs(1.0)
    point(errs == [None] * n and len(sw) == n and
          all(w.status == e.IBV_WC_SUCCESS for w in sw) and not rw,
          "%d Sends through it complete successfully and reach no one" % n,
          "posts %s, completions: %s, B's receive completions: %s" %
          (errs, wc_str(sw), wc_str(rw)))
    good_send(a, b, ah_good, "AH for a MAC nobody has", 3)
    ah.close()


def ip_cmd(*args):
    ns = os.environ.get("UD_BAD_NETNS", "rvA")
    r = subprocess.run(["ip", "-n", ns] + list(args), capture_output=True, text=True,
                       timeout=30)
    return r.returncode == 0, (r.stdout + r.stderr).strip()


def case_noroute(a, b, ah_good, env):
    dev = os.environ.get("UD_BAD_NETDEV", "veth0")
    gw = b.dev.gid.gid.split(":")[-2:]
    gw = str(ipaddress.IPv4Address(bytes.fromhex("".join(gw))))
    net, addr = "10.88.0.0/24", "10.88.0.5"
    ok, out = ip_cmd("route", "replace", net, "via", gw, "dev", dev)
    ah = None
    if ok:
        gr = GlobalRoute(dgid=gid_of(addr), sgid_index=a.dev.gid_index, hop_limit=64)
        try:
            ah = AH(a.dev.pd, attr=AHAttr(gr=gr, is_global=1, port_num=1))
        except PyverbsError as ex:
            out = str(ex).strip()
        ok, out2 = ip_cmd("route", "del", net)
        out += out2
    if ah is None or not ok:
        point(False, "Sends through an AH whose route is gone complete", "set-up: " + out)
        good_send(a, b, ah_good, "AH whose route is gone", 4)
        return
    n = 3
    before = link_counters(a.dev.ctx.name)
    t0 = time.monotonic()
    errs = [a.send(ah, b, b.qkey, b"r" * 100, 400 + k) for k in range(n)]
    sw = a.wcs(5.0)
    after = link_counters(a.dev.ctx.name)
    moved = {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
    note("Sends to %s after its route was deleted: posts %s, completions (the last %.2f s after "
         "posting): %s; A's rdma statistic changes: %s" %
         (addr, errs, (a.last_wc or t0) - t0, wc_str(sw),
          " ".join("%s+%d" % kv for kv in sorted(moved.items())) or "none"))
    point(errs == [None] * n and len(sw) == n and all(w.status == e.IBV_WC_SUCCESS for w in sw),
          "%d Sends through an AH whose route is gone complete successfully (and are lost)" % n,
          "posts %s, completions: %s" % (errs, wc_str(sw)))
    good_send(a, b, ah_good, "AH whose route is gone", 4)
    ah.close()


def case_pkey(a, b, ah, env):
    tbl = a.dev.ctx.query_port(1).pkey_tbl_len
    note("%s: P_Key table of %d entr%s" % (a.dev.ctx.name, tbl, "y" if tbl == 1 else "ies"))
    q = Qp(a.dev, qp_type=e.IBV_QPT_UD)
    try:
        q.to_init(qkey=1, pkey_index=tbl)
        err = None
    except PyverbsRDMAError as ex:
        err = ex.error_code
    finally:
        q.close()
    point(err == errno.EINVAL, "UD QP on P_Key index %d (past the table): refused with EINVAL" %
          tbl, "errno %s" % err)


CASES = {"qkey": case_qkey, "mtu": case_mtu, "noarp": case_noarp, "nohost": case_nohost,
         "noroute": case_noroute, "pkey": case_pkey}


def main():
    if len(sys.argv) < 7 or any(c not in CASES for c in sys.argv[7:]):
        sys.exit(__doc__.rsplit("usage: ", 1)[1])
    dev_a, gid_a, dev_b, gid_b, noarp, nohost = sys.argv[1:7]
    env = {"noarp": noarp, "nohost": nohost}
    da = Dev(dev_a, int(gid_a), access=e.IBV_ACCESS_LOCAL_WRITE, mr_size=1 << 20)
    db = Dev(dev_b, int(gid_b), access=e.IBV_ACCESS_LOCAL_WRITE, mr_size=1 << 20)
    gr = GlobalRoute(dgid=db.gid, sgid_index=da.gid_index, hop_limit=64)
    ah = AH(da.pd, attr=AHAttr(gr=gr, is_global=1, port_num=1))
    for i, name in enumerate(["first"] + (sys.argv[7:] or list(CASES))):
        a, b = Ud(da, QKEY_A), Ud(db, QKEY_B)
        if i == 0:
            note("A %s QPN %d, B %s QPN %d Q_Key 0x%08x" % (dev_a, a.qpn, dev_b, b.qpn,
                                                            QKEY_B))
            good_send(a, b, ah, "before the cases", 0)
        else:
            CASES[name](a, b, ah, env)
        a.q.close()
        b.q.close()
    ah.close()
    for d in (da, db):
        d.ctx.close()
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
