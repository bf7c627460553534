/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ferry-plasma: the object store as a process of its own. Serves the store on a Unix socket
 * until SIGINT or SIGTERM, then closes every connection and removes the socket; the shared
 * memory goes with the last client's mapping (memfds: nothing stale is left behind).
 * Settings come from FERRY_* variables (ferry_config_load()) with the flags on top.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ferry/config.h>

#include "common/metrics_http.h"
#include "common/net.h"
#include "common/util.h"
#include "common/version.h"
#include "plasma/server.h"
#include "plasma/store.h"

static const char usage[] =
	"usage: ferry-plasma [--socket PATH] [--memory SIZE] [--spill-dir DIR | --no-spill]\n"
	"                    [--spill-threshold PCT] [--spill-max SIZE] [--hugepages[=MODE]]\n"
	"                    [--max-clients N] [--max-clients-per-uid N] [--no-prefault]\n"
	"                    [--connect-timeout-ms MS] [--max-connecting N] [--frame-timeout-ms "
	"MS]\n"
	"                    [--stall-timeout-ms MS] [--max-queued SIZE] [--log SPEC]\n"
	"                    [--metrics-port P] [--metrics-ip ADDR]\n"
	"  --socket PATH          Unix socket to serve (FERRY_PLASMA_SOCKET)\n"
	"  --memory SIZE          arena size, e.g. 4G (FERRY_PLASMA_MEMORY; default 30% of RAM)\n"
	"  --spill-dir DIR        where primaries spill under pressure (FERRY_SPILL_DIR)\n"
	"  --no-spill             never spill: a full store answers -ENOSPC\n"
	"  --spill-threshold PCT  usage that starts spilling (FERRY_SPILL_THRESHOLD)\n"
	"  --spill-max SIZE       spill space allowed (default: the disk's)\n"
	"  --hugepages[=MODE]     require (alone), auto (the default: if available) or off\n"
	"  --max-clients N        client slots, at most 127 (default 63)\n"
	"  --max-clients-per-uid N  slots one uid may hold (default: half the client slots;\n"
	"                         root and the store's own uid are not capped)\n"
	"  --no-prefault          leave arena pages to first touch (faster start, slower puts)\n"
	"  --connect-timeout-ms MS  a connection must send PlasmaConnect within this\n"
	"                         (default 10000)\n"
	"  --max-connecting N     connections before PlasmaConnect at once; past it the oldest\n"
	"                         is closed (default 64)\n"
	"  --frame-timeout-ms MS  a frame begun and idle this long closes the connection\n"
	"                         (default 30000)\n"
	"  --stall-timeout-ms MS  replies left unsent past --max-queued this long close the\n"
	"                         connection (default 30000)\n"
	"  --max-queued SIZE      unsent replies past which a client's requests wait (default 8M)\n"
	"  --log SPEC             log levels, e.g. info or warn,plasma=debug (FERRY_LOG)\n"
	"  --metrics-port P       serve Prometheus GET /metrics there (bytes, objects, evictions,\n"
	"                         spills and restores of the store)\n"
	"  --metrics-ip ADDR      where the metrics port listens (default 0.0.0.0)\n"
	"  --help, --version      this text, or the version and commit; nothing else is done\n";

struct args {
	struct ferry_config cfg;	       /* defaults and FERRY_* */
	struct ferry__plasma_server_opts opts; /* what the server gets */
	bool no_spill;			       /* --no-spill */
	uint32_t metrics_port;		       /* --metrics-port; 0: none */
	const char *metrics_ip;		       /* --metrics-ip; NULL: 0.0.0.0 */
};

static int parse_hugepages(const char *mode, enum ferry_plasma_hugepages *out)
{
	if (!mode || !strcmp(mode, "require"))
		*out = FERRY_PLASMA_HUGEPAGES_REQUIRE;
	else if (!strcmp(mode, "auto"))
		*out = FERRY_PLASMA_HUGEPAGES_AUTO;
	else if (!strcmp(mode, "off"))
		*out = FERRY_PLASMA_HUGEPAGES_OFF;
	else
		return -EINVAL;
	return 0;
}

