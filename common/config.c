/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Configuration: a table maps each FERRY_* variable to a field of struct ferry_config with its
 * type and accepted range, so defaults, environment overrides, command-line flags and error
 * messages all come from one place.
 */
#include <ctype.h>
#include <stdio.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <ferry/config.h>

#include "common/log.h"
#include "common/util.h"

enum field_type { FIELD_SIZE, FIELD_U32, FIELD_PATH };

struct field {
	const char *name;     /* variable name without FERRY_ */
	enum field_type type; /* how to parse */
	size_t offset;	      /* in struct ferry_config */
	uint64_t min, max;    /* inclusive range for numbers */
	const char *help;     /* for error messages */
};

#define U32_FIELD(n, f, lo, hi, h)                                        \
	{                                                                 \
		n, FIELD_U32, offsetof(struct ferry_config, f), lo, hi, h \
	}
#define SIZE_FIELD(n, f, lo, hi, h)                                        \
	{                                                                  \
		n, FIELD_SIZE, offsetof(struct ferry_config, f), lo, hi, h \
	}
#define PATH_FIELD(n, f, h)                                              \
	{                                                                \
		n, FIELD_PATH, offsetof(struct ferry_config, f), 0, 0, h \
	}

static const struct field fields[] = {
	SIZE_FIELD("PLASMA_MEMORY", plasma_memory_bytes, 0, 1ull << 44,
		   "object store arena size, 0 for 30% of RAM"),
	PATH_FIELD("PLASMA_SOCKET", plasma_socket, "object store socket path"),
	PATH_FIELD("SPILL_DIR", spill_dir, "spill directory"),
	U32_FIELD("SPILL_THRESHOLD", spill_threshold_pct, 1, 100,
		  "store usage % that starts spilling"),
	U32_FIELD("GCS_PORT", gcs_port, 1, 65535, "GCS TCP port"),
	U32_FIELD("HEARTBEAT_MS", heartbeat_ms, 1, 3600000, "heartbeat interval"),
	U32_FIELD("NODE_TIMEOUT_MS", node_timeout_ms, 10, 86400000, "node death deadline"),
	U32_FIELD("MAX_MESSAGE", max_message_bytes, 1024, 1u << 30, "largest control message"),
	U32_FIELD("TRANSFER_TIMEOUT_MS", transfer_timeout_ms, 10, 86400000, "deadline of one pull"),
	PATH_FIELD("TOKEN_FILE", token_file, "cluster token file"),
};

void ferry_config_defaults(struct ferry_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	snprintf(cfg->plasma_socket, sizeof(cfg->plasma_socket), "/tmp/ferry-plasma.sock");
	snprintf(cfg->spill_dir, sizeof(cfg->spill_dir), "/tmp/ferry-spill");
	cfg->spill_threshold_pct = 80;
	cfg->gcs_port = 6380;
	cfg->heartbeat_ms = 100;
	cfg->node_timeout_ms = 1000;
	cfg->max_message_bytes = 64u << 20;
	cfg->transfer_timeout_ms = 30000;
}

int ferry_parse_size(const char *text, uint64_t *out)
{
	static const char units[] = "KMGTP";
	unsigned long long whole;
	double frac = 0;
	char *end;
	int shift = 0;

	if (!text || !isdigit((unsigned char)*text))
		return -EINVAL;
	errno = 0;
	whole = strtoull(text, &end, 10);
	if (errno)
		return -ERANGE;
	if (*end == '.') {
		char *fend;

		frac = strtod(end, &fend);
		if (fend == end + 1)
			return -EINVAL;
		end = fend;
	}
	if (*end) {
		const char *u = strchr(units, toupper((unsigned char)*end));

		if (!u)
			return -EINVAL;
		shift = 10 * (int)(u - units + 1);
		end++;
		if (toupper((unsigned char)*end) == 'I')
			end++;
		if (toupper((unsigned char)*end) == 'B')
			end++;
		if (*end)
			return -EINVAL;
	}
	if (shift && whole >> (64 - shift))
		return -ERANGE;
	*out = (uint64_t)whole << shift;
	*out += (uint64_t)(frac * (double)(1ull << shift));
	return 0;
}

static const struct field *find_field(const char *name)
{
	if (strncasecmp(name, "FERRY_", 6) == 0)
		name += 6;
	for (size_t i = 0; i < FERRY_ARRAY_SIZE(fields); i++)
		if (strcasecmp(fields[i].name, name) == 0)
			return &fields[i];
	return NULL;
}

static int set_field(struct ferry_config *cfg, const struct field *f, const char *value)
{
	char *dst = (char *)cfg + f->offset;
	uint64_t v;
	int ret;

	if (f->type == FIELD_PATH) {
		size_t len = strlen(value);

		if (len == 0 || len >= FERRY_PATH_MAX) {
			FLOG_ERROR("config",
				   "bad value '%s' for FERRY_%s (%s): need 1..%d characters", value,
				   f->name, f->help, FERRY_PATH_MAX - 1);
			return -EINVAL;
		}
		memcpy(dst, value, len + 1);
		return 0;
	}
	ret = ferry_parse_size(value, &v);
	if (ret == 0 && (v < f->min || v > f->max))
		ret = -ERANGE;
	if (ret < 0) {
		FLOG_ERROR("config",
			   "bad value '%s' for FERRY_%s (%s): need a number in [%llu, %llu], "
			   "suffixes K, M, G, T allowed",
			   value, f->name, f->help, (unsigned long long)f->min,
			   (unsigned long long)f->max);
		return -EINVAL;
	}
	if (f->type == FIELD_U32) {
		uint32_t v32 = (uint32_t)v;

		memcpy(dst, &v32, sizeof(v32));
	} else {
		memcpy(dst, &v, sizeof(v));
	}
	return 0;
}

int ferry_config_set(struct ferry_config *cfg, const char *name, const char *value)
{
	const struct field *f = find_field(name);

	if (!f) {
		FLOG_ERROR("config", "unknown setting '%s'", name);
		return -ENOENT;
	}
	return set_field(cfg, f, value);
}

int ferry_config_load(struct ferry_config *cfg)
{
	char var[64];
	int ret = 0;

	ferry_config_defaults(cfg);
	for (size_t i = 0; i < FERRY_ARRAY_SIZE(fields); i++) {
		const char *value;

		snprintf(var, sizeof(var), "FERRY_%s", fields[i].name);
		value = getenv(var);
		if (value && set_field(cfg, &fields[i], value) < 0)
			ret = -EINVAL;
	}
	return ret;
}

void ferry__run_dir_default(char *buf, size_t size)
{
	const char *env = getenv("FERRY_RUN_DIR"), *job = getenv("SLURM_JOB_ID");

	if (env && *env)
		snprintf(buf, size, "%s", env);
	else if (job && *job && strspn(job, "0123456789_") == strlen(job))
		/* One per Slurm job: two jobs of one user on a host must not share a cluster. */
		snprintf(buf, size, "/tmp/ferry-%u-job%s", (unsigned)getuid(), job);
	else
		snprintf(buf, size, "/tmp/ferry-%u", (unsigned)getuid());
}
