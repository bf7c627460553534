/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Internal logging. Levels per component, set from FERRY_LOG ("warn,plasma=debug").
 * The level check is a relaxed atomic load, so a disabled debug line costs a compare.
 * Every FLOG_* leaves errno as it found it, so a line may sit between a failing call and the
 * caller's use of errno.
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

/*
 * Lines about one peer, rate-limited per peer host (the address without its port, so a flood
 * of new connections from one host shares a budget): at most a burst per window, the rest
 * counted and the count appended to the next line that goes out ("suppressed N"). For
 * warnings a remote peer can provoke at will (bad frames, refused handshakes).
 */
__attribute__((format(printf, 4, 5))) void ferry__log_peer(enum ferry_log_level level,
							   const char *component, const char *peer,
							   const char *fmt, ...);
/* Burst and window of the per-peer limit (defaults 5 lines per 10000 ms); 0 keeps a value.
 * For tests and daemons' options; affects the whole process. */
void ferry__log_peer_limit(unsigned burst, unsigned window_ms);

/*
 * ferry__log_peer_scope() - until the next call, warnings and errors logged by this thread are
 * about @peer (NULL: nobody) and go through its rate limit, whoever logs them (a decoder that
 * does not know the peer). Returns the previous scope, to restore it.
 */
const char *ferry__log_peer_scope(const char *peer);

#define FLOG_PEER(level, comp, peer, ...)                                      \
	do {                                                                   \
		if (ferry__log_enabled((level), (comp)))                       \
			ferry__log_peer((level), (comp), (peer), __VA_ARGS__); \
	} while (0)
#define FLOG_PEER_WARN(comp, peer, ...) FLOG_PEER(FERRY_LOG_WARN, comp, peer, __VA_ARGS__)

#endif