/* A positive number of at most UINT32_MAX - 1 (UINT_MAX means "none" to the connection). */
static int parse_u32(const char *arg, uint32_t *out)
{
	char *end;
	unsigned long long n;

	errno = 0;
	n = strtoull(arg, &end, 10);
	if (errno || end == arg || *end || n < 1 || n >= UINT32_MAX)
		return -EINVAL;
	*out = (uint32_t)n;
	return 0;
}

static int parse_limit(struct args *a, int opt, const char *arg)
{
	switch (opt) {
	case 'C':
		return parse_u32(arg, &a->opts.connect_timeout_ms);
	case 'N':
		return parse_u32(arg, &a->opts.max_connecting);
	case 'F':
		return parse_u32(arg, &a->opts.frame_timeout_ms);
	case 'S':
		return parse_u32(arg, &a->opts.stall_timeout_ms);
	case 'Q':
		if (ferry_parse_size(arg, &a->opts.max_queued_bytes) < 0 ||
		    !a->opts.max_queued_bytes)
			return -EINVAL;
		return 0;
	default:
		return -EINVAL;
	}
}

static int parse_option(struct args *a, int opt, const char *arg)
{
	char *end;
	unsigned long n;

	switch (opt) {
	case 's':
		return ferry_config_set(&a->cfg, "plasma_socket", arg);
	case 'm':
		return ferry_config_set(&a->cfg, "plasma_memory", arg);
	case 'd':
		return ferry_config_set(&a->cfg, "spill_dir", arg);
	case 'n':
		a->no_spill = true;
		return 0;
	case 't':
		return ferry_config_set(&a->cfg, "spill_threshold", arg);
	case 'x':
		return ferry_parse_size(arg, &a->opts.spill_max_bytes);
	case 'h':
		return parse_hugepages(arg, &a->opts.hugepages);
	case 'c':
		n = strtoul(arg, &end, 10);
		if (*end || n < 1 || n > 127)
			return -EINVAL;
		a->opts.max_clients = (uint32_t)n + 1; /* plus the store's own slot */
		return 0;
	case 'u':
		n = strtoul(arg, &end, 10);
		if (*end || n < 1 || n > 127)
			return -EINVAL;
		a->opts.max_clients_per_uid = (uint32_t)n;
		return 0;
	case 'p':
		a->opts.store_flags |= FERRY__PLASMA_STORE_NO_PREFAULT;
		return 0;
	case 'l':
		return ferry_log_configure(arg);
	case 'M':
		return ferry__parse_u32(arg, 65535, &a->metrics_port) < 0 || !a->metrics_port
			       ? -EINVAL
			       : 0;
	case 'I':
		if (!ferry__net_ip_valid(arg))
			return -EINVAL;
		a->metrics_ip = arg;
		return 0;
	default:
		return parse_limit(a, opt, arg);
	}
}

/* 0, or 1 for --help and 2 for --version (main answers them), or -EINVAL (said why). */
static int parse_args(int argc, char **argv, struct args *a)
{
	static const struct option longopts[] = {
		{"socket", required_argument, NULL, 's'},
		{"memory", required_argument, NULL, 'm'},
		{"spill-dir", required_argument, NULL, 'd'},
		{"no-spill", no_argument, NULL, 'n'},
		{"spill-threshold", required_argument, NULL, 't'},
		{"spill-max", required_argument, NULL, 'x'},
		{"hugepages", optional_argument, NULL, 'h'},
		{"max-clients", required_argument, NULL, 'c'},
		{"max-clients-per-uid", required_argument, NULL, 'u'},
		{"no-prefault", no_argument, NULL, 'p'},
		{"log", required_argument, NULL, 'l'},
		{"connect-timeout-ms", required_argument, NULL, 'C'},
		{"max-connecting", required_argument, NULL, 'N'},
		{"frame-timeout-ms", required_argument, NULL, 'F'},
		{"stall-timeout-ms", required_argument, NULL, 'S'},
		{"max-queued", required_argument, NULL, 'Q'},
		{"metrics-port", required_argument, NULL, 'M'},
		{"metrics-ip", required_argument, NULL, 'I'},
		{"help", no_argument, NULL, 'H'},
		{"version", no_argument, NULL, 'V'},
		{NULL, 0, NULL, 0},
	};
	int opt, at = -1;

	if (ferry_config_load(&a->cfg) < 0)
		return -EINVAL; /* the log said which variable */
	while ((opt = getopt_long(argc, argv, "h", longopts, &at)) != -1) {
		if (opt == 'H' || opt == 'V' || opt == 'h')
			return opt == 'V' ? 2 : 1; /* answered by main, before anything starts */
		if (opt == '?' || parse_option(a, opt, optarg) < 0) {
			if (opt != '?' && at >= 0)
				fprintf(stderr, "ferry-plasma: bad value for --%s: %s\n",
					longopts[at].name, optarg ? optarg : "");
			return -EINVAL;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "ferry-plasma: unexpected argument %s\n", argv[optind]);
		return -EINVAL;
	}
	a->opts.socket_path = a->cfg.plasma_socket;
	a->opts.memory_bytes = a->cfg.plasma_memory_bytes;
	a->opts.spill_dir = a->no_spill ? NULL : a->cfg.spill_dir;
	a->opts.spill_threshold_pct = a->cfg.spill_threshold_pct;
	return 0;
}

