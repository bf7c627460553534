/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Configuration: one struct of defaults, each field overridable by a FERRY_* environment
 * variable, validated with a clear error. Daemons then apply their command-line flags on top.
 *
 * Thread model: ferry_config_load() reads the environment; call it before starting threads
 * that may call setenv(3).
 */
#ifndef FERRY_CONFIG_H
#define FERRY_CONFIG_H

#include <stdint.h>

#include <ferry/common.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FERRY_PATH_MAX 256

struct ferry_config {
	uint64_t plasma_memory_bytes; /* FERRY_PLASMA_MEMORY: arena size; 0 = 30% of RAM, capped */
	char plasma_socket[FERRY_PATH_MAX]; /* FERRY_PLASMA_SOCKET: store's Unix socket path */
	char spill_dir[FERRY_PATH_MAX];	    /* FERRY_SPILL_DIR: where primary copies spill */
	uint32_t spill_threshold_pct;	 /* FERRY_SPILL_THRESHOLD: usage % that starts spilling */
	uint32_t gcs_port;		 /* FERRY_GCS_PORT: GCS TCP port */
	uint32_t heartbeat_ms;		 /* FERRY_HEARTBEAT_MS: node heartbeat interval */
	uint32_t node_timeout_ms;	 /* FERRY_NODE_TIMEOUT_MS: missed-heartbeat deadline */
	uint32_t max_message_bytes;	 /* FERRY_MAX_MESSAGE: largest control message accepted */
	uint32_t transfer_timeout_ms;	 /* FERRY_TRANSFER_TIMEOUT_MS: deadline of one pull */
	char token_file[FERRY_PATH_MAX]; /* FERRY_TOKEN_FILE: cluster token */
};

/* ferry_config_defaults() - fill @cfg with the built-in defaults (no environment). */
FERRY_API void ferry_config_defaults(struct ferry_config *cfg);

/*
 * ferry_config_load() - defaults, then FERRY_* overrides from the environment.
 * Returns 0, or -EINVAL when a variable is malformed or out of range: the log names the
 * variable, its value and the accepted range, and @cfg keeps the default for that field.
 */
FERRY_API int ferry_config_load(struct ferry_config *cfg);

/*
 * ferry_config_set() - set one field by its variable name (with or without the FERRY_ prefix,
 * any case: "plasma_memory", "FERRY_HEARTBEAT_MS"), as a command line would.
 * Returns 0, -ENOENT for an unknown name, -EINVAL for a bad value (logged).
 */
FERRY_API int ferry_config_set(struct ferry_config *cfg, const char *name, const char *value);

/* ferry_parse_size() - "123", "64K", "1.5G", "30%"(rejected: -EINVAL) -> bytes. K/M/G/T are
 * binary (KiB...). Returns 0 or -EINVAL / -ERANGE. */
FERRY_API int ferry_parse_size(const char *text, uint64_t *out);

#ifdef __cplusplus
}
#endif
#endif
