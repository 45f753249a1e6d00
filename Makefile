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

# Kbuild does not rebuild an external module's objects when the kernel's options change: their
# dependencies on include/config/* are written relative to the kernel tree and looked up in
# this one, so a kernel rebuilt with other options would load objects built for the old
# layouts ("Invalid module format" at best). The configuration the objects were built against
# is kept in .kernel-config; objects built against another one, or an unknown one, go first.
kernel_config := $(shell { echo $(KDIR); cat $(KDIR)/include/generated/autoconf.h; } 2>/dev/null | \
	sha256sum | cut -c1-16)

# flock: concurrent builds in one tree (a test run and an editor's build) wait for each other.
modules:
	flock $(CURDIR)/.build.lock $(MAKE) --no-print-directory locked-modules

.PHONY: locked-modules
locked-modules:
	@if [ "$$(cat .kernel-config 2>/dev/null)" != "$(kernel_config)" ] && \
		[ -n "$$(ls rvrdma.ko c/*.o rust/*.o 2>/dev/null)" ]; then \
		echo "  CLEAN   the objects of another kernel configuration"; \
		$(MAKE) --no-print-directory clean >/dev/null; \
	fi
	$(MAKE) -C $(KDIR) M=$(CURDIR) LLVM=$(LLVM) modules
	@echo $(kernel_config) >.kernel-config

clean:
	$(MAKE) -C $(KDIR) M=$(CURDIR) LLVM=$(LLVM) clean
	rm -f rust/rdma_bindings_generated.rs .kernel-config

# The two commands the README names, and a guest shell.
demo:
	scripts/demo

check:
	scripts/test

shell:
	scripts/vm
