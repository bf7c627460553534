/* SPDX-License-Identifier: Apache-2.0 */
/* Logging: level parsing, per-component overrides, FERRY_LOG, handler. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "common/log.h"
#include "ftest.h"

static int lines;
static char last[256];

static void capture(void *arg, enum ferry_log_level level, const char *component, const char *msg)
{
	(void)arg;
	lines++;
	snprintf(last, sizeof(last), "%d %s %s", (int)level, component, msg);
}

FTEST(levels_parse)
{
	ftest_assert_int_eq(ferry_log_level_parse("debug"), FERRY_LOG_DEBUG);
	ftest_assert_int_eq(ferry_log_level_parse("WARN"), FERRY_LOG_WARN);
	ftest_assert_errno(ferry_log_level_parse("loud"), -EINVAL);
}

FTEST(component_overrides)
{
	ferry_log_set_handler(capture, NULL);
	ftest_assert_ok(ferry_log_configure("error,plasma=debug"));
	FLOG_INFO("gcs", "hidden %d", 1);
	ftest_assert_int_eq(lines, 0);
	FLOG_DEBUG("plasma", "shown %d", 2);
	ftest_assert_int_eq(lines, 1);
	ftest_assert_str_eq(last, "0 plasma shown 2");
	FLOG_ERROR("gcs", "bad");
	ftest_assert_int_eq(lines, 2);
	ftest_assert_ok(ferry_log_configure("plasma=off"));
	FLOG_ERROR("plasma", "gone");
	ftest_assert_int_eq(lines, 2);
	ferry_log_set_handler(NULL, NULL);
}

FTEST(bad_spec_is_an_error_but_valid_parts_apply)
{
	ferry_log_set_handler(capture, NULL);
	ftest_assert_errno(ferry_log_configure("nonsense,wire=debug"), -EINVAL);
	ftest_assert_int_eq(lines, 1); /* the complaint itself */
	FLOG_DEBUG("wire", "x");
	ftest_assert_int_eq(lines, 2);
	ferry_log_set_handler(NULL, NULL);
}

FTEST(environment_is_read_on_first_use)
{
	setenv("FERRY_LOG", "off,loop=info", 1);
	ferry_log_set_handler(capture, NULL);
	FLOG_ERROR("gcs", "hidden");
	FLOG_INFO("loop", "shown");
	ftest_assert_int_eq(lines, 1);
	ferry_log_set_handler(NULL, NULL);
}

/* Per-peer limit: a burst per window for each host (ports do not matter), the rest counted and
 * reported on the next line that goes out; other hosts and unscoped lines are unaffected. */
FTEST(peer_lines_are_rate_limited_with_a_count)
{
	const char *prev;

	ferry_log_set_handler(capture, NULL);
	ferry__log_peer_limit(3, 100);
	for (int port = 1000; port < 1100; port++) {
		char peer[32];

		snprintf(peer, sizeof(peer), "10.0.0.1:%d", port);
		FLOG_PEER_WARN("conn", peer, "bad frame from %s", peer);
	}
	ftest_assert_int_eq(lines, 3);
	FLOG_PEER_WARN("conn", "10.0.0.2:5", "another host");
	ftest_assert_int_eq(lines, 4);
	/* A warning logged by code that does not know the peer, inside the peer's scope. */
	prev = ferry__log_peer_scope("10.0.0.1:7");
	FLOG_WARN("wire", "malformed");
	ferry__log_peer_scope(prev);
	ftest_assert_int_eq(lines, 4);
	FLOG_WARN("wire", "not about a peer");
	ftest_assert_int_eq(lines, 5);
	usleep(150 * 1000);
	FLOG_PEER_WARN("conn", "10.0.0.1:2000", "again");
	ftest_assert_int_eq(lines, 6);
	ftest_assert_str_eq(last, "2 conn again (suppressed 98 lines about 10.0.0.1)");
	ferry_log_set_handler(NULL, NULL);
}

static void clobber_errno(void *arg, enum ferry_log_level level, const char *component,
			  const char *msg)
{
	capture(arg, level, component, msg);
	errno = EIO; /* a handler that writes somewhere and fails */
}

/* Logging between a failing call and the caller's look at errno must not change it: whatever
 * the handler or the stderr writer do, FLOG_* hand errno back as they found it. */
FTEST(logging_preserves_errno)
{
	int saved_stderr = dup(STDERR_FILENO);

	ftest_assert_int_ge(saved_stderr, 0);
	ferry_log_set_handler(clobber_errno, NULL);
	errno = ENOENT;
	FLOG_ERROR("gcs", "through a handler");
	ftest_assert_int_eq(errno, ENOENT);
	errno = ENOENT;
	FLOG_PEER_WARN("conn", "10.0.0.9:1", "about a peer");
	ftest_assert_int_eq(errno, ENOENT);
	ftest_assert_int_eq(lines, 2);
	/* The default writer with stderr closed: its write(2) fails with EBADF. */
	ferry_log_set_handler(NULL, NULL);
	close(STDERR_FILENO);
	errno = ENOENT;
	FLOG_ERROR("gcs", "to a closed stderr");
	ftest_assert_int_eq(errno, ENOENT);
	errno = EAGAIN;
	FLOG_DEBUG("gcs", "disabled, only the level check runs");
	ftest_assert_int_eq(errno, EAGAIN);
	dup2(saved_stderr, STDERR_FILENO);
	close(saved_stderr);
}
