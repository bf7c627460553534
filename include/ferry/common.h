/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Ferry's base: the export macro, error strings, logging and the replaceable allocator.
 *
 * Thread model: every function here is thread-safe. The log handler and the allocator are
 * process-wide; set them before other threads use Ferry.
 */
#ifndef FERRY_COMMON_H
#define FERRY_COMMON_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define FERRY_API __attribute__((visibility("default")))
#else
#define FERRY_API
#endif

/*
 * Errors: every int-returning function returns 0 on success, a documented count >0, or a
 * negative errno. Domain errors map onto errno (see style.md): -ENOENT no such object,
 * -EEXIST, -ENOSPC store full, -ETIMEDOUT, -ECANCELED, -ECONNRESET peer gone, -EPROTO
 * malformed message, -EACCES bad token, -EUSERS a server at its client limit, -EOPNOTSUPP.
 */

/* ferry_strerror() - describe a return value. @err may be negative (-errno) or positive.
 * Returns a static string, never NULL. */
FERRY_API const char *ferry_strerror(int err);

enum ferry_log_level {
	FERRY_LOG_DEBUG = 0,
	FERRY_LOG_INFO = 1,
	FERRY_LOG_WARN = 2,
	FERRY_LOG_ERROR = 3,
	FERRY_LOG_OFF = 4,
};

/* A log handler receives each line that passes the level filter, already formatted (no
 * trailing newline). @component is a short static name ("plasma", "wire", ...). */
typedef void (*ferry_log_fn)(void *arg, enum ferry_log_level level, const char *component,
			     const char *message);

/* ferry_log_set_handler() - route log lines to @fn (NULL restores the default: stderr). */
FERRY_API void ferry_log_set_handler(ferry_log_fn fn, void *arg);

/*
 * ferry_log_configure() - set levels from a spec like the FERRY_LOG variable:
 * "info", "warn,plasma=debug,gcs=error". A NULL spec re-reads FERRY_LOG.
 * Returns 0, or -EINVAL (and logs why) for an unknown level; valid parts still apply.
 */
FERRY_API int ferry_log_configure(const char *spec);

/* ferry_log_level_parse() - "debug", "info", "warn", "error", "off" -> level, or -EINVAL. */
FERRY_API int ferry_log_level_parse(const char *name);

/*
 * A replacement allocator. All of Ferry's heap memory goes through it. @malloc and @realloc
 * return NULL on failure; Ferry turns that into -ENOMEM and never aborts.
 */
struct ferry_allocator {
	void *(*malloc)(void *arg, size_t size);	     /* like malloc(3) */
	void *(*realloc)(void *arg, void *ptr, size_t size); /* like realloc(3) */
	void (*free)(void *arg, void *ptr);		     /* like free(3); ptr may be NULL */
	void *arg;					     /* passed to each call */
};

/* ferry_set_allocator() - install @a (copied), or the libc allocator when NULL. Call before
 * any other Ferry function; memory allocated before must not be freed after the switch. */
FERRY_API void ferry_set_allocator(const struct ferry_allocator *a);

#ifdef __cplusplus
}
#endif
#endif
