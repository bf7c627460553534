/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ferry-node: one node of a cluster (plasma store + object manager, registered with the GCS).
 * Parses the command line, starts the node (node/node.h), prints one "ready" line, and stops
 * cleanly on SIGINT or SIGTERM, or with exit status 3 once the GCS declared the node dead (a
 * node ID never comes back: a new node must start). A signal that comes while the node is still starting (its store
 * pre-faults for seconds) ends the process at once: nothing is serving yet, and a `ferry stop`
 * must not wait for a start to finish.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ferry/config.h>
#include <ferry/id.h>

#include "common/log.h"
#include "common/loop.h"
#include "common/net.h"
#include "common/token.h"
#include "common/util.h"
#include "common/version.h"
#include "node/node.h"
#include "node/node_opts.h"
#include "transport/objmgr.h"

#define COMP "node"
/* Descriptors a node may need: its store clients and workers (several sockets each), peers. */
#define NODE_WANT_FDS 4096ul

static void usage(FILE *to)
{
	fprintf(to, "usage: ferry-node --gcs HOST:PORT --token-file F [--memory SIZE]\n"
		    "                  [--transport rdma|tcp|auto] [--ip ADDR] [--port P]\n"
		    "                  [--socket PATH] [--spill-dir D] [--node-id-file F]\n"
		    "                  [--rdma-port P] [--rdma-busy-poll on|off] [--spin-us US]\n"
		    "                  [--objmgr-loop auto|own|node] [--shm on|off]\n"
		    "                  [--copy-batch-us US] [--notice-hold-ms MS]\n"
		    "                  [--max-queued SIZE] [--stall-timeout-ms MS]\n"
		    "                  [--num-cpus N] [--num-gpus N] [--resources NAME=N,...]\n"
		    "                  [--num-workers N] [--max-workers M] [--worker-idle-ms MS]\n"
		    "                  [--worker-exe PATH] [--spill-queue N] [--group NAME]\n"
		    "                  [--metrics-port P] (Prometheus GET /metrics on --ip)\n"
		    "  --group NAME    this node's scheduler group: what it cannot run goes to\n"
		    "                  ferry-sched --group NAME (then up the tree)\n"
		    "  --num-cpus N    CPUs to offer (fractions to 1/10000 allowed); default: the\n"
		    "                  affinity mask, capped by the cgroup's CPU quota\n"
		    "  --num-gpus N    GPUs to offer; default 0 (GPUs are not detected)\n"
		    "  --resources     custom resources, e.g. tpu=4,ssd=0.5 (at most 64)\n"
		    "  --num-workers N ferry-worker processes kept started; default: the CPUs\n"
		    "                  (rounded up); 0: started on demand only\n"
		    "  --max-workers M at most, not counting those whose task waits; default\n"
		    "                  4 x CPUs (never below N)\n"
		    "  --worker-idle-ms MS  workers above N idle this long end (default 10000)\n"
		    "  --spill-queue N lease requests waiting here before new ones go to the\n"
		    "                  scheduler; default: the CPUs (rounded up)\n"
		    "  --worker-exe P  the worker program; default: $FERRY_WORKER_EXE, else\n"
		    "                  ferry-worker beside ferry-node, else in PATH\n"
		    "  --objmgr-loop   where pulls are served: own, a loop thread of their own;\n"
		    "                  node, the node's one loop (a thread less); auto (default):\n"
		    "                  own when the node serves RDMA, else node\n"
		    "  --shm off       never pull over shared memory from a node on this host:\n"
		    "                  its network transport instead, as between hosts (tests)\n"
		    "       ferry-node --help | --version\n");
}

/*
 * The stop signals are waited for from before the start by a thread of its own, which the main
 * thread ends with SIGUSR1 once the node serves and then waits for them itself (the idle node
 * keeps no extra thread).
 */
static sigset_t stop_sigs;
static atomic_bool started;
static int stop_sig;

