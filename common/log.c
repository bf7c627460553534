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
#include <stdbool.h>
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

static int level_enabled(enum ferry_log_level level, const char *component)
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

/* The first call reads FERRY_LOG and may log a complaint about it: errno kept, as in FLOG. */
int ferry__log_enabled(enum ferry_log_level level, const char *component)
{
	int saved = errno, on = level_enabled(level, component);

	errno = saved;
	return on;
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

static _Thread_local const char *scope_peer; /* ferry__log_peer_scope() */
static bool peer_allow(const char *host, unsigned long *suppressed);
static void peer_host(const char *peer, char *out);

const char *ferry__log_peer_scope(const char *peer)
{
	const char *prev = scope_peer;

	scope_peer = peer;
	return prev;
}

static void emit(enum ferry_log_level level, const char *component, const char *msg);

/* Callers log between a failing call and their look at errno ("%m" included): every path
 * out of here hands errno back as it came in, whatever the handler or write(2) did. */
void ferry__log(enum ferry_log_level level, const char *component, const char *fmt, ...)
{
	int saved = errno;
	char msg[1024];
	va_list ap;

	if (level >= FERRY_LOG_OFF)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (scope_peer && level >= FERRY_LOG_WARN) {
		const char *peer = scope_peer;

		scope_peer = NULL; /* ferry__log_peer() logs through here */
		ferry__log_peer(level, component, peer, "%s", msg);
		scope_peer = peer;
	} else {
		emit(level, component, msg);
	}
	errno = saved;
}

static void emit(enum ferry_log_level level, const char *component, const char *msg)
{
	ferry_log_fn fn;
	void *arg;

	pthread_mutex_lock(&config_lock);
	fn = handler;
	arg = handler_arg;
	pthread_mutex_unlock(&config_lock);
	if (fn)
		fn(arg, level, component, msg);
	else
		write_stderr(level, component, msg);
}

/* ---- per-peer rate limit ---- */

#define PEER_HOST_MAX 64
#define PEER_SLOTS 64

struct peer_slot {
	char host[PEER_HOST_MAX]; /* peer without its port, "" = free */
	uint64_t window_start_ms; /* when the current window began */
	uint64_t last_ms;	  /* last line (logged or not), for eviction */
	unsigned in_window;	  /* lines logged in the current window */
	unsigned long suppressed; /* lines dropped since the last one logged */
};

static pthread_mutex_t peer_lock = PTHREAD_MUTEX_INITIALIZER;
static struct peer_slot peer_slots[PEER_SLOTS];
static unsigned peer_burst = 5;
static unsigned peer_window_ms = 10000;

void ferry__log_peer_limit(unsigned burst, unsigned window_ms)
{
	pthread_mutex_lock(&peer_lock);
	if (burst)
		peer_burst = burst;
	if (window_ms)
		peer_window_ms = window_ms;
	memset(peer_slots, 0, sizeof(peer_slots));
	pthread_mutex_unlock(&peer_lock);
}

/* "127.0.0.1:4000" -> "127.0.0.1", "[::1]:4000" -> "[::1]"; a Unix path or "fd 7" stays. */
static void peer_host(const char *peer, char *out)
{
	const char *colon = strrchr(peer, ':');
	size_t n = colon && colon != peer && strspn(colon + 1, "0123456789") == strlen(colon + 1)
			   ? (size_t)(colon - peer)
			   : strlen(peer);

	if (n >= PEER_HOST_MAX)
		n = PEER_HOST_MAX - 1;
	memcpy(out, peer, n);
	out[n] = '\0';
}

static struct peer_slot *peer_find(const char *host, uint64_t now)
{
	struct peer_slot *victim = &peer_slots[0];

	for (int i = 0; i < PEER_SLOTS; i++) {
		struct peer_slot *s = &peer_slots[i];

		if (strcmp(s->host, host) == 0)
			return s;
		if (s->last_ms < victim->last_ms)
			victim = s;
	}
	/* Evicting forgets a count: only when 64 hosts are all misbehaving at once. */
	memset(victim, 0, sizeof(*victim));
	strcpy(victim->host, host);
	victim->window_start_ms = now;
	return victim;
}

/* May a line about @host go out now? *@suppressed: lines dropped before it (then reset). */
static bool peer_allow(const char *host, unsigned long *suppressed)
{
	struct timespec ts;
	struct peer_slot *s;
	uint64_t now;
	bool allow;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	now = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000 + 1;
	pthread_mutex_lock(&peer_lock);
	s = peer_find(host, now);
	s->last_ms = now;
	if (now - s->window_start_ms >= peer_window_ms) {
		s->window_start_ms = now;
		s->in_window = 0;
	}
	allow = s->in_window < peer_burst;
	if (allow) {
		s->in_window++;
		*suppressed = s->suppressed;
		s->suppressed = 0;
	} else {
		s->suppressed++;
	}
	pthread_mutex_unlock(&peer_lock);
	return allow;
}

void ferry__log_peer(enum ferry_log_level level, const char *component, const char *peer,
		     const char *fmt, ...)
{
	char host[PEER_HOST_MAX], msg[900];
	unsigned long suppressed = 0;
	int saved = errno; /* as in ferry__log() */
	va_list ap;

	peer_host(peer ? peer : "", host);
	if (!peer_allow(host, &suppressed)) {
		errno = saved;
		return;
	}
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (suppressed) {
		char line[1024];

		snprintf(line, sizeof(line), "%s (suppressed %lu lines about %s)", msg, suppressed,
			 host);
		emit(level, component, line);
	} else {
		emit(level, component, msg);
	}
	errno = saved;
}
