# shellcheck shell=bash
# Common settings for rvrdma's scripts. Source it; it defines paths and small helpers only.
#
# RVRDMA_CACHE   where slow things live (kernel tree, toolchain pieces, venv); default ~/.cache/rvrdma
# RVRDMA_DEBUG   1 selects the debug kernel variant (KASAN, lockdep, atomic-sleep checks, kmemleak)
# RVRDMA_BENCH   1 selects the bench kernel variant: the test kernel without its checkers (what a
#                user runs; scripts/bench sets it)
# RVRDMA_KVER    the Debian linux-source-7.2 version to build (default: the one the project pins)

RVRDMA_TOP=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RVRDMA_CACHE=${RVRDMA_CACHE:-$HOME/.cache/rvrdma}
RVRDMA_DEBUG=${RVRDMA_DEBUG:-0}
RVRDMA_BENCH=${RVRDMA_BENCH:-0}
RVRDMA_KVER=${RVRDMA_KVER:-7.2.13-1}
RVRDMA_KSERIES=7.2

if [ "$RVRDMA_DEBUG" = 1 ]; then
	RVRDMA_VARIANT=debug
	RVRDMA_LLVM=-19 # KASAN with Rust needs a clang-built kernel
	# KASAN, lockdep and kmemleak under TCG run 5 to 20 times slower: longer waits and limits
	# (each still overridable), and a Local ACK Timeout for the QPs the tests make of 1.07 s
	# (exponent 18) instead of 67 ms (14), which a kernel that slow cannot always answer within.
	: "${RVRDMA_WAIT:=120}" "${RVRDMA_TEST_TIMEOUT:=1500}" "${RVRDMA_GUEST_TIMEOUT:=14400}"
	# Data-checked transfers get RVRDMA_TIME_SCALE times their time limit.
	: "${RVRDMA_ACK_TIMEOUT:=18}" "${RVRDMA_TIME_SCALE:=4}"
	export RVRDMA_WAIT RVRDMA_TEST_TIMEOUT RVRDMA_GUEST_TIMEOUT RVRDMA_ACK_TIMEOUT RVRDMA_TIME_SCALE
elif [ "$RVRDMA_BENCH" = 1 ]; then
	RVRDMA_VARIANT=bench
	RVRDMA_LLVM=
else
	RVRDMA_VARIANT=release
	RVRDMA_LLVM=
fi

# The built kernel tree (what `make KDIR=` and virtme-ng take).
KDIR=${KDIR:-$RVRDMA_CACHE/linux-$RVRDMA_VARIANT}
RUST_LIB_SRC=${RUST_LIB_SRC:-$RVRDMA_CACHE/rust-src/usr/lib/rustlib/src/rust/library}
VENV=$RVRDMA_CACHE/venv
export RVRDMA_TOP RVRDMA_CACHE RVRDMA_DEBUG RVRDMA_BENCH RVRDMA_LLVM KDIR RUST_LIB_SRC
export PATH="$VENV/bin:$HOME/.cargo/bin:$PATH"

# build_for_guest: the kernel of the selected variant (built on first use) and rvrdma.ko for it.
build_for_guest() {
	"$RVRDMA_TOP/scripts/build-kernel" || die "building the $RVRDMA_VARIANT kernel failed (scripts/build-kernel)"
	make -C "$RVRDMA_TOP" KDIR="$KDIR" >/dev/null || die "building rvrdma.ko failed (make KDIR=$KDIR)"
}

die() {
	printf 'rvrdma: error: %s\n' "$*" >&2
	exit 1
}

log() {
	printf '==> %s\n' "$*" >&2
}

# Runs a command with a name for the failure message.
need() {
	local what=$1
	shift
	"$@" || die "$what failed (command: $*)"
}
