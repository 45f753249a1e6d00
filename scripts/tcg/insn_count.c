// SPDX-License-Identifier: GPL-2.0
/*
 * A QEMU TCG plugin for scripts/tcg-count: counts how often each translated block of guest
 * kernel code runs, with its instruction count, whether it ends in an indirect branch (a
 * return, an indirect call or jump: each a block lookup under TCG) and how many memory
 * accesses its runs made (each a softmmu TLB lookup under TCG; a `rep movs` counts one per
 * element moved), and the instructions in it that TCG runs in a helper call rather than
 * inline (see `enum kind`). The guest drives it through a control file on a shared directory:
 * it writes "SEQ dump NAME", the plugin writes "address instructions executions indirect
 * accesses atomic pause fpu flags system" per block that ran so far to NAME (a file name, in
 * the control file's directory) and answers "done SEQ" ("error SEQ" if it could not).
 * Counts only grow; the guest dumps before and after a run and the report subtracts. The
 * vCPUs add without atomics: two adding to one block at the same moment may lose one.
 *
 * Plugin argument: ctl=PATH (the control file). Built by scripts/tcg-count against the plugin
 * API of QEMU 7.2 (version 1); the few calls used are declared here, as Debian ships no header.
 */
#include <inttypes.h>
#include <libgen.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef uint64_t qemu_plugin_id_t;
typedef struct qemu_info_t qemu_info_t;
struct qemu_plugin_tb;
struct qemu_plugin_insn;
enum qemu_plugin_op { QEMU_PLUGIN_INLINE_ADD_U64 };
enum qemu_plugin_mem_rw { QEMU_PLUGIN_MEM_R = 1, QEMU_PLUGIN_MEM_W, QEMU_PLUGIN_MEM_RW };
typedef void (*qemu_plugin_vcpu_tb_trans_cb_t)(qemu_plugin_id_t, struct qemu_plugin_tb *);
void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t, qemu_plugin_vcpu_tb_trans_cb_t);
void qemu_plugin_register_vcpu_tb_exec_inline(struct qemu_plugin_tb *, enum qemu_plugin_op,
					      void *, uint64_t);
size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *);
uint64_t qemu_plugin_tb_vaddr(const struct qemu_plugin_tb *);
struct qemu_plugin_insn *qemu_plugin_tb_get_insn(const struct qemu_plugin_tb *, size_t);
const void *qemu_plugin_insn_data(const struct qemu_plugin_insn *);
size_t qemu_plugin_insn_size(const struct qemu_plugin_insn *);
void qemu_plugin_register_vcpu_mem_inline(struct qemu_plugin_insn *, enum qemu_plugin_mem_rw,
					  enum qemu_plugin_op, void *, uint64_t);

__attribute__((visibility("default"))) int qemu_plugin_version = 1;

/* Guest kernel addresses (x86-64, 4-level paging): user code is left out. */
#define KERNEL_START 0xffff800000000000ULL
#define NBLOCKS (1u << 21)

/* Instructions TCG runs out of line, each far dearer than an inline one. */
enum kind {
	K_ATOMIC, /* a locked read-modify-write, `xchg` with memory included (an atomic helper) */
	K_PAUSE, /* `pause`: leaves the translated code for the vCPU's main loop */
	K_FPU, /* `xsave*`, `xrstor*`, `fxsave`, `fxrstor`: the FPU state moved by a helper */
	K_FLAGS, /* `pushf`, `popf`, `cli`, `sti`: interrupt-flag helpers; `sti` ends the block */
	K_SYSTEM, /* `rdtsc(p)`, `cpuid`, MSR and CR writes, `swapgs`, `iret`, `sysret`, `hlt` */
	NKINDS
};

struct block {
	uint64_t vaddr;
	uint64_t insns;
	unsigned int kinds[NKINDS];
	/* Both updated by the vCPUs' inline adds; a lost add now and then is noise. */
	uint64_t execs;
	uint64_t accesses;
	int indirect;
};

