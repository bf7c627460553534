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
#include "node/node_opts.h"
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
		    "       ferry-node --help | --version\n");
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
	if (ferry__node_parse_args(argc, (const char *const *)argv, &opts, &token_file) < 0) {
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
