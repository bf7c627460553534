/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ferry-gcs: the Global Control Store server process. Parses the command line, reads the
 * cluster token, runs the server on one io_uring loop until SIGINT or SIGTERM.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <ferry/config.h>

#include "common/conn.h"
#include "common/log.h"
#include "common/metrics_http.h"
#include "common/net.h"
#include "common/token.h"
#include "common/util.h"
#include "common/version.h"
#include "gcs/server.h"

#define COMP "gcs"
#define DEFAULT_BIND_RETRY_MS 5000u
/* Descriptors the GCS may need: one connection per node (the design scales to 10,000), driver,
 * worker that talks to it, scheduler and CLI. */
#define GCS_WANT_FDS 16384ul
/* Largest count the count flags take (--max-subscriptions, --max-clients): a bound against a
 * typo, far past any real need. */
#define GCS_MAX_COUNT (1u << 24)

static void usage(FILE *to)
{
	fprintf(to,
		"usage: ferry-gcs --port P --token-file F [--wal DIR] [--shard I/N]\n"
		"                 [--shard0 HOST:PORT] [--host ADDR] [--node-deadline-ms MS]\n"
		"                 [--spin-us US] (busy poll after traffic, 0..1000000, default "
		"%u)\n"
		"                 [--bind-retry-ms MS] (port in use: retry, default %u)\n"
		"                 [--max-queued SIZE] [--stall-timeout-ms MS]\n"
		"                 [--frame-timeout-ms MS] [--handshake-timeout-ms MS]\n"
		"                 [--max-handshaking N] (slow or hostile clients; 0 = default)\n"
		"                 [--max-subscriptions N] (per connection, 1..%u, default %u)\n"
		"                 [--max-clients N] (connections at once, 1..%u; default: the\n"
		"                 hard open-file limit less %u; one more gets Too many users)\n"
		"                 [--metrics-port P] (Prometheus GET /metrics on --host)\n"
		"       ferry-gcs --help | --version\n",
		FERRY_GCS_SPIN_US, DEFAULT_BIND_RETRY_MS, GCS_MAX_COUNT,
		FERRY__GCS_DEFAULT_MAX_SUBSCRIPTIONS, GCS_MAX_COUNT,
		FERRY_CONN_SERVER_FD_RESERVE + FERRY_CONN_SERVER_DEFAULT_MAX_HANDSHAKING);
}

/* Is @a one of the flags parse_args() takes (each with a value)? */
static bool flag_known(const char *a)
{
	static const char *const flags[] = {
		"--port",
		"--token-file",
		"--wal",
		"--shard0",
		"--host",
		"--node-deadline-ms",
		"--bind-retry-ms",
		"--max-queued",
		"--stall-timeout-ms",
		"--frame-timeout-ms",
		"--handshake-timeout-ms",
		"--max-handshaking",
		"--max-subscriptions",
		"--max-clients",
		"--spin-us",
		"--shard",
		"--metrics-port",
	};

	for (size_t i = 0; i < FERRY_ARRAY_SIZE(flags); i++)
		if (!strcmp(a, flags[i]))
			return true;
	return false;
}

/* A count from 1 to GCS_MAX_COUNT into *@out, or -EINVAL with the reason on stderr. */
static int parse_count(const char *flag, const char *v, uint32_t *out)
{
	if (ferry__parse_u32(v, GCS_MAX_COUNT, out) == 0 && *out > 0)
		return 0;
	fprintf(stderr, "ferry-gcs: bad argument %s '%s': a count from 1 to %u\n", flag, v,
		GCS_MAX_COUNT);
	return -EINVAL;
}

static uint16_t metrics_port; /* --metrics-port: GET /metrics there; 0: none */