static struct block **table;
static uint32_t nblocks;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static char ctl[512], ctl_dir[512];

/* The block at (vaddr, insns), added if new (NULL once the table is full); a block
 * retranslated keeps its counter. */
static struct block *block_at(uint64_t vaddr, uint64_t insns)
{
	uint64_t h = (vaddr ^ (vaddr >> 17) ^ insns) * 0x9e3779b97f4a7c15ULL;
	uint32_t i;

	for (i = (uint32_t)(h >> 40) & (NBLOCKS - 1);; i = (i + 1) & (NBLOCKS - 1)) {
		struct block *b = table[i];

		if (!b) {
			if (nblocks >= NBLOCKS / 2)
				return NULL;
			b = calloc(1, sizeof(*b));
			if (!b)
				return NULL;
			b->vaddr = vaddr;
			b->insns = insns;
			table[i] = b;
			nblocks++;
			return b;
		}
		if (b->vaddr == vaddr && b->insns == insns)
			return b;
	}
}

/* Whether an instruction is a return or an indirect call or jump (FF /2, FF /4). */
static int is_indirect(const uint8_t *p, size_t size)
{
	size_t o = 0;

	while (o < size && (p[o] == 0xf3 || p[o] == 0xf2 || p[o] == 0x66 || p[o] == 0x2e ||
			    p[o] == 0x3e || (p[o] & 0xf0) == 0x40))
		o++;
	if (o >= size)
		return 0;
	if (p[o] == 0xc3 || p[o] == 0xc2)
		return 1;
	return p[o] == 0xff && o + 1 < size &&
	       (((p[o + 1] >> 3) & 7) == 2 || ((p[o + 1] >> 3) & 7) == 4);
}

/* Which `enum kind` an instruction is, or NKINDS for an ordinary one. */
static int kind_of(const uint8_t *p, size_t size)
{
	int lock = 0, rep = 0;
	size_t o = 0;
	uint8_t op, reg, mod;

	for (; o < size; o++) {
		if (p[o] == 0xf0)
			lock = 1;
		else if (p[o] == 0xf3)
			rep = 1;
		else if (!(p[o] == 0xf2 || p[o] == 0x66 || p[o] == 0x67 || p[o] == 0x2e ||
			   p[o] == 0x36 || p[o] == 0x3e || p[o] == 0x26 || p[o] == 0x64 ||
			   p[o] == 0x65 || (p[o] & 0xf0) == 0x40))
			break;
	}
	if (o >= size)
		return NKINDS;
	op = p[o];
	mod = o + 1 < size ? p[o + 1] >> 6 : 0;
	if (lock || ((op == 0x86 || op == 0x87) && mod != 3))
		return K_ATOMIC;
	if (op == 0x90 && rep)
		return K_PAUSE;
	if (op == 0x9c || op == 0x9d || op == 0xfa || op == 0xfb)
		return K_FLAGS;
	if (op == 0xcf || op == 0xf4)
		return K_SYSTEM;
	if (op != 0x0f || o + 1 >= size)
		return NKINDS;
	op = p[o + 1];
	mod = o + 2 < size ? p[o + 2] >> 6 : 3;
	reg = o + 2 < size ? (p[o + 2] >> 3) & 7 : 0;
	if (op == 0xae && mod != 3 && (reg <= 1 || (reg >= 4 && reg <= 6)))
		return K_FPU;
	if (op == 0xc7 && mod != 3 && reg >= 3 && reg <= 5)
		return K_FPU;
	if (op == 0x31 || op == 0xa2 || op == 0x30 || op == 0x32 || op == 0x22 || op == 0x07)
		return K_SYSTEM;
	if (op == 0x01 && o + 2 < size && (p[o + 2] == 0xf8 || p[o + 2] == 0xf9))
		return K_SYSTEM;
	return NKINDS;
}

