// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/* Timestamps and log lines: see log.h. */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "log.h"

const char *role = "client";

/* Log lines show it in seconds: on one machine (two netns) the client's and the server's lines
 * line up with each other and roughly with dmesg. */
int64_t now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void say(const char *fmt, ...)
{
	char line[512];
	va_list ap;
	int64_t t = now_us();

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	printf("[%5" PRId64 ".%03" PRId64 " %s] %s\n", t / 1000000, t / 1000 % 1000, role, line);
}

void die(const char *fmt, ...)
{
	char line[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	say("error: %s", line);
	exit(2);
}
