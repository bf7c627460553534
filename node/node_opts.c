/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ferry-node's command line (node/main.c), apart from main() so that the unit tests parse it
 * (tests/unit/node). Flags come in pairs "--name value".
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <ferry/config.h>

#include "common/loop.h"
#include "common/util.h"
#include "node/node_opts.h"
#include "node/resources.h"
#include "sched/client.h"
#include "transport/objmgr.h"

/* A port, 0..65535 (0: any). */
static int parse_port(const char *s, uint16_t *out)
{
	uint32_t v;
	int ret = ferry__parse_u32(s, 65535, &v);

	if (ret == 0)
		*out = (uint16_t)v;
	return ret;
}

static int parse_transport(const char *s, enum ferry__node_transport *out)
{
	if (!strcmp(s, "auto"))
		*out = FERRY__NODE_TRANSPORT_AUTO;
	else if (!strcmp(s, "tcp"))
		*out = FERRY__NODE_TRANSPORT_TCP;
	else if (!strcmp(s, "rdma"))
		*out = FERRY__NODE_TRANSPORT_RDMA;
	else
		return -EINVAL;
	return 0;
}

/* Replies unsent to one puller before its requests wait: 1 .. 4 GiB - 1 (K/M/G allowed). */
static int parse_queued(const char *s, uint32_t *out)
{
	uint64_t n;

	if (ferry_parse_size(s, &n) < 0 || n < 1 || n >= UINT32_MAX)
		return -EINVAL;
	*out = (uint32_t)n;
	return 0;
}

/* Checked here so that a bad amount is named before anything starts; the node parses again. */
static int parse_amount(const char *flag, const char *v, const char **out)
{
	int64_t amount;

	if (ferry__res_parse_amount(v, flag, &amount) < 0)
		return -EINVAL;
	*out = v;
	return 0;
}

static int parse_custom(const char *v, const char **out)
{
	static struct ferry__res_set set; /* large: not on the stack; main's thread only */

	memset(&set, 0, sizeof(set));
	if (ferry__res_parse_custom(v, &set) < 0)
		return -EINVAL;
	*out = v;
	return 0;
}

/* --num-workers: 0 is "on demand only", which the options spell -1 (their 0 is the default). */
static int parse_num_workers(const char *v, int32_t *out)
{
	uint32_t n;
	int ret = ferry__parse_u32(v, FERRY__NODE_MAX_WORKERS, &n);

	if (ret == 0)
		*out = n ? (int32_t)n : -1;
	return ret;
}

/* A whole number 0..@max for a flag, saying in @why what fits when it does not. */
static int parse_u32(const char *v, uint32_t max, uint32_t *out, char *why, size_t size)
{
	int ret = ferry__parse_u32(v, max, out);

	if (ret < 0)
		snprintf(why, size, "a whole number from 0 to %u", max);
	return ret;
}

