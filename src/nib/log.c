/* SPDX-License-Identifier: MIT */
/*
 * Diagnostics. Formatted into a stack buffer and written with one raw
 * write(2) to stderr: no allocation, no stdio, no recursion into the
 * interposed write(), and usable from signal handlers (vsnprintf with
 * integer and string conversions is async-signal-safe in practice in glibc).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "nib.h"

CHELL_EXPORT int chell_log_level = CHELL_LOG_ERROR;

static void log_emit(const char *fmt, va_list ap)
{
	char buf[1024];
	int n = snprintf(buf, sizeof(buf), "chell[%d]: ", (int)sys_getpid());
	int m = vsnprintf(buf + n, sizeof(buf) - (size_t)n - 1, fmt, ap);
	if (m < 0)
		m = 0;
	size_t len = (size_t)n + (size_t)m;
	if (len > sizeof(buf) - 2)
		len = sizeof(buf) - 2;
	if (len == 0 || buf[len - 1] != '\n')
		buf[len++] = '\n';
	chell_own_write(2, buf, len);
}

CHELL_EXPORT void chell_log(const char *fmt, ...)
{
	if (chell_log_level < CHELL_LOG_ERROR)
		return;
	va_list ap;
	va_start(ap, fmt);
	log_emit(fmt, ap);
	va_end(ap);
}

CHELL_EXPORT void chell_logv_level(int level, const char *fmt, ...)
{
	if (chell_log_level < level)
		return;
	va_list ap;
	va_start(ap, fmt);
	log_emit(fmt, ap);
	va_end(ap);
}

void chell_fatal(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	log_emit(fmt, ap);
	va_end(ap);
	abort();
}
