/* SPDX-License-Identifier: Apache-2.0 */
/* Logging: level parsing, per-component overrides, FERRY_LOG, handler. */
#include <stdlib.h>

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