/* One "--flag value" pair into @o; -EINVAL with what the flag takes in @why. */
static int parse_one(const char *a, const char *v, struct ferry__node_opts *o,
		     const char **token_file, char *why, size_t size)
{
	const char *takes = NULL;

	if (!strcmp(a, "--gcs"))
		o->gcs_address = v;
	else if (!strcmp(a, "--token-file"))
		*token_file = v;
	else if (!strcmp(a, "--memory"))
		takes = ferry_parse_size(v, &o->memory_bytes) < 0 ? "a size such as 512M or 4G"
								  : NULL;
	else if (!strcmp(a, "--transport"))
		takes = parse_transport(v, &o->transport) < 0 ? "auto, tcp or rdma" : NULL;
	else if (!strcmp(a, "--ip"))
		o->ip = v;
	else if (!strcmp(a, "--port") || !strcmp(a, "--rdma-port"))
		takes = parse_port(v, a[2] == 'p' ? &o->port : &o->rdma_port) < 0
				? "a port from 0 (any) to 65535"
				: NULL;
	else if (!strcmp(a, "--socket"))
		o->socket_path = v;
	else if (!strcmp(a, "--spill-dir"))
		o->spill_dir = v;
	else if (!strcmp(a, "--node-id-file"))
		o->node_id_file = v;
	else if (!strcmp(a, "--rdma-busy-poll"))
		if (!strcmp(v, "on") || !strcmp(v, "off"))
			o->rdma_busy_poll = !strcmp(v, "on");
		else
			takes = "on or off";
	else if (!strcmp(a, "--shm"))
		if (!strcmp(v, "on") || !strcmp(v, "off"))
			o->no_shm = !strcmp(v, "off");
		else
			takes = "on or off";
	else if (!strcmp(a, "--objmgr-loop"))
		if (!strcmp(v, "auto"))
			o->objmgr_loop = FERRY__NODE_OBJMGR_LOOP_AUTO;
		else if (!strcmp(v, "own"))
			o->objmgr_loop = FERRY__NODE_OBJMGR_LOOP_OWN;
		else if (!strcmp(v, "node"))
			o->objmgr_loop = FERRY__NODE_OBJMGR_LOOP_NODE;
		else
			takes = "auto, own or node";
	else if (!strcmp(a, "--spin-us"))
		return parse_u32(v, FERRY_LOOP_MAX_SPIN_US, &o->spin_us, why, size);
	else if (!strcmp(a, "--metrics-port"))
		takes = parse_port(v, &o->metrics_port) < 0 ? "a port (0: no metrics endpoint)"
							    : NULL;
	else if (!strcmp(a, "--copy-batch-us"))
		return parse_u32(v, FERRY__NODE_MAX_COPY_BATCH_US, &o->copy_batch_us, why, size);
	else if (!strcmp(a, "--notice-hold-ms"))
		return parse_u32(v, FERRY__OBJMGR_MAX_NOTICE_HOLD_MS, &o->notice_hold_ms, why,
				 size);
	else if (!strcmp(a, "--max-queued"))
		takes = parse_queued(v, &o->max_queued_bytes) < 0 ? "a size from 1 to 4G - 1"
								  : NULL;
	else if (!strcmp(a, "--stall-timeout-ms"))
		return parse_u32(v, UINT32_MAX - 1, &o->stall_timeout_ms, why, size);
	else if (!strcmp(a, "--num-cpus") || !strcmp(a, "--num-gpus"))
		takes = parse_amount(a, v, a[6] == 'c' ? &o->num_cpus : &o->num_gpus) < 0
				? "an amount >= 0, in steps of 1/10000"
				: NULL;
	else if (!strcmp(a, "--group"))
		takes = ferry__sched_group_name_ok(v) ? (o->sched_group = v, NULL)
						      : "1 to 63 of A-Z a-z 0-9 _ . -";
	else if (!strcmp(a, "--resources"))
		takes = parse_custom(v, &o->resources) < 0 ? "name=amount,... (see above)" : NULL;
	else if (!strcmp(a, "--num-workers"))
		takes = parse_num_workers(v, &o->num_workers) < 0
				? "a whole number up to the most workers a node may have"
				: NULL;
	else if (!strcmp(a, "--max-workers"))
		return parse_u32(v, FERRY__NODE_MAX_WORKERS, &o->max_workers, why, size);
	else if (!strcmp(a, "--worker-idle-ms"))
		return parse_u32(v, UINT32_MAX - 1, &o->worker_idle_ms, why, size);
	else if (!strcmp(a, "--spill-queue"))
		return parse_u32(v, 100000, &o->spill_queue, why, size);
	else if (!strcmp(a, "--worker-exe"))
		if (*v)
			o->worker_exe = v;
		else
			takes = "a path";
	else
		takes = "no such flag";
	if (!takes)
		return 0;
	snprintf(why, size, "%s", takes);
	return -EINVAL;
}

int ferry__node_parse_args(int argc, const char *const *argv, struct ferry__node_opts *o,
			   const char **token_file)
{
	for (int i = 1; i < argc; i += 2) {
		char why[96];

		if (i + 1 >= argc) {
			fprintf(stderr, "ferry-node: %s needs a value\n", argv[i]);
			return -EINVAL;
		}
		if (parse_one(argv[i], argv[i + 1], o, token_file, why, sizeof(why)) < 0) {
			fprintf(stderr, "ferry-node: bad argument %s '%s': %s\n", argv[i],
				argv[i + 1], why);
			return -EINVAL;
		}
	}
	/* Both required, and not empty: "--gcs ''" would only fail later, less clearly. */
	if (!o->gcs_address || !*o->gcs_address || !*token_file || !**token_file) {
		fprintf(stderr, "ferry-node: --gcs and --token-file are required\n");
		return -EINVAL;
	}
	return 0;
}
