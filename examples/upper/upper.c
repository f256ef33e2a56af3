/* SPDX-License-Identifier: MIT */
/*
 * upper - an example external Chell handler: everything written to a file
 * it serves reaches the file in upper case, and it counts, per open file
 * description, the bytes it converted (shared by dup, fork and exec, like
 * the offset). It builds against the installed chell/handler.h alone:
 *
 *   make PKG_CONFIG_PATH=<prefix>/lib/pkgconfig      -> upper.so
 *   chell run --set handlers.dir=$PWD --route /data=upper -- ./program
 *
 * libchell.so finds NAME.so in a directory of handlers.dir when a stack
 * names a handler it does not have built in, checks .abi, .priv_size and
 * .name, and refuses the handler (naming the setting) if they do not fit.
 * Every operation it leaves NULL passes down to the kernel unchanged.
 */
#include <ctype.h>
#include <stdint.h>
#include <chell/handler.h>

/* Per-OFD state: lives in ofd->priv[layer], zeroed when the OFD is created. */
struct upper_ofd {
	uint64_t converted; /* bytes written through this description */
};

static struct upper_ofd *priv(chell_ctx *c)
{
	return (struct upper_ofd *)c->f->ofd->priv[c->layer];
}

/* Converts through a small buffer and writes piece by piece: a short
 * write below ends the call with what was written, as the kernel would. */
static ssize_t upper_write(chell_ctx *c, const struct iovec *iov, int iovcnt, off_t off, int flags)
{
	char buf[4096];
	ssize_t total = 0;
	for (int i = 0; i < iovcnt; i++) {
		const char *p = iov[i].iov_base;
		size_t left = iov[i].iov_len;
		while (left > 0) {
			size_t n = left < sizeof buf ? left : sizeof buf;
			for (size_t k = 0; k < n; k++)
				buf[k] = (char)toupper((unsigned char)p[k]);
			struct iovec one = {buf, n};
			ssize_t r = chell_down_write(c, &one, 1, off < 0 ? -1 : off + total, flags);
			if (r < 0)
				return total ? total : r;
			total += r;
			__atomic_fetch_add(&priv(c)->converted, (uint64_t)r, __ATOMIC_RELAXED);
			if ((size_t)r < n)
				return total;
			p += n;
			left -= n;
		}
	}
	return total;
}

/* The last descriptor in every process went away: report what was done. */
static void upper_release(chell_ctx *c)
{
	if (priv(c)->converted)
		chell_log("upper: %llu bytes written in upper case to %s",
			  (unsigned long long)priv(c)->converted, c->f->path);
}

const struct chell_handler CHELL_HANDLER_ENTRY = {
	.name = "upper",
	.summary = "writes reach the file in upper case",
	CHELL_HANDLER_PRIV(struct upper_ofd),
	.write = upper_write,
	.release = upper_release,
};
