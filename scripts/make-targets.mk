# Extra convenience targets for the top-level Makefile (which already has demo, check and shell).
# Include it after the Makefile's default target:
#     include scripts/make-targets.mk
# (kbuild reads Kbuild for the module itself, so these never reach the kernel build.)
#
#   make vm CMD="ibv_devinfo -v"                one command in the guest, non-interactively
#   make vm-test T="03-attrs 04-port-events"    only these guest tests, in one boot
#   make test                                   same as `make check` (scripts/test)

RVRDMA_SCRIPTS := $(patsubst %/,%,$(dir $(lastword $(MAKEFILE_LIST))))

.PHONY: vm vm-test test
vm:
	$(RVRDMA_SCRIPTS)/vm -- $(CMD)
vm-test:
	$(RVRDMA_SCRIPTS)/vm --bare -- $(abspath $(RVRDMA_SCRIPTS)/../tests/vm/run-all.sh) $(T)
test:
	$(RVRDMA_SCRIPTS)/test
