/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ferry-sched: the global scheduler process, or with --group a group's (sched/server.c). Parses the command line, reads
 * the cluster token, runs the server on one io_uring loop until SIGINT or SIGTERM, then leaves
 * the GCS KV so that clients stop trying it.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <ferry/config.h>

#include "common/metrics_http.h"
#include "common/log.h"
#include "common/conn.h"
#include "common/loop.h"
#include "common/net.h"
#include "common/token.h"
#include "common/util.h"
#include "common/version.h"
#include "sched/server.h"

#define COMP "sched"
#define STOP_TIMEOUT_MS 3000u /* leaving the KV: at most this long, then exit anyway */
/* Descriptors a scheduler may need: a connection per node that forwards to it (10,000). */
#define SCHED_WANT_FDS 16384ul
/* The largest --max-clients: a bound against a typo, as ferry-gcs has (far past any need). */
#define SCHED_MAX_CLIENTS (1u << 24)

static void usage(FILE *to)
{
	fprintf(to,
		"usage: ferry-sched --gcs HOST:PORT --token-file F [--ip ADDR] [--port P]\n"
		"                   [--advertise HOST] (address in the GCS KV; default: --ip,\n"
		"                   or when that is a wildcard, this host's address to the GCS)\n"
		"                   [--max-queued SIZE] [--stall-timeout-ms MS]\n"
		"                   [--max-clients N] (connections at once, 1..%u; default: the\n"
		"                   hard open-file limit less %u; one more gets Too many users)\n"
		"                   [--metrics-port P] (Prometheus GET /metrics on --ip)\n"
		"                   [--group NAME] (a group's scheduler: its nodes are those\n"
		"                   started with --group NAME; forwards up to the global level)\n"
		"       ferry-sched --help | --version\n",
		SCHED_MAX_CLIENTS,
		FERRY_CONN_SERVER_FD_RESERVE + FERRY_CONN_SERVER_DEFAULT_MAX_HANDSHAKING);
}

struct args {
	struct ferry__sched_server_opts o; /* to the server */
	const char *token_file;		   /* --token-file */
};

static uint16_t metrics_port; /* --metrics-port: GET /metrics there; 0: none */

static int parse_args(int argc, char **argv, struct args *a)
{
	for (int i = 1; i < argc; i += 2) {
		const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		uint64_t size;
		uint32_t n;

		if (!v) {
			fprintf(stderr, "ferry-sched: %s needs a value\n", f);
			return -EINVAL;
		}
		if (!strcmp(f, "--gcs"))
			a->o.gcs_address = v;
		else if (!strcmp(f, "--token-file"))
			a->token_file = v;
		else if (!strcmp(f, "--ip"))
			a->o.host = v;
		else if (!strcmp(f, "--advertise"))
			a->o.advertise = v;
		else if (!strcmp(f, "--group"))
			a->o.group = v;
		else if (!strcmp(f, "--port") && ferry__parse_u32(v, 65535, &n) == 0)
			a->o.port = (uint16_t)n;
		else if (!strcmp(f, "--metrics-port") && ferry__parse_u32(v, 65535, &n) == 0)
			metrics_port = (uint16_t)n;
		else if (!strcmp(f, "--max-queued") && ferry_parse_size(v, &size) == 0 && size)
			a->o.max_queued_bytes = (size_t)size;
		else if (!strcmp(f, "--stall-timeout-ms") &&
			 ferry__parse_u32(v, UINT32_MAX, &n) == 0)
			a->o.stall_timeout_ms = n;
		else if (!strcmp(f, "--max-clients")) {
			if (ferry__parse_u32(v, SCHED_MAX_CLIENTS, &n) < 0 || !n) {
				fprintf(stderr,
					"ferry-sched: bad argument --max-clients '%s': a count "
					"from 1 "
					"to %u\n",
					v, SCHED_MAX_CLIENTS);
				return -EINVAL;
			}
			a->o.max_clients = n;
		} else {
			fprintf(stderr, "ferry-sched: bad argument %s %s\n", f, v);
			return -EINVAL;
		}
	}
	if (!a->token_file || !a->o.gcs_address) {
		fprintf(stderr, "ferry-sched: --gcs HOST:PORT and --token-file F are required\n");
		return -EINVAL;
	}
	return 0;
}