static int parse_args(int argc, char **argv, struct ferry__gcs_server_opts *o, unsigned *spin_us,
		      const char **token_file)
{
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		uint64_t size;
		uint32_t n;

		if (!flag_known(a)) {
			fprintf(stderr, "ferry-gcs: bad argument %s (not a flag of ferry-gcs)\n",
				a);
			return -EINVAL;
		}
		if (!v) {
			fprintf(stderr, "ferry-gcs: %s needs a value\n", a);
			return -EINVAL;
		}
		i++;
		if (!strcmp(a, "--port") && ferry__parse_u32(v, 65535, &n) == 0)
			o->port = (uint16_t)n;
		else if (!strcmp(a, "--token-file"))
			*token_file = v;
		else if (!strcmp(a, "--wal"))
			o->wal_dir = v;
		else if (!strcmp(a, "--shard0"))
			o->shard0_address = v;
		else if (!strcmp(a, "--host"))
			o->host = v;
		else if (!strcmp(a, "--metrics-port") && ferry__parse_u32(v, 65535, &n) == 0)
			metrics_port = (uint16_t)n;
		else if (!strcmp(a, "--node-deadline-ms") &&
			 ferry__parse_u32(v, UINT32_MAX, &n) == 0)
			o->node_deadline_ms = n;
		else if (!strcmp(a, "--bind-retry-ms") && ferry__parse_u32(v, UINT32_MAX, &n) == 0)
			o->bind_retry_ms = n;
		else if (!strcmp(a, "--max-queued") && ferry_parse_size(v, &size) == 0 && size)
			o->max_queued_bytes = (size_t)size;
		else if (!strcmp(a, "--stall-timeout-ms") &&
			 ferry__parse_u32(v, UINT32_MAX, &n) == 0)
			o->stall_timeout_ms = n;
		else if (!strcmp(a, "--frame-timeout-ms") &&
			 ferry__parse_u32(v, UINT32_MAX, &n) == 0)
			o->frame_timeout_ms = n;
		else if (!strcmp(a, "--handshake-timeout-ms") &&
			 ferry__parse_u32(v, UINT32_MAX, &n) == 0)
			o->handshake_timeout_ms = n;
		else if (!strcmp(a, "--max-handshaking") &&
			 ferry__parse_u32(v, UINT32_MAX, &n) == 0)
			o->max_handshaking = n;
		else if (!strcmp(a, "--max-subscriptions")) {
			if (parse_count(a, v, &n) < 0)
				return -EINVAL;
			o->max_subscriptions = n;
		} else if (!strcmp(a, "--max-clients")) {
			if (parse_count(a, v, &n) < 0)
				return -EINVAL;
			o->max_clients = n;
		} else if (!strcmp(a, "--spin-us") &&
			   ferry__parse_u32(v, FERRY_LOOP_MAX_SPIN_US, &n) == 0)
			*spin_us = n;
		else if (!strcmp(a, "--shard") &&
			 sscanf(v, "%u/%u", &o->shard_index, &o->shard_count) == 2)
			continue;
		else {
			fprintf(stderr, "ferry-gcs: bad argument %s %s\n", a, v);
			return -EINVAL;
		}
	}
	if (!*token_file) {
		fprintf(stderr, "ferry-gcs: --token-file F is required (the cluster token)\n");
		return -EINVAL;
	}
	return 0;
}

static void on_signal(struct ferry__loop_req *req, int result)
{
	struct signalfd_siginfo si;

	if (result >= 0 && read(req->fd, &si, sizeof(si)) > 0)
		FLOG_INFO(COMP, "signal %u: stopping", si.ssi_signo);
	ferry__loop_stop(req->data);
}

static int run(const struct ferry__gcs_server_opts *opts, unsigned spin_us)
{
	struct ferry__loop_opts lo = {.spin_us = spin_us};
	struct ferry__loop_req sig_req = {0};
	struct ferry__gcs_server *srv = NULL;
	struct ferry__metrics_server *metrics = NULL;
	struct ferry__loop *loop;
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
	ret = ferry__loop_create(&lo, &loop);
	if (ret < 0)
		goto err_close_sfd;
	ret = ferry__gcs_server_create(loop, opts, &srv);
	if (ret < 0)
		goto err_destroy_loop;
	if (metrics_port) {
		struct ferry__metrics_opts mo = {
			.ip = opts->host, .port = metrics_port, .groups = FERRY__MG_GCS};

		ret = ferry__metrics_server_start(loop, &mo, &metrics);
		if (ret < 0)
			goto err_destroy_loop;
		printf("ferry-gcs metrics on http://%s:%u/metrics\n",
		       opts->host && *opts->host ? opts->host : "0.0.0.0",
		       ferry__metrics_server_port(metrics));
	}
	sig_req.data = loop;
	ret = ferry__loop_poll(loop, &sig_req, sfd, POLLIN, false, on_signal);
	if (ret == 0) {
		/* Tests wait for this line to know the port. */
		printf("ferry-gcs listening on port %u\n", ferry__gcs_server_port(srv));
		fflush(stdout);
		ret = ferry__loop_run(loop);
	}
	ferry__metrics_server_stop(metrics); /* freed as the loop's end cancels its polls */
err_destroy_loop:
	ferry__loop_destroy(loop);
	ferry__gcs_server_destroy(srv);
err_close_sfd:
	close(sfd);
	return ret;
}

int main(int argc, char **argv)
{
	struct ferry__gcs_server_opts opts = {.bind_retry_ms = DEFAULT_BIND_RETRY_MS};
	const char *token_file = NULL;
	unsigned spin_us = FERRY_GCS_SPIN_US;
	char token[FERRY_TOKEN_MAX];
	int ret;

	if (ferry__args_help(argc, argv, "ferry-gcs", usage))
		return 0;
	if (parse_args(argc, argv, &opts, &spin_us, &token_file) < 0) {
		usage(stderr);
		return 2;
	}
	(void)ferry__net_raise_fd_limit("ferry-gcs", GCS_WANT_FDS);
	ret = ferry__token_read(token_file, token, sizeof(token));
	if (ret < 0)
		return 1;
	opts.token_len = (size_t)ret;
	opts.token = token;
	ret = run(&opts, spin_us);
	if (ret < 0) {
		FLOG_ERROR(COMP, "exiting: %s", ferry_strerror(-ret));
		return 1;
	}
	return 0;
}
