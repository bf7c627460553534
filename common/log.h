/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Internal logging. Levels per component, set from FERRY_LOG ("warn,plasma=debug").
 * The level check is a relaxed atomic load, so a disabled debug line costs a compare.
 */
#ifndef FERRY_COMMON_LOG_H
#define FERRY_COMMON_LOG_H

#include <ferry/common.h>

/* ferry__log_enabled() - would a line at @level for @component be emitted? */
int ferry__log_enabled(enum ferry_log_level level, const char *component);

__attribute__((format(printf, 3, 4))) void ferry__log(enum ferry_log_level level,
						      const char *component, const char *fmt, ...);

#define FLOG(level, comp, ...)                                    \
	do {                                                      \
		if (ferry__log_enabled((level), (comp)))          \
			ferry__log((level), (comp), __VA_ARGS__); \
	} while (0)
#define FLOG_DEBUG(comp, ...) FLOG(FERRY_LOG_DEBUG, comp, __VA_ARGS__)
#define FLOG_INFO(comp, ...) FLOG(FERRY_LOG_INFO, comp, __VA_ARGS__)
#define FLOG_WARN(comp, ...) FLOG(FERRY_LOG_WARN, comp, __VA_ARGS__)
#define FLOG_ERROR(comp, ...) FLOG(FERRY_LOG_ERROR, comp, __VA_ARGS__)

#endif