static void *start_watch(void *arg)
{
	sigset_t set = stop_sigs;
	int sig = 0;

	(void)arg;
	sigaddset(&set, SIGUSR1);
	sigwait(&set, &sig);
	if (sig == SIGUSR1)
		return NULL;
	if (!atomic_load(&started)) {
		FLOG_WARN(COMP, "signal %d while starting: exiting before the node serves", sig);
		_exit(1);
	}
	stop_sig = sig; /* read after the join */
	return NULL;
}

/* The GCS declared this node dead (node.c logged it): stop as a signal would, exit 3. */
static atomic_bool declared_dead;

static void on_declared_dead(void *arg)
{
	(void)arg;
	atomic_store(&declared_dead, true);
	kill(getpid(), SIGTERM);
}

int main(int argc, char **argv)
{
	struct ferry__node_opts opts = {0};
	const char *token_file = NULL;
	char token[FERRY_TOKEN_MAX], hex[FERRY_ID_HEX_MAX];
	struct ferry__node *node;
	const char *device;
	unsigned transports;
	pthread_t watch;
	int ret;

	if (ferry__args_help(argc, argv, "ferry-node", usage))
		return 0;
	if (ferry__node_parse_args(argc, (const char *const *)argv, &opts, &token_file) < 0) {
		usage(stderr);
		return 2;
	}
	(void)ferry__net_raise_fd_limit("ferry-node", NODE_WANT_FDS);
	ret = ferry__token_read(token_file, token, sizeof(token));
	if (ret < 0)
		return 1;
	opts.token = token;
	opts.token_len = (size_t)ret;
	opts.on_declared_dead = on_declared_dead;
	/* Every thread the node starts inherits the mask: the signals wait for sigwait below. */
	sigemptyset(&stop_sigs);
	sigaddset(&stop_sigs, SIGINT);
	sigaddset(&stop_sigs, SIGTERM);
	{
		sigset_t all = stop_sigs;

		sigaddset(&all, SIGUSR1);
		pthread_sigmask(SIG_BLOCK, &all, NULL);
	}
	signal(SIGPIPE, SIG_IGN);
	if (pthread_create(&watch, NULL, start_watch, NULL) != 0) {
		FLOG_ERROR(COMP, "cannot start the signal thread");
		return 1;
	}
	ret = ferry__node_start(&opts, &node);
	if (ret < 0) {
		FLOG_ERROR(COMP, "cannot start (GCS %s): %s", opts.gcs_address,
			   ferry_strerror(ret));
		return 1;
	}
	/* Before the ready line: whoever reads it may signal at once, and must get a clean stop. */
	atomic_store(&started, true);
	ferry_node_id_to_hex(ferry__node_id(node), hex, sizeof(hex));
	transports = ferry__objmgr_transports(ferry__node_objmgr(node));
	device = ferry__objmgr_rdma_device(ferry__node_objmgr(node));
	printf("ferry-node ready id=%s address=%s socket=%s transport=%s%s%s%s%s%s runtime=%s", hex,
	       ferry__node_address(node), ferry__node_socket(node),
	       opts.transport == FERRY__NODE_TRANSPORT_AUTO ? "auto:" : "",
	       transports & FERRY_GCS_TRANSPORT_RDMA ? "rdma(" : "", device ? device : "",
	       transports & FERRY_GCS_TRANSPORT_RDMA ? ")+" : "", "tcp",
	       transports & FERRY_GCS_TRANSPORT_SHM ? "+shm" : "",
	       ferry__node_runtime_socket(node));
	if (ferry__node_metrics_port(node))
		printf(" metrics=http://%s:%u/metrics", ferry__node_ip(node),
		       ferry__node_metrics_port(node));
	printf("\n");
	fflush(stdout);
	pthread_kill(watch, SIGUSR1);
	pthread_join(watch, NULL);
	if (!stop_sig)
		sigwait(&stop_sigs, &stop_sig);
	FLOG_INFO(COMP, "signal %d: stopping", stop_sig);
	ferry__node_stop(node);
	return atomic_load(&declared_dead) ? 3 : 0;
}