/* A scrape, on the store's loop: the store's rows. */
static void collect(struct ferry__metric_buf *b, void *arg)
{
	ferry__plasma_server_metrics(arg, b);
}

static int start_metrics(struct ferry__plasma_server *srv, const struct args *a,
			 struct ferry__metrics_server **out)
{
	struct ferry__metrics_opts mo = {.ip = a->metrics_ip,
					 .port = (uint16_t)a->metrics_port,
					 .collect = collect,
					 .arg = srv};
	int r = ferry__metrics_server_start(ferry__plasma_server_loop(srv), &mo, out);

	if (r == 0)
		printf("ferry-plasma: metrics on http://%s:%u/metrics\n",
		       a->metrics_ip ? a->metrics_ip : "0.0.0.0", ferry__metrics_server_port(*out));
	return r;
}

int main(int argc, char **argv)
{
	struct args a = {0};
	struct ferry__metrics_server *metrics = NULL;
	struct ferry__plasma_server *srv = NULL;
	sigset_t stop;
	int sig, r;

	r = parse_args(argc, argv, &a);
	if (r < 0) {
		fputs(usage, stderr);
		return 2;
	}
	if (r == 1)
		fputs(usage, stdout);
	else if (r == 2)
		ferry__version_print("ferry-plasma");
	if (r > 0)
		return 0;
	/* Each store client is a socket (and a process may hold several). */
	(void)ferry__net_raise_fd_limit("ferry-plasma", 4096ul);
	/* Blocked in every thread (the loop's inherits the mask): main takes them in sigwait. */
	sigemptyset(&stop);
	sigaddset(&stop, SIGINT);
	sigaddset(&stop, SIGTERM);
	sigaddset(&stop, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &stop, NULL);
	signal(SIGPIPE, SIG_IGN);
	r = ferry__plasma_server_create(&a.opts, &srv);
	if (r == 0 && a.metrics_port) /* on the store's loop, before it runs */
		r = start_metrics(srv, &a, &metrics);
	if (r == 0)
		r = ferry__plasma_server_start(srv);
	if (r < 0) {
		fprintf(stderr, "ferry-plasma: cannot start: %s\n", ferry_strerror(r));
		ferry__metrics_server_stop(metrics);
		ferry__plasma_server_destroy(srv);
		return 1;
	}
	/* Readiness for whoever started us: the socket accepts connections from now on. */
	printf("ferry-plasma: serving %s (pid %d, %" PRIu64 " MiB arena)\n", a.opts.socket_path,
	       (int)getpid(),
	       ferry__plasma_store_arena(ferry__plasma_server_store(srv))->size >> 20);
	fflush(stdout);
	do
		r = sigwait(&stop, &sig);
	while (r == EINTR);
	ferry__plasma_server_stop(srv); /* its loop's thread joined: the endpoint goes next */
	ferry__metrics_server_stop(metrics);
	ferry__plasma_server_destroy(srv);
	return 0;
}
