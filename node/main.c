/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ferry-node: one node of a cluster (plasma store + object manager, registered with the GCS).
 * Parses the command line, starts the node (node/node.h), prints one "ready" line, and stops
 * cleanly on SIGINT or SIGTERM.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ferry/config.h>
#include <ferry/id.h>

#include "common/log.h"
#include "common/loop.h"
#include "common/token.h"
#include "common/util.h"
#include "common/version.h"
#include "node/node.h"
#include "node/resources.h"
#include "transport/objmgr.h"

#define COMP "node"

static void usage(FILE *to)
{
	fprintf(to, "usage: ferry-node --gcs HOST:PORT --token-file F [--memory SIZE]\n"
		    "                  [--transport rdma|tcp|auto] [--ip ADDR] [--port P]\n"
		    "                  [--socket PATH] [--spill-dir D] [--node-id-file F]\n"
		    "                  [--rdma-port P] [--rdma-busy-poll on|off] [--spin-us US]\n"
		    "                  [--copy-batch-us US] [--notice-hold-ms MS]\n"
		    "                  [--max-queued SIZE] [--stall-timeout-ms MS]\n"
		    "                  [--num-cpus N] [--num-gpus N] [--resources NAME=N,...]\n"
		    "  --num-cpus N    CPUs to offer (fractions to 1/10000 allowed); default: the\n"
		    "                  affinity mask, capped by the cgroup's CPU quota\n"
		    "  --num-gpus N    GPUs to offer; default 0 (GPUs are not detected)\n"
		    "  --resources     custom resources, e.g. tpu=4,ssd=0.5 (at most 64)\n"
		    "       ferry-node --help | --version\n");
}

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

static int parse_one(const char *a, const char *v, struct ferry__node_opts *o,
		     const char **token_file)
{
	if (!strcmp(a, "--gcs"))
		o->gcs_address = v;
	else if (!strcmp(a, "--token-file"))
		*token_file = v;
	else if (!strcmp(a, "--memory"))
		return ferry_parse_size(v, &o->memory_bytes);
	else if (!strcmp(a, "--transport"))
		return parse_transport(v, &o->transport);
	else if (!strcmp(a, "--ip"))
		o->ip = v;
	else if (!strcmp(a, "--port"))
		return parse_port(v, &o->port);
	else if (!strcmp(a, "--socket"))
		o->socket_path = v;
	else if (!strcmp(a, "--spill-dir"))
		o->spill_dir = v;
	else if (!strcmp(a, "--node-id-file"))
		o->node_id_file = v;
	else if (!strcmp(a, "--rdma-port"))
		return parse_port(v, &o->rdma_port);
	else if (!strcmp(a, "--rdma-busy-poll") && (!strcmp(v, "on") || !strcmp(v, "off")))
		o->rdma_busy_poll = !strcmp(v, "on");
	else if (!strcmp(a, "--spin-us"))
		return ferry__parse_u32(v, FERRY_LOOP_MAX_SPIN_US, &o->spin_us);
	else if (!strcmp(a, "--copy-batch-us"))
		return ferry__parse_u32(v, FERRY__NODE_MAX_COPY_BATCH_US, &o->copy_batch_us);
	else if (!strcmp(a, "--notice-hold-ms"))
		return ferry__parse_u32(v, FERRY__OBJMGR_MAX_NOTICE_HOLD_MS, &o->notice_hold_ms);
	else if (!strcmp(a, "--max-queued"))
		return parse_queued(v, &o->max_queued_bytes);
	else if (!strcmp(a, "--stall-timeout-ms"))
		return ferry__parse_u32(v, UINT32_MAX - 1, &o->stall_timeout_ms);
	else if (!strcmp(a, "--num-cpus") || !strcmp(a, "--num-gpus"))
		return parse_amount(a, v, a[6] == 'c' ? &o->num_cpus : &o->num_gpus);
	else if (!strcmp(a, "--resources"))
		return parse_custom(v, &o->resources);
	else
		return -EINVAL;
	return 0;
}

static int parse_args(int argc, char **argv, struct ferry__node_opts *o, const char **token_file)
{
	for (int i = 1; i < argc; i += 2) {
		if (i + 1 >= argc || parse_one(argv[i], argv[i + 1], o, token_file) < 0) {
			fprintf(stderr, "ferry-node: bad argument %s\n", argv[i]);
			return -EINVAL;
		}
	}
	return o->gcs_address && *token_file ? 0 : -EINVAL;
}

int main(int argc, char **argv)
{
	struct ferry__node_opts opts = {0};
	const char *token_file = NULL;
	char token[FERRY_TOKEN_MAX], hex[FERRY_ID_HEX_MAX];
	struct ferry__node *node;
	const char *device;
	unsigned transports;
	sigset_t stop_sigs;
	int ret, sig;

	for (int i = 1; i < argc; i += 2) { /* flags come in pairs: a value is never taken */
		if (ferry__is_help_flag(argv[i])) {
			usage(stdout);
			return 0;
		}
		if (ferry__is_version_flag(argv[i])) {
			ferry__version_print("ferry-node");
			return 0;
		}
	}
	if (parse_args(argc, argv, &opts, &token_file) < 0) {
		usage(stderr);
		return 2;
	}
	ret = ferry__token_read(token_file, token, sizeof(token));
	if (ret < 0)
		return 1;
	opts.token = token;
	opts.token_len = (size_t)ret;
	/* Every thread the node starts inherits the mask: the signals wait for sigwait below. */
	sigemptyset(&stop_sigs);
	sigaddset(&stop_sigs, SIGINT);
	sigaddset(&stop_sigs, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &stop_sigs, NULL);
	signal(SIGPIPE, SIG_IGN);
	ret = ferry__node_start(&opts, &node);
	if (ret < 0) {
		FLOG_ERROR(COMP, "cannot start (GCS %s): %s", opts.gcs_address,
			   ferry_strerror(ret));
		return 1;
	}
	ferry_node_id_to_hex(ferry__node_id(node), hex, sizeof(hex));
	transports = ferry__objmgr_transports(ferry__node_objmgr(node));
	device = ferry__objmgr_rdma_device(ferry__node_objmgr(node));
	printf("ferry-node ready id=%s address=%s socket=%s transport=%s%s%s%s%s%s\n", hex,
	       ferry__node_address(node), ferry__node_socket(node),
	       opts.transport == FERRY__NODE_TRANSPORT_AUTO ? "auto:" : "",
	       transports & FERRY_GCS_TRANSPORT_RDMA ? "rdma(" : "", device ? device : "",
	       transports & FERRY_GCS_TRANSPORT_RDMA ? ")+" : "", "tcp",
	       transports & FERRY_GCS_TRANSPORT_SHM ? "+shm" : "");
	fflush(stdout);
	sigwait(&stop_sigs, &sig);
	FLOG_INFO(COMP, "signal %d: stopping", sig);
	ferry__node_stop(node);
	return 0;
}
