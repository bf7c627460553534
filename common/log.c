/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Logging with per-component levels.
 *
 * DESIGN: readers (every FLOG) never lock. The default level and each override's level are
 * atomics; overrides are appended under a mutex and published by a release store of their
 * count, so a reader sees either the old or the new set, never a torn entry. min_level
 * (the lowest of all levels) makes a disabled line cost one load and one compare.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"

#define MAX_OVERRIDES 32
#define COMPONENT_MAX 24

struct override {
	char component[COMPONENT_MAX]; /* NUL-terminated, immutable once published */
	atomic_int level;	       /* enum ferry_log_level */
};

static pthread_once_t env_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t config_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_int default_level = FERRY_LOG_WARN;
static atomic_int min_level = FERRY_LOG_WARN;
static struct override overrides[MAX_OVERRIDES];
static atomic_int override_count;
static ferry_log_fn handler; /* NULL: stderr */
static void *handler_arg;

static const char *const level_names[] = {"debug", "info", "warn", "error", "off"};

int ferry_log_level_parse(const char *name)
{
	for (size_t i = 0; i < sizeof(level_names) / sizeof(level_names[0]); i++)
		if (strcasecmp(name, level_names[i]) == 0)
			return (int)i;
	return -EINVAL;
}

static int apply_spec(const char *spec);

static void load_env(void)
{
	const char *spec = getenv("FERRY_LOG");

	if (spec && *spec)
		apply_spec(spec);
}

static void recompute_min(void)
{
	int lowest = atomic_load(&default_level);
	int n = atomic_load(&override_count);

	for (int i = 0; i < n; i++) {
		int l = atomic_load(&overrides[i].level);

		if (l < lowest)
			lowest = l;
	}
	atomic_store(&min_level, lowest);
}

/* Caller holds config_lock. */
static int set_component(const char *name, size_t len, int level)
{
	int n = atomic_load(&override_count);

	if (len == 0 || len >= COMPONENT_MAX)
		return -EINVAL;
	for (int i = 0; i < n; i++) {
		if (strlen(overrides[i].component) == len &&
		    strncmp(overrides[i].component, name, len) == 0) {
			atomic_store(&overrides[i].level, level);
			return 0;
		}
	}
	if (n == MAX_OVERRIDES)
		return -ENOSPC;
	memcpy(overrides[n].component, name, len);
	overrides[n].component[len] = '\0';
	atomic_store(&overrides[n].level, level);
	atomic_store_explicit(&override_count, n + 1, memory_order_release);
	return 0;
}

/* Apply one "level" or "component=level" item of a spec. Caller holds config_lock. */
static int apply_item(const char *item, size_t len)
{
	char buf[64];
	const char *eq;
	int level;

	if (len == 0)
		return 0;
	if (len >= sizeof(buf))
		return -EINVAL;
	memcpy(buf, item, len);
	buf[len] = '\0';
	eq = strchr(buf, '=');
	level = ferry_log_level_parse(eq ? eq + 1 : buf);
	if (level < 0)
		return level;
	if (!eq) {
		atomic_store(&default_level, level);
		return 0;
	}
	return set_component(buf, (size_t)(eq - buf), level);
}

static int apply_spec(const char *spec)
{
	int ret = 0;

	pthread_mutex_lock(&config_lock);
	for (const char *p = spec; *p;) {
		size_t len = strcspn(p, ",");
		int r = apply_item(p, len);

		if (r < 0 && ret == 0)
			ret = r;
		p += len;
		if (*p == ',')
			p++;
	}
	recompute_min();
	pthread_mutex_unlock(&config_lock);
	if (ret < 0)
		ferry__log(FERRY_LOG_ERROR, "log",
			   "FERRY_LOG: cannot parse '%s' (want level or component=level, "
			   "levels debug|info|warn|error|off): %s",
			   spec, ferry_strerror(ret));
	return ret;
}

int ferry_log_configure(const char *spec)
{
	/* Read the environment first so that a later first FLOG does not undo this call. */
	pthread_once(&env_once, load_env);
	if (!spec) {
		spec = getenv("FERRY_LOG");
		if (!spec)
			return 0;
	}
	return apply_spec(spec);
}

void ferry_log_set_handler(ferry_log_fn fn, void *arg)
{
	pthread_mutex_lock(&config_lock);
	handler = fn;
	handler_arg = arg;
	pthread_mutex_unlock(&config_lock);
}

int ferry__log_enabled(enum ferry_log_level level, const char *component)
{
	int n;

	pthread_once(&env_once, load_env);
	if ((int)level < atomic_load_explicit(&min_level, memory_order_relaxed))
		return 0;
	n = atomic_load_explicit(&override_count, memory_order_acquire);
	for (int i = 0; i < n; i++)
		if (strcmp(overrides[i].component, component) == 0)
			return (int)level >=
			       atomic_load_explicit(&overrides[i].level, memory_order_relaxed);
	return (int)level >= atomic_load_explicit(&default_level, memory_order_relaxed);
}

static void write_stderr(enum ferry_log_level level, const char *component, const char *msg)
{
	static const char letters[] = "DIWE";
	struct timespec ts;
	struct tm tm;
	char line[1280];
	int n;

	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	n = snprintf(line, sizeof(line), "%02d:%02d:%02d.%03ld %c %s[%d]: %s\n", tm.tm_hour,
		     tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000, letters[level], component,
		     (int)getpid(), msg);
	if (n > (int)sizeof(line) - 1)
		n = (int)sizeof(line) - 1;
	/* One write(2) per line keeps lines from different processes whole. */
	if (write(STDERR_FILENO, line, (size_t)n) < 0)
		return;
}

void ferry__log(enum ferry_log_level level, const char *component, const char *fmt, ...)
{
	char msg[1024];
	ferry_log_fn fn;
	void *arg;
	va_list ap;

	if (level >= FERRY_LOG_OFF)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	pthread_mutex_lock(&config_lock);
	fn = handler;
	arg = handler_arg;
	pthread_mutex_unlock(&config_lock);
	if (fn)
		fn(arg, level, component, msg);
	else
		write_stderr(level, component, msg);
}
