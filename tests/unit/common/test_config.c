/* SPDX-License-Identifier: Apache-2.0 */
/* Configuration: defaults, environment overrides, validation with a logged reason. */
#include <stdlib.h>

#include <ferry/config.h>

#include "ftest.h"

static char last_log[1024];

static void capture(void *arg, enum ferry_log_level level, const char *component, const char *msg)
{
	(void)arg;
	(void)level;
	snprintf(last_log, sizeof(last_log), "%s: %s", component, msg);
}

FTEST(defaults_are_sane)
{
	struct ferry_config cfg;

	ferry_config_defaults(&cfg);
	ftest_assert_uint_eq(cfg.heartbeat_ms, 100);
	ftest_assert_uint_eq(cfg.node_timeout_ms, 1000);
	ftest_assert_uint_eq(cfg.plasma_memory_bytes, 0);
	ftest_assert_uint_gt(cfg.max_message_bytes, 0);
}

FTEST(environment_overrides)
{
	struct ferry_config cfg;

	setenv("FERRY_PLASMA_MEMORY", "1.5G", 1);
	setenv("FERRY_HEARTBEAT_MS", "250", 1);
	setenv("FERRY_SPILL_DIR", "/var/tmp/spill", 1);
	ftest_assert_ok(ferry_config_load(&cfg));
	ftest_assert_uint_eq(cfg.plasma_memory_bytes, 3ull << 29);
	ftest_assert_uint_eq(cfg.heartbeat_ms, 250);
	ftest_assert_str_eq(cfg.spill_dir, "/var/tmp/spill");
}

FTEST(bad_values_are_rejected_and_logged)
{
	struct ferry_config cfg;

	ferry_log_set_handler(capture, NULL);
	setenv("FERRY_GCS_PORT", "70000", 1);
	ftest_assert_errno(ferry_config_load(&cfg), -EINVAL);
	ftest_assert_uint_eq(cfg.gcs_port, 6380); /* the default stays */
	ftest_assert_ptr_notnull(strstr(last_log, "FERRY_GCS_PORT"));
	ftest_assert_ptr_notnull(strstr(last_log, "65535"));
	ftest_assert_errno(ferry_config_set(&cfg, "heartbeat_ms", "12abc"), -EINVAL);
	ftest_assert_errno(ferry_config_set(&cfg, "no_such_thing", "1"), -ENOENT);
	ftest_assert_ok(ferry_config_set(&cfg, "ferry_heartbeat_ms", "5"));
	ftest_assert_uint_eq(cfg.heartbeat_ms, 5);
	ferry_log_set_handler(NULL, NULL);
}

FTEST(parse_size_units)
{
	uint64_t v;

	ftest_assert_ok(ferry_parse_size("4096", &v));
	ftest_assert_uint_eq(v, 4096);
	ftest_assert_ok(ferry_parse_size("64K", &v));
	ftest_assert_uint_eq(v, 65536);
	ftest_assert_ok(ferry_parse_size("2GiB", &v));
	ftest_assert_uint_eq(v, 2ull << 30);
	ftest_assert_ok(ferry_parse_size("1t", &v));
	ftest_assert_uint_eq(v, 1ull << 40);
	ftest_assert_errno(ferry_parse_size("", &v), -EINVAL);
	ftest_assert_errno(ferry_parse_size("-1", &v), -EINVAL);
	ftest_assert_errno(ferry_parse_size("30%", &v), -EINVAL);
	ftest_assert_errno(ferry_parse_size("99999999999999999999", &v), -ERANGE);
	ftest_assert_errno(ferry_parse_size("99999999999P", &v), -ERANGE);
}
