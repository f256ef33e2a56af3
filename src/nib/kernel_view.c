/* SPDX-License-Identifier: MIT */
/* The kernel's view of handled descriptors: see kernel_view.h. */
#include "kernel_view.h"

CHELL_EXPORT int chell_offset_to_kernel(struct chell_ofd *ofd, int fd)
{
	_Atomic uint64_t *offp = (_Atomic uint64_t *)&ofd->offset;
	uint64_t o = atomic_load(offp), again;
	for (;;) {
		off_t r = sys_lseek(fd, (off_t)o, SEEK_SET);
		if (r < 0)
			return (int)r;
		again = atomic_load(offp);
		if (again == o)
			return 0;
		o = again;
	}
}

CHELL_EXPORT int chell_offset_from_kernel(struct chell_ofd *ofd, int fd)
{
	off_t k = sys_lseek(fd, 0, SEEK_CUR);
	if (k < 0)
		return (int)k;
	atomic_store((_Atomic uint64_t *)&ofd->offset, (uint64_t)k);
	return 0;
}

CHELL_EXPORT int chell_offset_go_kernel(uint32_t *active, struct chell_ofd *ofd, int fd)
{
	if (!atomic_exchange((_Atomic uint32_t *)active, 0))
		return 0;
	chell_offset_to_kernel(ofd, fd);
	return 1;
}

void hub_sync_out(struct chell_file *f, int fd, enum chell_op op)
{
	for (int i = 0; i < f->stack->depth; i++)
		if (f->stack->handlers[i]->sync_out) {
			chell_ctx c = {f, fd, i, op, NULL};
			f->stack->handlers[i]->sync_out(&c);
		}
}

void hub_sync_in(struct chell_file *f, int fd, enum chell_op op)
{
	for (int i = 0; i < f->stack->depth; i++)
		if (f->stack->handlers[i]->sync_in) {
			chell_ctx c = {f, fd, i, op, NULL};
			f->stack->handlers[i]->sync_in(&c);
		}
}

void hub_escape(struct chell_file *f, int fd, enum chell_op op)
{
	for (int i = 0; i < f->stack->depth; i++) {
		const struct chell_handler *h = f->stack->handlers[i];
		chell_ctx c = {f, fd, i, op, NULL};
		if (h->escape)
			h->escape(&c);
		else if (h->sync_out)
			h->sync_out(&c);
	}
}

static void by_fd(int fd, enum chell_op op, void (*fn)(struct chell_file *, int, enum chell_op))
{
	if (likely(fdt_peek(fd) == NULL))
		return;
	struct chell_file *f = file_get_fd(fd);
	if (!f)
		return;
	fn(f, fd, op);
	file_put(f);
}

void chell_fd_sync_out(int fd, enum chell_op op)
{
	by_fd(fd, op, hub_sync_out);
}

void chell_fd_sync_in(int fd, enum chell_op op)
{
	by_fd(fd, op, hub_sync_in);
}

void chell_fd_escape(int fd, enum chell_op op)
{
	by_fd(fd, op, hub_escape);
}

void chell_escape_all(enum chell_op op)
{
	int max = fdt_max();
	for (int fd = 0; fd <= max; fd++)
		chell_fd_escape(fd, op);
}
