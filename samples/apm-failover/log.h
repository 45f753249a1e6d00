/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * Timestamps and log lines, used by every file of the sample (apm.c included). If you copy
 * apm.c into your program, bring these three functions along or map them to your own logging.
 */
#ifndef APM_SAMPLE_LOG_H
#define APM_SAMPLE_LOG_H

#include <stdint.h>

/* "client" or "server": printed in every log line. */
extern const char *role;

/* Microseconds on the monotonic clock. */
int64_t now_us(void);

/* printf with a timestamp (CLOCK_MONOTONIC, in seconds) and the role, one line. */
__attribute__((format(printf, 1, 2))) void say(const char *fmt, ...);

/* say("error: ...") and exit(2): a setup error. */
__attribute__((format(printf, 1, 2), noreturn)) void die(const char *fmt, ...);

#endif
