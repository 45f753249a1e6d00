#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""Runs rdma-core's pyverbs test suite (a directory holding its run_tests.py, __init__.py and
test_*.py) the way its run_tests.py does, with a result class that writes one tab-separated record
per test to RECORDS:

    start  TEST_ID
    RESULT TEST_ID SECONDS DETAIL      RESULT: ok, fail, error, skip, xfail, xpass
                                       DETAIL: the skip reason, or the key line of the traceback

and the full tracebacks to stderr. A test that runs longer than --per-test seconds is interrupted
(SIGALRM) and counts as an error. Usage:

    pyverbs_suite.py SUITE_DIR RECORDS [--per-test SECS] [--exclude TEST_ID ...] -- --dev DEV --gid N
"""
import argparse
import os
import signal
import sys
import time
import traceback
import unittest
from importlib.machinery import SourceFileLoader


SUITE_DIR = '/nonexistent/'


class TestTimeout(Exception):
    pass


def key_line(err):
    """The line of a traceback that says what went wrong: the exception, and the innermost frame
    of the suite's own code."""
    etype, value, tb = err
    frames = [f for f in traceback.extract_tb(tb) if '/unittest/' not in f.filename]
    where = []
    own = [f for f in frames if f.filename.startswith(SUITE_DIR)]
    for f in (own[-1:] + frames[-1:]) if frames else []:
        w = f'{os.path.basename(f.filename)}:{f.lineno} {f.line or ""}'.strip()
        if w not in where:
            where.append(w)
    msg = ' '.join(str(value).split())
    return f'{etype.__name__}: {msg} [at {" <- ".join(reversed(where))}]'


class RecordingResult(unittest.TextTestResult):
    def __init__(self, records, per_test, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.records = records
        self.per_test = per_test
        self.t0 = 0.0

    def _rec(self, kind, test, detail=''):
        secs = time.monotonic() - self.t0
        detail = ' '.join(str(detail).split())
        self.records.write(f'{kind}\t{test.id()}\t{secs:.1f}\t{detail}\n')
        self.records.flush()

    def startTest(self, test):
        self.records.write(f'start\t{test.id()}\n')
        self.records.flush()
        self.t0 = time.monotonic()
        signal.alarm(self.per_test)
        super().startTest(test)

    def stopTest(self, test):
        signal.alarm(0)
        super().stopTest(test)

    def addSuccess(self, test):
        super().addSuccess(test)
        self._rec('ok', test)

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._rec('fail', test, key_line(err))

    def addError(self, test, err):
        super().addError(test, err)
        # setUpClass/module errors come with a _ErrorHolder, not a test.
        self._rec('error', test, key_line(err))

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._rec('skip', test, reason)

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._rec('xfail', test, key_line(err))

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._rec('xpass', test)


def flatten(suite):
    for t in suite:
        if isinstance(t, unittest.TestSuite):
            yield from flatten(t)
        else:
            yield t


def on_alarm(signum, frame):
    raise TestTimeout('the test ran out of its time (SIGALRM)')


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('suite')
    ap.add_argument('records')
    ap.add_argument('--per-test', type=int, default=180)
    ap.add_argument('--exclude', action='append', default=[],
                    help='a test id to leave out (printed by the caller)')
    # What follows "--" is the suite's own command line.
    argv = sys.argv[1:]
    cut = argv.index('--') if '--' in argv else len(argv)
    a = ap.parse_args(argv[:cut])
    rest = argv[cut + 1:]

    # The suite imports itself as the package "tests" and reads its options (--dev, --gid) from
    # sys.argv through its args_parser.
    global SUITE_DIR
    SUITE_DIR = os.path.abspath(a.suite) + '/'
    sys.path.insert(0, a.suite)
    sys.argv = [os.path.join(a.suite, 'run_tests.py')] + rest
    from args_parser import parser
    tests = SourceFileLoader('tests', os.path.join(a.suite, '__init__.py')).load_module()
    parser.parse_args()
    print(f'pyverbs_suite: the suite\'s options: {parser.get_config()}', file=sys.stderr)

    signal.signal(signal.SIGALRM, on_alarm)
    suite = unittest.TestLoader().loadTestsFromModule(tests)
    if a.exclude:
        suite = unittest.TestSuite(t for t in flatten(suite) if t.id() not in a.exclude)
    with open(a.records, 'w') as records:
        runner = unittest.TextTestRunner(
            verbosity=2, stream=sys.stderr,
            resultclass=lambda *x, **kw: RecordingResult(records, a.per_test, *x, **kw))
        res = runner.run(suite)
        records.write(f'done\t{res.testsRun}\n')
    return 0


if __name__ == '__main__':
    sys.exit(main())
