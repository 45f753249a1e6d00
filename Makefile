# SPDX-License-Identifier: GPL-2.0
# Out-of-tree build of rvrdma.ko: `make KDIR=/path/to/built/rust/kernel`.
# KDIR defaults to the test kernel that scripts/build-kernel keeps in the cache.

RVRDMA_CACHE ?= $(HOME)/.cache/rvrdma
KDIR ?= $(RVRDMA_CACHE)/linux-release
LIBCLANG_PATH ?= /usr/lib/llvm-19/lib
export LIBCLANG_PATH
# Build with the compiler the kernel was built with (the debug kernel is clang-built).
LLVM ?= $(if $(shell grep -s '^CONFIG_CC_IS_CLANG=y' $(KDIR)/.config),-19,)

.PHONY: all modules clean check demo shell
all: modules

# flock: concurrent builds in one tree (a test run and an editor's build) wait for each other.
modules:
	flock $(CURDIR)/.build.lock $(MAKE) -C $(KDIR) M=$(CURDIR) LLVM=$(LLVM) modules

clean:
	$(MAKE) -C $(KDIR) M=$(CURDIR) LLVM=$(LLVM) clean
	rm -f rust/rdma_bindings_generated.rs

# The two commands the README names, and a guest shell.
demo:
	scripts/demo

check:
	scripts/test

shell:
	scripts/vm
