#!/usr/bin/python3
"""fio_summary.py: checks and sums up a fio run with verify (its --output-format=json output).

usage: fio_summary.py FIO.json
       fio_summary.py --table LABEL=FIO.json...

Prints one line per job: block size, write IOPS and MB/s, verify-read IOPS and MB/s, the bytes
of each. Exits 1 unless every job wrote something, has no error, and read back for verification
exactly what it wrote: fio skips the verify phase of a job whose write phase ran out of time, and
that must not read as a verified run.

With --table: the figures of several runs, the runs of each block size on adjacent lines.
"""
import json
import sys


def load(path):
    with open(path) as f:
        # fio may print notes before the JSON document.
        text = f.read()
    return json.loads(text[text.index("{"):])


def table(runs):
    rows = {}
    for run in runs:
        label, path = run.split("=", 1)
        try:
            jobs = load(path)["jobs"]
        except (OSError, ValueError, KeyError) as e:
            print(f"{label}: no figures ({e})")
            continue
        for j in jobs:
            bs = j.get("job options", {}).get("bs", "?")
            rows.setdefault(bs, []).append((label, j["write"], j["read"], j["error"]))
    print(f"{'bs':<5} {'run':<12} {'write IOPS':>10} {'MB/s':>8} {'verify IOPS':>11} {'MB/s':>8}")
    for bs, lines in rows.items():
        for label, w, r, err in lines:
            note = f"  (error {err})" if err else ""
            print(
                f"{bs:<5} {label:<12} {w['iops']:>10.0f} {w['bw_bytes'] / 1e6:>8.2f} "
                f"{r['iops']:>11.0f} {r['bw_bytes'] / 1e6:>8.2f}{note}"
            )


def main():
    if sys.argv[1] == "--table":
        table(sys.argv[2:])
        return
    doc = load(sys.argv[1])
    ok = bool(doc.get("jobs"))
    if not ok:
        print("no jobs in the fio output")
    for j in doc.get("jobs", []):
        w, r = j["write"], j["read"]
        bs = j.get("job options", {}).get("bs", "?")
        print(
            f"{j['jobname']}: bs={bs} write {w['iops']:.0f} IOPS {w['bw_bytes'] / 1e6:.2f} MB/s, "
            f"verify read {r['iops']:.0f} IOPS {r['bw_bytes'] / 1e6:.2f} MB/s "
            f"({w['io_bytes'] >> 10} KiB written, {r['io_bytes'] >> 10} KiB verified, "
            f"error {j['error']}, {j.get('total_err', 0)} errors)"
        )
        if j["error"] != 0 or j.get("total_err", 0) != 0:
            print(f"{j['jobname']}: fio reports error {j['error']}")
            ok = False
        if w["io_bytes"] == 0 or r["io_bytes"] != w["io_bytes"]:
            print(f"{j['jobname']}: verified {r['io_bytes']} of {w['io_bytes']} bytes written")
            ok = False
    sys.exit(0 if ok else 1)


main()