struct run {
	struct ferry__loop *loop;	     /* the one loop */
	struct ferry__sched_server *srv;     /* on it */
	struct ferry__loop_timer stop_timer; /* leaving the KV takes too long */
	bool stopping;			     /* a signal came */
};

static void stopped(void *arg)
{
	struct run *r = arg;

	ferry__loop_stop(r->loop);
}

static void on_stop_timer(struct ferry__loop_timer *t, int status)
{
	if (status == 0)
		stopped(t->data);
}

static void on_signal(struct ferry__loop_req *req, int result)
{
	struct run *r = req->data;
	struct signalfd_siginfo si;

	if (result >= 0 && read(req->fd, &si, sizeof(si)) > 0)
		FLOG_INFO(COMP, "signal %u: stopping", si.ssi_signo);
	if (r->stopping)
		return;
	r->stopping = true;
	r->stop_timer.data = r;
	ferry__loop_timer_start(r->loop, &r->stop_timer, STOP_TIMEOUT_MS, 0, on_stop_timer);
	ferry__sched_server_stop(r->srv, stopped, r);
}

static int run(const struct ferry__sched_server_opts *opts)
{
	struct ferry__loop_req sig_req = {0};
	struct ferry__metrics_server *metrics = NULL;
	struct run r = {0};
	sigset_t mask;
	int sfd, ret;

	sigemptyset(&mask);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGTERM);
	sigprocmask(SIG_BLOCK, &mask, NULL);
	signal(SIGPIPE, SIG_IGN);
	sfd = signalfd(-1, &mask, SFD_CLOEXEC);
	if (sfd < 0)
		return -errno;
	ret = ferry__loop_create(NULL, &r.loop);
	if (ret < 0)
		goto err_close_sfd;
	ret = ferry__sched_server_create(r.loop, opts, &r.srv);
	if (ret < 0)
		goto err_destroy_loop;
	if (metrics_port) {
		struct ferry__metrics_opts mo = {
			.ip = opts->host, .port = metrics_port, .groups = FERRY__MG_SCHED};

		ret = ferry__metrics_server_start(r.loop, &mo, &metrics);
		if (ret < 0) {
			ferry__sched_server_destroy(r.srv);
			goto err_destroy_loop;
		}
		printf("ferry-sched metrics on http://%s:%u/metrics\n",
		       opts->host && *opts->host ? opts->host : "0.0.0.0",
		       ferry__metrics_server_port(metrics));
	}
	sig_req.data = &r;
	ret = ferry__loop_poll(r.loop, &sig_req, sfd, POLLIN, false, on_signal);
	if (ret == 0) {
		/* Tests and `ferry start` wait for this line to know the port. */
		printf("ferry-sched listening on port %u id %s\n", ferry__sched_server_port(r.srv),
		       ferry__sched_server_id(r.srv));
		fflush(stdout);
		ret = ferry__loop_run(r.loop);
	}
	ferry__metrics_server_stop(metrics); /* freed as the loop's end cancels its polls */
	ferry__sched_server_destroy(r.srv);
err_destroy_loop:
	ferry__loop_destroy(r.loop);
err_close_sfd:
	close(sfd);
	return ret;
}

int main(int argc, char **argv)
{
	struct args a = {0};
	char token[FERRY_TOKEN_MAX];
	int ret;

	if (ferry__args_help(argc, argv, "ferry-sched", usage))
		return 0;
	if (parse_args(argc, argv, &a) < 0) {
		usage(stderr);
		return 2;
	}
	(void)ferry__net_raise_fd_limit("ferry-sched", SCHED_WANT_FDS);
	ret = ferry__token_read(a.token_file, token, sizeof(token));
	if (ret < 0)
		return 1;
	a.o.token = token;
	a.o.token_len = (size_t)ret;
	ret = run(&a.o);
	if (ret < 0) {
		FLOG_ERROR(COMP, "exiting: %s", ferry_strerror(-ret));
		return 1;
	}
	return 0;
}
