/* SPDX-License-Identifier: MIT */
/*
 * Shadow file names. Every shadow copy lives flat in shadow.dir, named after
 * the absolute path of the file it mirrors. Percent-encoding keeps the name
 * readable ("%2Fdev%2Fshm%2Fdata") and injective: '%' itself is escaped, and
 * '#' too, because a leading '#' marks the hashed form used for paths too
 * long to fit in one directory entry.
 */
#include <string.h>

#include "shadow.h"

uint64_t shadow_fnv1a(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (; *s; s++) {
		h ^= (unsigned char)*s;
		h *= 0x100000001b3ull;
	}
	return h;
}

static int must_escape(unsigned char ch)
{
	return ch == '/' || ch == '%' || ch == '#';
}

static const char HEX[] = "0123456789ABCDEF";

size_t shadow_mangle(const char *path, char out[SHADOW_NAME_BUF])
{
	/* Encoded length first, so the long case can keep the tail. */
	size_t enc = 0;
	for (const char *s = path; *s; s++)
		enc += must_escape((unsigned char)*s) ? 3 : 1;

	if (enc <= SHADOW_NAME_MAX) {
		size_t n = 0;
		for (const char *s = path; *s; s++) {
			unsigned char ch = (unsigned char)*s;
			if (must_escape(ch)) {
				out[n++] = '%';
				out[n++] = HEX[ch >> 4];
				out[n++] = HEX[ch & 15];
			} else {
				out[n++] = (char)ch;
			}
		}
		out[n] = '\0';
		return n;
	}

	/*
	 * Too long: "#<hash>#" then the encoded tail of the path. Walk back
	 * over whole source characters so no escape sequence is cut in half.
	 */
	uint64_t h = shadow_fnv1a(path);
	size_t n = 0;
	out[n++] = '#';
	for (int i = 15; i >= 0; i--)
		out[n++] = HEX[(h >> (i * 4)) & 15];
	out[n++] = '#';
	size_t room = SHADOW_NAME_MAX - n;
	size_t plen = strlen(path), start = plen, used = 0;
	while (start > 0) {
		size_t w = must_escape((unsigned char)path[start - 1]) ? 3 : 1;
		if (used + w > room)
			break;
		used += w;
		start--;
	}
	for (size_t i = start; i < plen; i++) {
		unsigned char ch = (unsigned char)path[i];
		if (must_escape(ch)) {
			out[n++] = '%';
			out[n++] = HEX[ch >> 4];
			out[n++] = HEX[ch & 15];
		} else {
			out[n++] = (char)ch;
		}
	}
	out[n] = '\0';
	return n;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

int shadow_unmangle(const char *name, char *out, size_t outlen)
{
	if (name[0] == '#')
		return -1;
	size_t n = 0;
	for (const char *s = name; *s; s++) {
		char ch = *s;
		if (ch == '/' || ch == '#')
			return -1; /* never produced by shadow_mangle */
		if (ch == '%') {
			int hi = hexval(s[1]), lo = hi < 0 ? -1 : hexval(s[2]);
			if (hi < 0 || lo < 0)
				return -1;
			ch = (char)(hi * 16 + lo);
			if (!must_escape((unsigned char)ch))
				return -1;
			s += 2;
		}
		if (n + 1 >= outlen)
			return -1;
		out[n++] = ch;
	}
	out[n] = '\0';
	return 0;
}