static void translated(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
	uint64_t vaddr = qemu_plugin_tb_vaddr(tb);
	size_t n = qemu_plugin_tb_n_insns(tb);
	struct qemu_plugin_insn *last;
	struct block *b;
	size_t i;

	(void)id;
	if (vaddr < KERNEL_START || n == 0)
		return;
	last = qemu_plugin_tb_get_insn(tb, n - 1);
	pthread_mutex_lock(&lock);
	b = block_at(vaddr, n);
	if (b) {
		b->indirect = is_indirect(qemu_plugin_insn_data(last), qemu_plugin_insn_size(last));
		memset(b->kinds, 0, sizeof(b->kinds));
		for (i = 0; i < n; i++) {
			struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
			int k = kind_of(qemu_plugin_insn_data(insn), qemu_plugin_insn_size(insn));

			if (k < NKINDS)
				b->kinds[k]++;
		}
	}
	pthread_mutex_unlock(&lock);
	if (!b)
		return;
	qemu_plugin_register_vcpu_tb_exec_inline(tb, QEMU_PLUGIN_INLINE_ADD_U64, &b->execs, 1);
	for (i = 0; i < n; i++)
		qemu_plugin_register_vcpu_mem_inline(qemu_plugin_tb_get_insn(tb, i),
						     QEMU_PLUGIN_MEM_RW,
						     QEMU_PLUGIN_INLINE_ADD_U64, &b->accesses, 1);
}

/* Writes the counts to NAME in the control file's directory; 0 on success. */
static int dump(const char *name)
{
	char path[1200];
	FILE *f;
	uint32_t i;
	int err;

	if (!name[0] || strchr(name, '/'))
		return -1;
	snprintf(path, sizeof(path), "%s/%s", ctl_dir, name);
	f = fopen(path, "w");
	if (!f)
		return -1;
	pthread_mutex_lock(&lock);
	for (i = 0; i < NBLOCKS; i++) {
		struct block *b = table[i];

		if (b && b->execs)
			fprintf(f, "%" PRIx64 " %" PRIu64 " %" PRIu64 " %d %" PRIu64 " %u %u %u %u %u\n",
				b->vaddr, b->insns, b->execs, b->indirect, b->accesses,
				b->kinds[K_ATOMIC], b->kinds[K_PAUSE], b->kinds[K_FPU],
				b->kinds[K_FLAGS], b->kinds[K_SYSTEM]);
	}
	pthread_mutex_unlock(&lock);
	err = ferror(f);
	return fclose(f) || err ? -1 : 0;
}

static void *watch(void *arg)
{
	char cmd[600], name[600];
	unsigned long seq, done = 0;

	(void)arg;
	for (;;) {
		FILE *f;
		int ok;

		usleep(20000);
		f = fopen(ctl, "r");
		if (!f)
			continue;
		if (!fgets(cmd, sizeof(cmd), f))
			cmd[0] = 0;
		fclose(f);
		if (sscanf(cmd, "%lu dump %599s", &seq, name) != 2 || seq == done)
			continue;
		ok = dump(name) == 0;
		done = seq;
		f = fopen(ctl, "w");
		if (f) {
			fprintf(f, "%s %lu\n", ok ? "done" : "error", seq);
			fclose(f);
		}
	}
	return NULL;
}

__attribute__((visibility("default"))) int qemu_plugin_install(qemu_plugin_id_t id,
							       const qemu_info_t *info, int argc,
							       char **argv)
{
	char tmp[512];
	pthread_t t;
	int i;

	(void)info;
	for (i = 0; i < argc; i++)
		if (!strncmp(argv[i], "ctl=", 4))
			snprintf(ctl, sizeof(ctl), "%s", argv[i] + 4);
	if (!ctl[0])
		return -1;
	snprintf(tmp, sizeof(tmp), "%s", ctl);
	snprintf(ctl_dir, sizeof(ctl_dir), "%s", dirname(tmp));
	table = calloc(NBLOCKS, sizeof(*table));
	if (!table || pthread_create(&t, NULL, watch, NULL))
		return -1;
	qemu_plugin_register_vcpu_tb_trans_cb(id, translated);
	return 0;
}
